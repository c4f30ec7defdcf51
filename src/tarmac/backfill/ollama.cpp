// Ollama's native protocol (ollama.hpp, docs/backfill.md "Ollama's protocol"), as its API
// documentation describes it: /api/chat and /api/generate streamed as NDJSON, /api/ps, keep_alive.
#include "tarmac/backfill/ollama.hpp"

#include <algorithm>
#include <atomic>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tarmac/backfill/answer_json.hpp"
#include "tarmac/host/tcp_owner.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::backfill::ollama {
namespace {

using json = nlohmann::json;
using answer::count_of;
using answer::parse_object;

// What a line may hold beyond the text bound: a final object's counts and its "context" tokens.
constexpr std::size_t kLineSlack = 1 << 20;

// OpenAI sampling fields and Ollama's names for them, in `options`.
constexpr std::pair<const char*, const char*> kOptions[] = {
    {"max_tokens", "num_predict"},     {"max_completion_tokens", "num_predict"},
    {"temperature", "temperature"},    {"top_p", "top_p"},
    {"seed", "seed"},                  {"presence_penalty", "presence_penalty"},
    {"frequency_penalty", "frequency_penalty"},
};

Error invalid(std::string message) { return make_error(Error::Code::Invalid, std::move(message)); }

Result<json> options_of(const json& body) {
  json options = json::object();
  for (const auto& [openai, native] : kOptions) {
    const auto it = body.find(openai);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_number()) return invalid(fmt::format("body.{} is not a number", openai));
    options[native] = *it;
  }
  if (const auto stop = body.find("stop"); stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      options["stop"] = json::array({*stop});
    } else if (stop->is_array() && std::all_of(stop->begin(), stop->end(), [](const json& s) { return s.is_string(); })) {
      options["stop"] = *stop;
    } else {
      return invalid("body.stop is not a string or an array of strings");
    }
  }
  return options;
}

// OpenAI's content: a string, or parts of which Ollama takes only text.
Result<std::string> content_of(const json& message) {
  const auto content = message.find("content");
  if (content == message.end() || content->is_null()) return std::string();
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) return invalid("a message's content is not a string or an array of parts");
  std::string text;
  for (const auto& part : *content) {
    const auto type = part.is_object() ? part.find("type") : part.end();
    const auto value = part.is_object() ? part.find("text") : part.end();
    if (type == part.end() || *type != "text" || value == part.end() || !value->is_string()) {
      return invalid("a message part other than text: the ollama protocol here sends text only");
    }
    text += (text.empty() ? "" : "\n") + value->get<std::string>();
  }
  return text;
}

Result<json> messages_of(const json& body) {
  const auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array()) return invalid("body.messages is not an array");
  json out = json::array();
  for (const auto& m : *messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return invalid("a message is not an object with a role");
    }
    TARMAC_TRY_ASSIGN(std::string content, content_of(m));
    out.push_back({{"role", m["role"]}, {"content", std::move(content)}});
  }
  return out;
}

Result<std::string> prompt_of(const json& body) {
  const auto prompt = body.find("prompt");
  if (prompt != body.end() && prompt->is_string()) return prompt->get<std::string>();
  if (prompt != body.end() && prompt->is_array() && prompt->size() == 1 && prompt->front().is_string()) {
    return prompt->front().get<std::string>();
  }
  return invalid("body.prompt is not one string: the ollama protocol answers one prompt a request");
}

// Ollama's "format": "json" for OpenAI's json_object, the schema itself for json_schema.
std::optional<json> format_of(const json& body) {
  const auto rf = body.find("response_format");
  if (rf == body.end() || !rf->is_object()) return std::nullopt;
  const auto type = rf->find("type");
  if (type == rf->end()) return std::nullopt;
  if (*type == "json_object") return json("json");
  if (*type == "json_schema" && rf->contains("json_schema") && (*rf)["json_schema"].is_object()) {
    const auto& js = (*rf)["json_schema"];
    if (js.contains("schema") && js["schema"].is_object()) return js["schema"];
  }
  return std::nullopt;
}

// OpenAI's finish_reason for Ollama's done_reason.
std::string_view finish_reason(std::string_view done_reason) { return done_reason == "length" ? "length" : "stop"; }

// Unique enough for an output line's response id: OpenAI's are opaque too.
std::string response_id(Endpoint endpoint) {
  static std::atomic<unsigned long long> next{0};
  return fmt::format("{}-ollama-{}-{}", endpoint == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl", util::wall_ms(),
                     next++);
}

std::string error_body(std::string_view message, long status) { return answer::error_body(message, status, "ollama_error"); }

}  // namespace

Result<NativeRequest> to_native(Endpoint endpoint, std::string_view openai_body) {
  TARMAC_TRY_ASSIGN(json body, parse_object(openai_body, "the request's body"));
  const auto model = body.find("model");
  if (model == body.end() || !model->is_string()) return invalid("body.model is not a string");
  if (const auto n = body.find("n"); n != body.end() && !n->is_null() && *n != json(1)) {
    return invalid("body.n is not 1: the ollama protocol answers with one choice");
  }
  if (const auto tools = body.find("tools"); tools != body.end() && !tools->is_null() && !tools->empty()) {
    return invalid("body.tools: tool calls are not translated to the ollama protocol here");
  }
  json native{{"model", *model}, {"stream", true}};
  TARMAC_TRY_ASSIGN(json options, options_of(body));
  if (!options.empty()) native["options"] = std::move(options);
  if (auto format = format_of(body)) native["format"] = std::move(*format);
  NativeRequest out;
  out.model = model->get<std::string>();
  if (endpoint == Endpoint::ChatCompletions) {
    out.path = "/api/chat";
    TARMAC_TRY_ASSIGN(native["messages"], messages_of(body));
  } else {
    out.path = "/api/generate";
    TARMAC_TRY_ASSIGN(native["prompt"], prompt_of(body));
    if (const auto suffix = body.find("suffix"); suffix != body.end() && suffix->is_string()) native["suffix"] = *suffix;
  }
  out.body = util::json_text(native);
  return out;
}

bool StreamReader::feed(std::string_view piece) {
  if (!problem_.empty() && !server_error_) return false;
  if (!answer::each_line(partial_, piece, [this](std::string_view line) { return take_line(line); })) return false;
  if (partial_.size() > max_text_bytes_ + kLineSlack) {
    too_large_ = true;
    problem_ = fmt::format("a line of the answer is larger than {} bytes", max_text_bytes_ + kLineSlack);
    return false;
  }
  return true;
}

bool StreamReader::take_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  if (line.empty()) return true;
  auto doc = parse_object(line, "a line of the answer");
  if (!doc.ok()) {
    problem_ = doc.error().message;
    return false;
  }
  if (const auto error = doc->find("error"); error != doc->end()) {
    // Kept, and the stream read on: an HTTP error's body is this one line.
    if (problem_.empty()) problem_ = error->is_string() ? error->get<std::string>() : util::json_text(*error);
    server_error_ = true;
    return true;
  }
  const json* text = nullptr;
  if (endpoint_ == Endpoint::ChatCompletions) {
    const auto message = doc->find("message");
    if (message != doc->end() && message->is_object() && message->contains("content")) text = &(*message)["content"];
  } else if (const auto response = doc->find("response"); response != doc->end()) {
    text = &*response;
  }
  if (text != nullptr && text->is_string()) {
    kept_ += answer::escaped_size(text->get_ref<const std::string&>());  // as it is written back
    if (kept_ > max_text_bytes_) {
      too_large_ = true;
      problem_ = fmt::format("the answer is larger than {} bytes", max_text_bytes_);
      return false;
    }
    text_ += text->get_ref<const std::string&>();
  }
  if (const auto done = doc->find("done"); done != doc->end() && *done == json(true)) {
    done_ = true;
    const auto reason = doc->find("done_reason");
    done_reason_ = reason != doc->end() && reason->is_string() ? reason->get<std::string>() : "stop";
    prompt_tokens_ = count_of(*doc, "prompt_eval_count");
    completion_tokens_ = count_of(*doc, "eval_count");
  }
  return true;
}

Result<std::string> StreamReader::finish(std::string_view model) {
  if (!problem_.empty()) return make_error(Error::Code::External, problem_);
  if (!partial_.empty() && !take_line(partial_)) return make_error(Error::Code::External, problem_);
  partial_.clear();
  if (!problem_.empty()) return make_error(Error::Code::External, problem_);
  if (!done_) return make_error(Error::Code::External, "the stream ended before its final (\"done\": true) object");
  json choice{{"index", 0}, {"finish_reason", finish_reason(done_reason_)}};
  const bool chat = endpoint_ == Endpoint::ChatCompletions;
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  } else {
    choice["text"] = text_;
    choice["logprobs"] = nullptr;
  }
  json body{{"id", response_id(endpoint_)},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", util::wall_ms() / 1000},
            {"model", model},
            {"choices", json::array({std::move(choice)})}};
  // Ollama leaves a count out when it has none (a prompt answered from its cache): 0 then.
  const long long prompt = prompt_tokens_.value_or(0);
  const long long completion = completion_tokens_.value_or(0);
  body["usage"] = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  return util::json_text(body);
}

Result<net::Response> perform(net::Request http, std::string_view server_url_base, Endpoint endpoint,
                              std::string_view openai_body) {
  TARMAC_TRY_ASSIGN(NativeRequest native, to_native(endpoint, openai_body));
  StreamReader reader(endpoint, http.max_body_bytes);
  http.method = "POST";
  http.url = server_url(server_url_base, native.path);
  http.body = native.body;
  http.on_data = [&reader](std::string_view piece) { return reader.feed(piece); };
  http.answered = [&reader] { return reader.ended(); };  // a server that holds the connection after it
  auto sent = answer::unless_cancelled(net::perform(http), http.cancel);
  if (!sent.ok()) return answer::failed_stream(sent.take_error(), reader, "ollama_error");
  // An HTTP error's body is one {"error": ...} object, its last line often without a newline.
  auto body = reader.finish(native.model);
  if (sent->status < 200 || sent->status > 299) {
    const std::string why = reader.problem().empty() ? fmt::format("the server answered HTTP {}", sent->status)
                                                     : reader.problem();
    return net::Response{sent->status, error_body(why, sent->status)};
  }
  if (body.ok()) return net::Response{sent->status, std::move(*body)};
  if (reader.server_error() || !reader.problem().empty()) return net::Response{502, error_body(body.error().message, 502)};
  // The connection closed cleanly mid-answer (a server restarting): as a lost connection.
  return make_error(Error::Code::Io, body.error().message, net::Failure::Connection);
}

namespace {

// With a server_user, a connection whose other end is not that account's process sends nothing (a
// user who took the port while the server was down hears neither the unload nor the models' names).
Result<void> only_to_server_user(const ServerConfig& server, net::Request& http) {
  if (server.server_user.empty()) return {};
  TARMAC_TRY_ASSIGN(const uid_t uid, server_user_uid(server.server_user));
  http.check_connection = [uid](const net::Connection& c) {
    return host::tcp_owner({c.peer_ip, c.peer_port}, {c.local_ip, c.local_port}) == uid;
  };
  return {};
}

}  // namespace

Result<void> unload(const ServerConfig& server, std::string_view model, long long timeout_ms) {
  net::Request http;
  http.url = server_url(server.url, "/api/generate");
  http.headers = {"Content-Type: application/json"};
  http.body = util::json_text(json{{"model", model}, {"keep_alive", 0}, {"stream", false}});
  http.timeout_ms = timeout_ms;
  TARMAC_TRY(only_to_server_user(server, http));
  TARMAC_TRY_ASSIGN(net::Response answer, net::perform(http));
  auto doc = parse_object(answer.body, "the answer to an unload");
  if (answer.status != 200) {
    const std::string why = doc.ok() && doc->contains("error") ? util::json_text((*doc)["error"]) : answer.body.substr(0, 200);
    return make_error(Error::Code::External,
                      fmt::format("unloading {} from {}: HTTP {}: {}", model, server.url, answer.status, why));
  }
  if (!doc.ok()) return make_error(Error::Code::External, fmt::format("unloading {}: {}", model, doc.error().message));
  return {};
}

Result<std::vector<LoadedModel>> loaded(const ServerConfig& server, long long timeout_ms) {
  net::Request http;
  http.method = "GET";
  http.url = server_url(server.url, "/api/ps");
  http.timeout_ms = timeout_ms;
  TARMAC_TRY(only_to_server_user(server, http));
  TARMAC_TRY_ASSIGN(net::Response answer, net::perform(http));
  if (answer.status != 200) {
    return make_error(Error::Code::External, fmt::format("{}/api/ps: HTTP {}", server.url, answer.status));
  }
  auto doc = parse_object(answer.body, "/api/ps's answer");
  const auto bad = [&] { return make_error(Error::Code::External, fmt::format("{}/api/ps: not a list of models", server.url)); };
  if (!doc.ok() || !doc->contains("models") || !(*doc)["models"].is_array()) return bad();
  std::vector<LoadedModel> out;
  for (const auto& m : (*doc)["models"]) {
    if (!m.is_object() || !m.contains("name") || !m["name"].is_string()) return bad();
    LoadedModel model;
    model.name = m["name"].get<std::string>();
    model.size_bytes = count_of(m, "size").value_or(0);
    model.size_vram_bytes = count_of(m, "size_vram").value_or(0);
    out.push_back(std::move(model));
  }
  return out;
}

}  // namespace tarmac::backfill::ollama
