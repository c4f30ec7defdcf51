// The OpenAI-compatible protocol, streamed (openai.hpp, docs/backfill.md "Streaming"), as OpenAI's
// API reference describes chat.completion.chunk and text_completion streams, and as llama-server,
// vLLM and Ollama's compatible endpoint send them: "data: {json}" events separated by blank lines,
// a last one with "usage" (stream_options.include_usage), then "data: [DONE]".
#include "tarmac/backfill/openai.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tarmac/backfill/answer_json.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::backfill::openai {
namespace {

using json = nlohmann::json;

// What an event may hold beyond the text bound: ids, a usage object, a server's "timings".
constexpr std::size_t kLineSlack = 1 << 20;
// The most choices an answer is put back together with (a request's n): more is a failure.
constexpr long long kMaxChoices = 128;

// Whether `body` asks for what the reader does not put back together: such a request is sent whole.
bool needs_whole_answer(Endpoint endpoint, const json& body) {
  const auto set = [&](const char* key) {
    const auto it = body.find(key);
    return it != body.end() && !it->is_null() && *it != json(false) && !(it->is_array() && it->empty());
  };
  if (endpoint == Endpoint::ChatCompletions) {
    // Tool calls stream as pieces of their arguments, logprobs as lists per token.
    return set("tools") || set("functions") || set("logprobs") || set("top_logprobs");
  }
  return set("logprobs") || set("echo") || set("best_of");
}

std::string stream_error_body(std::string_view message, long status) {
  return answer::error_body(message, status, "stream_error");
}

// The text of `v` when it is a string (a delta's content is null in some first chunks).
const std::string* string_at(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
}

}  // namespace

Result<std::optional<std::string>> streamed_body(Endpoint endpoint, std::string_view text) {
  TARMAC_TRY_ASSIGN(json body, answer::parse_object(text, "the request's body"));
  if (needs_whole_answer(endpoint, body)) return std::optional<std::string>();
  body["stream"] = true;
  auto& options = body["stream_options"];
  if (!options.is_object()) options = json::object();
  options["include_usage"] = true;
  return std::optional<std::string>(util::json_text(body));
}

bool StreamReader::grow(std::size_t more) {
  if (kept_ + more > max_text_bytes_) return too_large("");
  kept_ += more;
  return true;
}

bool StreamReader::too_large(std::string_view what) {
  too_large_ = true;
  problem_ = what.empty() ? fmt::format("the answer is larger than {} bytes", max_text_bytes_) : std::string(what);
  return false;
}

bool StreamReader::feed(std::string_view piece) {
  if (!problem_.empty() && !server_error_) return false;
  if (!streamed_) {
    // Kept as it came until an event shows it is a stream: an error's body, or a server that
    // answered whole. Room for a first event as long as any (a stream's), checked at the end.
    if (raw_.size() + piece.size() > max_text_bytes_ + kLineSlack) return too_large("");
    raw_.append(piece);
  }
  if (!answer::each_line(partial_, piece, [this](std::string_view line) { return take_line(line); })) return false;
  if (partial_.size() > max_text_bytes_ + kLineSlack) {
    return too_large(fmt::format("an event of the answer is larger than {} bytes", max_text_bytes_ + kLineSlack));
  }
  return true;
}

// One line of the event stream: "data: ..." is an event (this reader's servers send one line per
// event); comments (":"), other fields (event:, id:, retry:) and blank lines are skipped, as are the
// lines of an answer that is not a stream.
bool StreamReader::take_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!line.starts_with("data:")) return true;
  line.remove_prefix(5);
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  if (!streamed_) {
    streamed_ = true;
    std::string().swap(raw_);
  }
  return take_event(line);
}

bool StreamReader::take_event(std::string_view data) {
  while (!data.empty() && (data.back() == ' ' || data.back() == '\r')) data.remove_suffix(1);
  if (data == "[DONE]") {
    done_ = true;
    return true;
  }
  if (done_) return true;  // nothing counts after the end
  auto doc = answer::parse_object(data, "an event of the answer");
  if (!doc.ok()) {
    problem_ = doc.error().message;
    return false;
  }
  if (const auto error = doc->find("error"); error != doc->end() && !error->is_null()) {
    // vLLM sends a failure mid-stream as such an event, then [DONE]: read on, the answer failed.
    if (problem_.empty()) {
      const std::string* message = error->is_object() ? string_at(*error, "message") : nullptr;
      problem_ = message != nullptr ? *message : error->is_string() ? error->get<std::string>() : util::json_text(*error);
    }
    server_error_ = true;
    return true;
  }
  if (id_.empty()) {
    if (const auto* id = string_at(*doc, "id")) id_ = id->substr(0, 256);
  }
  if (model_.empty()) {
    if (const auto* model = string_at(*doc, "model")) model_ = model->substr(0, 1024);
  }
  if (fingerprint_.empty()) {
    if (const auto* fp = string_at(*doc, "system_fingerprint")) fingerprint_ = fp->substr(0, 256);
  }
  if (created_ == 0) created_ = answer::count_of(*doc, "created").value_or(0);
  if (const auto usage = doc->find("usage"); usage != doc->end() && usage->is_object()) usage_ = util::json_text(*usage);
  const auto choices = doc->find("choices");
  if (choices == doc->end() || !choices->is_array()) return true;  // the usage event has none, or []
  const bool chat = endpoint_ == Endpoint::ChatCompletions;
  for (const auto& c : *choices) {
    if (!c.is_object()) continue;
    const auto index = c.find("index");
    const long long i = index != c.end() && index->is_number_integer() ? index->get<long long>() : 0;
    if (i < 0 || i >= kMaxChoices) {
      problem_ = fmt::format("an event of the answer names choice {} (at most {})", i, kMaxChoices);
      return false;
    }
    Choice& choice = choices_[i];
    const json* delta = &c;  // completions: the text is the choice's own
    if (chat) {
      const auto d = c.find("delta");
      if (d == c.end() || !d->is_object()) continue;
      delta = &*d;
      if (const auto* role = string_at(*delta, "role")) choice.role = role->substr(0, 64);
      if (const auto* reasoning = string_at(*delta, "reasoning_content")) {
        if (!grow(reasoning->size())) return false;
        choice.reasoning += *reasoning;
        choice.has_reasoning = true;
      }
    }
    if (const auto* text = string_at(*delta, chat ? "content" : "text")) {
      if (!grow(text->size())) return false;
      choice.text += *text;
    }
    if (const auto* reason = string_at(c, "finish_reason")) choice.finish_reason = reason->substr(0, 64);
  }
  return true;
}

Result<std::string> StreamReader::finish() {
  if (problem_.empty() && !partial_.empty()) (void)take_line(partial_);
  partial_.clear();
  if (!problem_.empty()) return make_error(Error::Code::External, problem_);
  if (!streamed_) {
    if (raw_.size() > max_text_bytes_) too_large("");
    if (too_large_) return make_error(Error::Code::External, problem_);
    return std::move(raw_);
  }
  if (!done_) return make_error(Error::Code::External, "the stream ended before its \"data: [DONE]\"");
  const bool chat = endpoint_ == Endpoint::ChatCompletions;
  json choices = json::array();
  for (auto& [index, c] : choices_) {
    json choice{{"index", index}, {"finish_reason", c.finish_reason ? json(*c.finish_reason) : json(nullptr)}};
    if (chat) {
      choice["message"] = {{"role", c.role}, {"content", std::move(c.text)}};
      if (c.has_reasoning) choice["message"]["reasoning_content"] = std::move(c.reasoning);
    } else {
      choice["text"] = std::move(c.text);
      choice["logprobs"] = nullptr;
    }
    choices.push_back(std::move(choice));
  }
  json body{{"id", id_},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices", std::move(choices)}};
  if (!fingerprint_.empty()) body["system_fingerprint"] = fingerprint_;
  // The server's own usage, as it would have answered unstreamed; absent when it sent none.
  if (usage_) body["usage"] = json::parse(*usage_, nullptr, false);
  return util::json_text(body);
}

Result<net::Response> perform(net::Request http, Endpoint endpoint, std::string_view body, bool stream) {
  std::optional<std::string> streamed;
  if (stream) {
    // A body that is no object was refused at submit; sent as it is, the server says what is wrong.
    if (auto b = streamed_body(endpoint, body); b.ok()) streamed = std::move(*b);
  }
  if (!streamed) {
    http.body = std::string(body);
    return net::perform(http);
  }
  http.body = std::move(*streamed);
  StreamReader reader(endpoint, http.max_body_bytes);
  http.on_data = [&reader](std::string_view piece) { return reader.feed(piece); };
  auto sent = net::perform(http);
  if (!sent.ok()) return answer::failed_stream(sent.take_error(), reader, "stream_error");
  auto answer = reader.finish();
  if (reader.too_large()) return make_error(Error::Code::Io, reader.problem(), net::Failure::Refused);
  if (sent->status < 200 || sent->status > 299) {
    // An error's body is the server's JSON, not a stream: kept as the unstreamed answer would be.
    if (answer.ok() && !reader.streamed()) return net::Response{sent->status, std::move(*answer)};
    const std::string why = reader.problem().empty() ? fmt::format("the server answered HTTP {}", sent->status)
                                                     : reader.problem();
    return net::Response{sent->status, stream_error_body(why, sent->status)};
  }
  if (answer.ok()) return net::Response{sent->status, std::move(*answer)};
  if (!reader.problem().empty()) return net::Response{502, stream_error_body(reader.problem(), 502)};
  // The connection closed cleanly mid-answer (a server restarting): as a lost connection.
  return make_error(Error::Code::Io, answer.error().message, net::Failure::Connection);
}

}  // namespace tarmac::backfill::openai
