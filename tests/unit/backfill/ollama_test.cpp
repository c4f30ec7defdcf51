// Ollama's native protocol (ollama.hpp): the translation both ways, the stream reader on hostile
// answers, and perform/unload/loaded against a local fake that answers as Ollama's API documents.
#include "tarmac/backfill/ollama.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../support/http_server.hpp"

namespace tarmac::backfill::ollama {
namespace {

using json = nlohmann::json;
using testing::FakeLlm;

json native_of(Endpoint endpoint, const json& openai) {
  auto native = to_native(endpoint, openai.dump());
  EXPECT_TRUE(native.ok()) << native.error().message;
  return native.ok() ? json::parse(native->body) : json();
}

TEST(Ollama, ChatBodyIsStreamedWithItsOptionsMapped) {
  const json openai{{"model", "tiny"},
                    {"messages", {{{"role", "system"}, {"content", "be brief"}},
                                  {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
                    {"max_tokens", 12},
                    {"temperature", 0.5},
                    {"top_p", 0.9},
                    {"seed", 7},
                    {"stop", "END"},
                    {"response_format", {{"type", "json_object"}}}};
  auto native = to_native(Endpoint::ChatCompletions, openai.dump());
  ASSERT_TRUE(native.ok()) << native.error().message;
  EXPECT_EQ(native->path, "/api/chat");
  EXPECT_EQ(native->model, "tiny");
  const json body = json::parse(native->body);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["messages"][1]["content"], "a\nb");
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_EQ(body["options"]["num_predict"], 12);
  EXPECT_EQ(body["options"]["temperature"], 0.5);
  EXPECT_EQ(body["options"]["top_p"], 0.9);
  EXPECT_EQ(body["options"]["seed"], 7);
  EXPECT_EQ(body["options"]["stop"], json::array({"END"}));
  EXPECT_EQ(body["format"], "json");
  EXPECT_FALSE(body.contains("max_tokens"));
}

TEST(Ollama, CompletionBodyGoesToGenerate) {
  const json body = native_of(Endpoint::Completions, {{"model", "tiny"}, {"prompt", {"hello"}}, {"stop", {"a", "b"}}});
  EXPECT_EQ(body["prompt"], "hello");
  EXPECT_EQ(body["options"]["stop"], json::array({"a", "b"}));
  EXPECT_FALSE(body.contains("keep_alive"));  // the server's own default
  EXPECT_EQ(to_native(Endpoint::Completions, R"({"model":"m","prompt":"x"})")->path, "/api/generate");
}

TEST(Ollama, RefusesWhatItsProtocolCannotSay) {
  const auto refused = [](Endpoint e, const std::string& body, const std::string& why) {
    auto native = to_native(e, body);
    ASSERT_FALSE(native.ok()) << body;
    EXPECT_NE(native.error().message.find(why), std::string::npos) << native.error().message;
  };
  refused(Endpoint::Completions, R"({"model":"m","prompt":["a","b"]})", "one prompt");
  refused(Endpoint::Completions, R"({"model":"m","prompt":"a","n":2})", "body.n");
  refused(Endpoint::ChatCompletions,
          R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
          "text only");
  refused(Endpoint::ChatCompletions, R"({"model":"m","messages":[{"content":"x"}]})", "role");
  refused(Endpoint::ChatCompletions, R"({"model":"m","messages":[],"temperature":"hot"})", "temperature");
  refused(Endpoint::ChatCompletions, R"({"messages":[]})", "body.model");
  refused(Endpoint::ChatCompletions, R"({"model":"m","messages":[],"tools":[{"type":"function"}]})", "body.tools");
  refused(Endpoint::ChatCompletions, std::string(100, '[') + std::string(100, ']'), "nested");
}

constexpr const char* kChatStream =
    R"({"model":"tiny","created_at":"2026-12-02T00:00:00Z","message":{"role":"assistant","content":"Hel"},"done":false})"
    "\n"
    R"({"model":"tiny","created_at":"2026-12-02T00:00:00Z","message":{"role":"assistant","content":"lo"},"done":false})"
    "\n"
    R"({"model":"tiny","created_at":"2026-12-02T00:00:01Z","message":{"role":"assistant","content":""},"done":true,)"
    R"("done_reason":"length","total_duration":5,"prompt_eval_count":9,"eval_count":2,"eval_duration":3})"
    "\n";

TEST(Ollama, StreamBecomesAChatCompletionWhateverItsPieces) {
  const std::string stream = kChatStream;
  for (const std::size_t step : {std::size_t{1}, std::size_t{7}, stream.size()}) {
    StreamReader reader(Endpoint::ChatCompletions, 1000);
    for (std::size_t at = 0; at < stream.size(); at += step) ASSERT_TRUE(reader.feed(stream.substr(at, step)));
    auto body = reader.finish("tiny");
    ASSERT_TRUE(body.ok()) << body.error().message;
    const json doc = json::parse(*body);
    EXPECT_EQ(doc["object"], "chat.completion");
    EXPECT_EQ(doc["model"], "tiny");
    EXPECT_EQ(doc["choices"][0]["message"]["content"], "Hello");
    EXPECT_EQ(doc["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(doc["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(doc["usage"], (json{{"prompt_tokens", 9}, {"completion_tokens", 2}, {"total_tokens", 11}}));
  }
}

TEST(Ollama, GenerateStreamBecomesATextCompletion) {
  StreamReader reader(Endpoint::Completions, 1000);
  ASSERT_TRUE(reader.feed(R"({"response":"4","done":false})" "\n"
                          R"({"response":"2","done":true,"done_reason":"stop","context":[1,2],"eval_count":2})"));
  auto body = reader.finish("m");
  ASSERT_TRUE(body.ok()) << body.error().message;
  const json doc = json::parse(*body);
  EXPECT_EQ(doc["object"], "text_completion");
  EXPECT_EQ(doc["choices"][0]["text"], "42");
  EXPECT_EQ(doc["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(doc["usage"]["prompt_tokens"], 0);  // left out by the server (its prompt cache): 0
  EXPECT_EQ(doc["usage"]["completion_tokens"], 2);
}

TEST(Ollama, HostileStreamsAreFailures) {
  {
    StreamReader reader(Endpoint::Completions, 1000);
    EXPECT_TRUE(reader.feed(R"({"response":"a","done":false})" "\n" R"({"error":"the runner crashed"})" "\n"));
    EXPECT_TRUE(reader.server_error());
    auto body = reader.finish("m");
    ASSERT_FALSE(body.ok());
    EXPECT_EQ(body.error().message, "the runner crashed");
  }
  {
    StreamReader reader(Endpoint::Completions, 1000);
    EXPECT_TRUE(reader.feed(R"({"response":"a","done":false})" "\n"));
    auto body = reader.finish("m");
    ASSERT_FALSE(body.ok());
    EXPECT_NE(body.error().message.find("ended before"), std::string::npos);
  }
  {
    StreamReader reader(Endpoint::Completions, 1000);
    EXPECT_FALSE(reader.feed("<html>502</html>\n"));
    EXPECT_FALSE(reader.too_large());
  }
  {
    StreamReader reader(Endpoint::Completions, 4);
    EXPECT_FALSE(reader.feed(R"({"response":"12345","done":false})" "\n"));
    EXPECT_TRUE(reader.too_large());
  }
}

FakeLlm::Reply ndjson(std::string body, std::string status = "200 OK") {
  return FakeLlm::Reply{std::move(status), std::move(body)};
}

net::Request request_for(const FakeLlm&) {
  net::Request http;
  http.headers = {"Content-Type: application/json"};
  http.timeout_ms = 5000;
  return http;
}

TEST(Ollama, PerformSpeaksNativeAndAnswersOpenAi) {
  if (!net::available().ok()) GTEST_SKIP() << net::available().error().message;
  FakeLlm fake([](int, const std::string&) { return ndjson(kChatStream); });
  auto sent = perform(request_for(fake), fake.url() + "/", Endpoint::ChatCompletions,
                      R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2})");
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  EXPECT_EQ(sent->status, 200);
  EXPECT_EQ(json::parse(sent->body)["choices"][0]["message"]["content"], "Hello");
  const json asked = json::parse(fake.bodies().at(0));
  EXPECT_EQ(asked["stream"], true);
  EXPECT_EQ(asked["options"]["num_predict"], 2);
}

TEST(Ollama, PerformTurnsErrorsIntoOpenAiErrors) {
  if (!net::available().ok()) GTEST_SKIP() << net::available().error().message;
  FakeLlm fake([](int n, const std::string&) {
    if (n == 0) return ndjson(R"({"error":"model \"x\" not found, try pulling it first"})", "404 Not Found");
    return ndjson(R"({"response":"a","done":false})" "\n" R"({"error":"out of memory"})" "\n");
  });
  auto missing = perform(request_for(fake), fake.url(), Endpoint::Completions, R"({"model":"x","prompt":"p"})");
  ASSERT_TRUE(missing.ok()) << missing.error().message;
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(json::parse(missing->body)["error"]["message"].get<std::string>().find("not found"), std::string::npos);
  auto crashed = perform(request_for(fake), fake.url(), Endpoint::Completions, R"({"model":"x","prompt":"p"})");
  ASSERT_TRUE(crashed.ok()) << crashed.error().message;
  EXPECT_EQ(crashed->status, 502);  // sent again like any server error
  EXPECT_EQ(json::parse(crashed->body)["error"]["message"], "out of memory");
}

TEST(Ollama, UnloadAndLoaded) {
  if (!net::available().ok()) GTEST_SKIP() << net::available().error().message;
  FakeLlm fake([](int n, const std::string&) {
    if (n == 0) return ndjson(R"({"model":"tiny","response":"","done":true,"done_reason":"unload"})");
    if (n == 1) return ndjson(R"({"models":[{"name":"tiny:latest","size":100,"size_vram":60},{"name":"b"}]})");
    return ndjson(R"({"models":"nope"})");
  });
  ServerConfig server;
  server.url = fake.url();
  auto unloaded = unload(server, "tiny");
  ASSERT_TRUE(unloaded.ok()) << unloaded.error().message;
  EXPECT_EQ(json::parse(fake.bodies().at(0)), (json{{"model", "tiny"}, {"keep_alive", 0}, {"stream", false}}));
  auto models = loaded(server);
  ASSERT_TRUE(models.ok()) << models.error().message;
  ASSERT_EQ(models->size(), 2U);
  EXPECT_EQ((*models)[0].name, "tiny:latest");
  EXPECT_EQ((*models)[0].size_vram_bytes, 60);
  EXPECT_EQ((*models)[1].size_vram_bytes, 0);
  EXPECT_FALSE(loaded(server).ok());
}

}  // namespace
}  // namespace tarmac::backfill::ollama
