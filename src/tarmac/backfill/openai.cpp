// The OpenAI-compatible protocol, streamed (openai.hpp, docs/backfill.md "Streaming"), as OpenAI's
// API reference describes chat.completion.chunk and text_completion streams, and as llama-server,
// vLLM and Ollama's compatible endpoint send them: "data: {json}" events separated by blank lines,
// a last one with "usage" (stream_options.include_usage), then "data: [DONE]".
#include "tarmac/backfill/openai.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "tarmac/backfill/answer_json.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::backfill::openai {
namespace {

using json = nlohmann::json;

// The most one event may hold: servers send one token or a few a event (and ids, a usage object,
// llama-server's "timings"), so 1 MiB is far beyond any; it also bounds what one parse may take.
// A server that sends a whole long answer as one event is read with stream = false.
constexpr std::size_t kMaxEventBytes = 1 << 20;
// The most a usage object may take: a few counts and their details.
constexpr std::size_t kMaxUsageBytes = 64 << 10;
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
  if (done_) return true;  // nothing after [DONE] counts, nor is kept
  if (!streamed_) {
    // Kept as it came until an event shows it is a stream: an error's body, or a server that
    // answered whole (bounded as an unstreamed body at finish(); room here for a first event).
    if (raw_.size() + piece.size() > max_text_bytes_ + kMaxEventBytes) return too_large("");
    raw_.append(piece);
  }
  if (!answer::each_line(partial_, piece, [this](std::string_view line) { return take_line(line); })) return false;
  if (streamed_ && partial_.size() > kMaxEventBytes) {
    return too_large(fmt::format("an event of the answer is larger than {} bytes", kMaxEventBytes));
  }
  return true;
}

// One line of the event stream: "data: ..." is an event (this reader's servers send one line per
// event); "event: error" makes the next one an error, and llama-server's "error: {...}" line is one;
// comments (":"), other fields (id:, retry:) and blank lines are skipped, as are the lines of an
// answer that is not a stream.
bool StreamReader::take_line(std::string_view line) {
  if (done_) return true;  // nothing after [DONE] counts
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) next_is_error_ = false;  // a blank line ends the event an "event:" named
  const bool data = line.starts_with("data:");
  const bool error = line.starts_with("error:");
  if (line.starts_with("event:")) {
    std::string_view name = line.substr(6);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    next_is_error_ = name == "error";
  }
  if (!data && !error) return true;
  line.remove_prefix(data ? 5 : 6);
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  if (line.size() > kMaxEventBytes) {
    return too_large(fmt::format("an event of the answer is larger than {} bytes", kMaxEventBytes));
  }
  if (!streamed_) {
    streamed_ = true;
    std::string().swap(raw_);
  }
  if (error || std::exchange(next_is_error_, false)) {
    take_error(line);
    return true;
  }
  return take_event(line);
}

// A failure the server reports within its stream (vLLM: a data event with "error"; llama-server: an
// "error:" line; "event: error"), then often [DONE]: read on, the answer failed.
void StreamReader::take_error(std::string_view data) {
  server_error_ = true;
  if (!problem_.empty()) return;
  auto doc = answer::parse_object(data, "an error event");
  const json* error = nullptr;
  if (doc.ok()) {
    const auto e = doc->find("error");
    error = e != doc->end() && !e->is_null() ? &*e : &*doc;
  }
  const std::string* message = error != nullptr && error->is_object() ? string_at(*error, "message") : nullptr;
  if (message != nullptr) {
    problem_ = message->substr(0, 1024);
  } else if (error != nullptr && error->is_string()) {
    problem_ = error->get_ref<const std::string&>().substr(0, 1024);
  } else {
    problem_ = fmt::format("the server reported an error mid-answer: {}", util::json_text(json(std::string(data.substr(0, 1024)))));
  }
  if (problem_.empty()) problem_ = "the server reported an error mid-answer";
}

bool StreamReader::take_event(std::string_view data) {
  while (!data.empty() && (data.back() == ' ' || data.back() == '\r')) data.remove_suffix(1);
  if (data == "[DONE]") {
    done_ = true;
    return true;
  }
  auto doc = answer::parse_object(data, "an event of the answer");
  if (!doc.ok()) {
    problem_ = doc.error().message;
    return false;
  }
  if (const auto error = doc->find("error"); error != doc->end() && !error->is_null()) {
    take_error(data);
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
  if (const auto usage = doc->find("usage"); usage != doc->end() && usage->is_object()) {
    std::string text = util::json_text(*usage);
    if (text.size() > kMaxUsageBytes) return too_large(fmt::format("the answer's usage is larger than {} bytes", kMaxUsageBytes));
    usage_ = std::move(text);
  }
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
    if (const auto* reason = string_at(c, "finish_reason")) choice.finish_reason = reason->substr(0, 64);
    const json* delta = &c;  // completions: the text is the choice's own
    if (chat) {
      const auto d = c.find("delta");
      if (d == c.end() || !d->is_object()) continue;
      delta = &*d;
      if (const auto* role = string_at(*delta, "role")) choice.role = role->substr(0, 64);
      // A thinking model's reasoning: llama-server's and older vLLM's reasoning_content, newer
      // vLLM's reasoning (current vLLM sends both, the same text: one is taken), kept under the
      // name it first came with.
      const char* key = string_at(*delta, "reasoning_content") != nullptr ? "reasoning_content"
                        : string_at(*delta, "reasoning") != nullptr   ? "reasoning"
                                                                        : nullptr;
      if (key != nullptr) {
        if (choice.reasoning_key.empty()) choice.reasoning_key = key;
        const std::string& reasoning = *string_at(*delta, key);
        if (!grow(answer::escaped_size(reasoning))) return false;
        choice.reasoning += reasoning;
      }
    }
    if (const auto* text = string_at(*delta, chat ? "content" : "text")) {
      if (!grow(answer::escaped_size(*text))) return false;
      choice.text += *text;
    }
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
  // Every generation ends with its reason (stop, length, ...): a stream without one for each choice
  // was cut short by the server, however it ended.
  if (choices_.empty() || std::any_of(choices_.begin(), choices_.end(), [](const auto& c) { return !c.second.finish_reason; })) {
    problem_ = "the stream ended without a finish reason for each of its choices";
    return make_error(Error::Code::External, problem_);
  }
  const bool chat = endpoint_ == Endpoint::ChatCompletions;
  json choices = json::array();
  for (auto& [index, c] : choices_) {
    json choice{{"index", index}, {"finish_reason", c.finish_reason ? json(*c.finish_reason) : json(nullptr)}};
    if (chat) {
      choice["message"] = {{"role", c.role}, {"content", std::move(c.text)}};
      if (!c.reasoning_key.empty()) choice["message"][c.reasoning_key] = std::move(c.reasoning);
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
    return answer::unless_cancelled(net::perform(http), http.cancel);
  }
  http.body = std::move(*streamed);
  StreamReader reader(endpoint, http.max_body_bytes);
  http.on_data = [&reader](std::string_view piece) { return reader.feed(piece); };
  http.answered = [&reader] { return reader.ended(); };  // a server that holds the connection after it
  auto sent = answer::unless_cancelled(net::perform(http), http.cancel);
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
