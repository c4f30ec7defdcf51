// A batch's input (src/tarmac/backfill/batch_input.cpp): the OpenAI Batch JSONL format and texts
// with a template, read strictly; every bad input is refused with the line it is about.
#include "tarmac/backfill/batch_input.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace tarmac::backfill {
namespace {

using json = nlohmann::json;

std::string chat_line(const std::string& id, const std::string& extra_body = "") {
  return R"({"custom_id": ")" + id +
         R"(", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "hi"}])" +
         extra_body + "}}";
}

// The refusal of `input` (which must be refused) and the line it names.
std::pair<std::string, std::size_t> refusal(const Result<std::vector<BatchRequest>>& r) {
  EXPECT_FALSE(r.ok());
  if (r.ok()) return {"", 0};
  EXPECT_EQ(r.error().code, Error::Code::Invalid);
  return {r.error().message, problem_line(r.error())};
}

TEST(BatchInput, ReadsTheOpenAIBatchFormatInOrderAndSetsTheModel) {
  const std::string input =
      chat_line("a") + "\n" +
      R"({"custom_id":"b","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"Once","max_tokens":5}})" +
      "\n";
  auto r = parse_jsonl(input, "m");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2U);
  EXPECT_EQ((*r)[0].custom_id, "a");
  EXPECT_EQ((*r)[0].endpoint, Endpoint::ChatCompletions);
  EXPECT_EQ((*r)[0].line, 1U);
  EXPECT_EQ(json::parse((*r)[0].body)["model"], "m");  // set from --model
  EXPECT_EQ((*r)[1].endpoint, Endpoint::Completions);
  EXPECT_EQ(json::parse((*r)[1].body)["max_tokens"], 5);  // the rest of the body as it was
  EXPECT_EQ((*r)[1].line, 2U);
}

TEST(BatchInput, SkipsBlankLinesAndCarriageReturnsButCountsThemAsLines) {
  auto r = parse_jsonl("\n" + chat_line("a") + "\r\n  \n" + chat_line("b"), "m");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2U);
  EXPECT_EQ((*r)[0].line, 2U);
  EXPECT_EQ((*r)[1].line, 4U);  // the last line needs no newline
}

TEST(BatchInput, ABrokenLineIsRefusedWithItsLineAndColumn) {
  auto [words, line] = refusal(parse_jsonl(chat_line("a") + "\n" + R"({"custom_id": "b", "method": )" + "\n", "m"));
  EXPECT_EQ(line, 2U);
  EXPECT_NE(words.find("line 2: not valid JSON: column"), std::string::npos) << words;
}

TEST(BatchInput, ADuplicateCustomIdNamesBothLines) {
  auto [words, line] = refusal(parse_jsonl(chat_line("a") + "\n" + chat_line("b") + "\n" + chat_line("a"), "m"));
  EXPECT_EQ(line, 3U);
  EXPECT_NE(words.find("custom_id \"a\" is already on line 1"), std::string::npos) << words;
}

TEST(BatchInput, OnlyTheTwoCompletionUrlsAndPostAreAccepted) {
  auto [url_words, url_line] = refusal(parse_jsonl(
      R"({"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"input":"x"}})", "m"));
  EXPECT_EQ(url_line, 1U);
  EXPECT_NE(url_words.find("url \"/v1/embeddings\""), std::string::npos) << url_words;
  auto [method_words, method_line] = refusal(parse_jsonl(
      R"({"custom_id":"a","method":"GET","url":"/v1/completions","body":{"prompt":"x"}})", "m"));
  EXPECT_NE(method_words.find("method \"GET\" is not \"POST\""), std::string::npos) << method_words;
}

TEST(BatchInput, EachMissingOrMistypedFieldIsNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"method":"POST","url":"/v1/completions","body":{"prompt":"x"}})", "no custom_id"},
      {R"({"custom_id":7,"method":"POST","url":"/v1/completions","body":{"prompt":"x"}})", "custom_id is not a string"},
      {R"({"custom_id":"","method":"POST","url":"/v1/completions","body":{"prompt":"x"}})", "custom_id is empty"},
      {R"({"custom_id":"a\u001b[2J","method":"POST","url":"/v1/completions","body":{"prompt":"x"}})",
       "control character"},
      {R"({"custom_id":"a","url":"/v1/completions","body":{"prompt":"x"}})", "no method"},
      {R"({"custom_id":"a","method":"POST","body":{"prompt":"x"}})", "no url"},
      {R"({"custom_id":"a","method":"POST","url":"/v1/completions"})", "no body"},
      {R"({"custom_id":"a","method":"POST","url":"/v1/completions","body":"x"})", "body is not a JSON object"},
      {R"({"custom_id":"a","method":"POST","url":"/v1/completions","body":{"max_tokens":3}})", "body.prompt"},
      {R"({"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}})", "body.messages"},
      {R"({"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"x","stream":true}})",
       "body.stream"},
      {R"({"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"x","model":"other"}})",
       "body.model \"other\" is not --model \"m\""},
      {R"({"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"x"},"extra":1})",
       "unknown key \"extra\""},
      {R"(["custom_id","a"])", "not a JSON object"},
  };
  for (const auto& [line_text, expected] : cases) {
    auto [words, line] = refusal(parse_jsonl(line_text, "m"));
    EXPECT_EQ(line, 1U) << line_text;
    EXPECT_NE(words.find(expected), std::string::npos) << line_text << " -> " << words;
  }
}

TEST(BatchInput, NonUtf8IsRefusedBeforeItIsParsed) {
  auto [words, line] = refusal(parse_jsonl(chat_line("a") + "\n" + chat_line("b\xff"), "m"));
  EXPECT_EQ(line, 2U);
  EXPECT_NE(words.find("not valid UTF-8"), std::string::npos) << words;
}

TEST(BatchInput, EveryBoundIsHeldAndNamed) {
  InputLimits small;
  small.max_line_bytes = 200;
  small.max_requests = 2;
  small.max_custom_id_bytes = 4;
  small.max_input_bytes = 1000;
  small.max_depth = 8;
  const auto [long_words, long_line] =
      refusal(parse_jsonl(chat_line("a", R"(, "pad": ")" + std::string(200, 'x') + "\""), "m", small));
  EXPECT_EQ(long_line, 1U);
  EXPECT_NE(long_words.find("long, more than the 200 B a request may be"), std::string::npos) << long_words;
  auto [count_words, count_line] =
      refusal(parse_jsonl(chat_line("a") + "\n" + chat_line("b") + "\n" + chat_line("c"), "m", small));
  EXPECT_EQ(count_line, 3U);
  EXPECT_NE(count_words.find("more than 2 requests"), std::string::npos) << count_words;
  EXPECT_NE(refusal(parse_jsonl(chat_line("abcde"), "m", small)).first.find("longer than 4 bytes"), std::string::npos);
  auto [size_words, size_line] = refusal(parse_jsonl(std::string(1001, '\n'), "m", small));
  EXPECT_EQ(size_line, 0U);
  EXPECT_NE(size_words.find("more than the"), std::string::npos) << size_words;
  // Deep nesting would overflow the stack when the body is written back out: refused first.
  const std::string deep = chat_line("a", R"(, "x": )" + std::string(9, '[') + std::string(9, ']'));
  EXPECT_NE(refusal(parse_jsonl(deep, "m", small)).first.find("nested deeper than 8"), std::string::npos);
  // Brackets inside strings are not nesting.
  EXPECT_TRUE(parse_jsonl(chat_line("a", R"(, "x": "[[[[[[[[[[[[[\"]]")"), "m", small).ok());
}

TEST(BatchInput, ABodyNestedAHundredThousandDeepIsRefusedNotACrash) {
  // Inside `body`, which is written back out recursively (json_text): without the depth check this
  // overflows the stack. A line of brackets alone would be refused as "not a JSON object" first.
  const std::string hostile = chat_line("a", R"(, "x": )" + std::string(100000, '[') + std::string(100000, ']'));
  auto [words, line] = refusal(parse_jsonl(hostile, "m"));
  EXPECT_EQ(line, 1U);
  EXPECT_NE(words.find("nested deeper"), std::string::npos) << words;
}

// A template of many slots multiplies each text: the request it would make is bounded before it is
// built (the review's C1: 10,922 slots times a 200 MiB text is 2 TB), and the bodies of a batch
// together are bounded even when each is under the bound of one request.
std::string many_slots(std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += "{text}";
  return out;
}

TEST(BatchInput, ATextATemplateWouldMultiplyPastARequestIsRefusedBeforeItIsFilled) {
  InputLimits small;
  small.max_line_bytes = 1000;
  // 100 slots x 100 KiB: 10 MB, refused from the bound, before any of it is built.
  const std::string texts = "[\"" + std::string(100 << 10, 'x') + "\"]";
  auto [words, line] = refusal(parse_texts(texts, many_slots(100), "m", small));
  EXPECT_EQ(line, 0U);
  EXPECT_NE(words.find("text 0 (counting from 0) would make a request of"), std::string::npos) << words;
  EXPECT_NE(words.find("holds it 100 times"), std::string::npos) << words;
  // Escaping counts: 150 quotes take 300 bytes in JSON, so 4 slots of them pass 1000 before filling.
  std::string escaped = "[\"";
  for (int i = 0; i < 150; ++i) escaped += "\\\"";
  escaped += "\"]";
  EXPECT_NE(refusal(parse_texts(escaped, many_slots(4), "m", small)).first.find("would make"), std::string::npos);
  // Under the bound, filled: 150 quotes in 2 slots (600 bytes and the envelope).
  EXPECT_TRUE(parse_texts(escaped, many_slots(2), "m", small).ok());
}

TEST(BatchInput, TheBodiesOfABatchTogetherAreBoundedForTextsAndForJsonl) {
  InputLimits small;
  small.max_batch_body_bytes = 10000;
  // 20 texts of 95 bytes through a template of 8 slots: each body about 850 bytes, under a request's
  // bound, together 17 KB from an input of 2 KB.
  std::string texts = "[";
  for (int i = 0; i < 20; ++i) texts += (i > 0 ? ",\"" : "\"") + std::string(95, 'a' + i % 26) + "\"";
  texts += "]";
  auto [words, line] = refusal(parse_texts(texts, many_slots(8), "m", small));
  EXPECT_NE(words.find("the requests up to text 12 (counting from 0) come to"), std::string::npos) << words;
  EXPECT_NE(words.find("more than the"), std::string::npos) << words;
  EXPECT_TRUE(parse_texts(texts, many_slots(4), "m", small).ok()) << "20 x 4 slots x 95 B fit";
  // JSONL: the bodies gain their model; the line where the total passes the bound is named.
  std::string input;
  for (int i = 0; i < 20; ++i) input += chat_line("r" + std::to_string(i), R"(, "pad": ")" + std::string(500, 'p') + "\"") + "\n";
  auto [jsonl_words, jsonl_line] = refusal(parse_jsonl(input, "m", small));
  EXPECT_GT(jsonl_line, 1U);
  EXPECT_LE(jsonl_line, 20U);
  EXPECT_NE(jsonl_words.find("the requests up to here come to"), std::string::npos) << jsonl_words;
}

TEST(BatchInput, AnEmptyInputOrABadModelIsRefusedAsAWhole) {
  EXPECT_NE(refusal(parse_jsonl("\n\n", "m")).first.find("no requests"), std::string::npos);
  EXPECT_NE(refusal(parse_jsonl(chat_line("a"), "")).first.find("no --model"), std::string::npos);
  EXPECT_NE(refusal(parse_jsonl(chat_line("a"), "a model")).first.find("printable ASCII"), std::string::npos);
  EXPECT_NE(refusal(parse_jsonl(chat_line("a"), "--config=/etc/x.yaml")).first.find("starts with '-'"),
            std::string::npos)
      << "a managed server's {model} would be an option";
}

TEST(BatchInput, TextsBecomeChatRequestsThroughTheTemplateWithIdsFromTheirIndex) {
  auto r = parse_texts(R"(["first doc", "second {text} doc"])", "Summarise: {text}\n---\n{text}", "llama3");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2U);
  EXPECT_EQ((*r)[0].custom_id, "text-0");
  EXPECT_EQ((*r)[1].custom_id, "text-1");
  EXPECT_EQ((*r)[1].line, 2U);
  const auto body = json::parse((*r)[1].body);
  EXPECT_EQ(body["model"], "llama3");
  EXPECT_EQ(body["messages"][0]["role"], "user");
  // Every {text} of the template is filled; a {text} inside a text is left as it is.
  EXPECT_EQ(body["messages"][0]["content"], "Summarise: second {text} doc\n---\nsecond {text} doc");
}

TEST(BatchInput, TextsMustBeAJsonArrayOfStrings) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"texts": ["a"]})", "not a JSON array of strings"},
      {R"("a")", "not a JSON array of strings"},
      {R"(["a", 3])", "text 1 (counting from 0) is a number"},
      {R"(["a", ["b"]])", "text 1 is an array"},
      {R"(["a", {"b": 1}])", "text 1 (counting from 0) is an object"},
      {R"(["a",)", "not valid JSON"},
      {R"(["a"] ["b"])", "not valid JSON"},
      {R"([])", "no texts"},
  };
  for (const auto& [texts, expected] : cases) {
    auto r = parse_texts(texts, "S: {text}", "m");
    ASSERT_FALSE(r.ok()) << texts;
    EXPECT_NE(r.error().message.find(expected), std::string::npos) << texts << " -> " << r.error().message;
  }
}

TEST(BatchInput, TheTemplateAndEachTextAreBounded) {
  EXPECT_NE(refusal(parse_texts(R"(["a"])", "no slot", "m")).first.find("no {text}"), std::string::npos);
  EXPECT_NE(refusal(parse_texts(R"(["a"])", "\xff{text}", "m")).first.find("template is not valid UTF-8"),
            std::string::npos);
  InputLimits small;
  small.max_requests = 2;
  small.max_line_bytes = 100;
  EXPECT_NE(refusal(parse_texts(R"(["a","b","c"])", "{text}", "m", small)).first.find("more than 2 texts"),
            std::string::npos);
  EXPECT_NE(refusal(parse_texts("[\"" + std::string(100, 'x') + "\"]", "{text}", "m", small)).first.find("text 0"),
            std::string::npos);
  EXPECT_NE(refusal(parse_texts("[\"\xc3\"]", "{text}", "m")).first.find("not valid UTF-8"), std::string::npos);
}

TEST(BatchInput, UrlsAndEndpointsRoundTrip) {
  for (auto e : {Endpoint::ChatCompletions, Endpoint::Completions}) EXPECT_EQ(endpoint_from_url(to_url(e)), e);
  EXPECT_FALSE(endpoint_from_url("/v1/chat/completions/").has_value());
}

}  // namespace
}  // namespace tarmac::backfill
