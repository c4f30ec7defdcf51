// A batch's input, checked (batch_input.hpp, docs/backfill.md "Input").
#include "tarmac/backfill/batch_input.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::backfill {

using json = nlohmann::json;

namespace {

Error problem(std::size_t line, std::string message) {
  if (line > 0) message = fmt::format("line {}: {}", line, message);
  return make_error(Error::Code::Invalid, std::move(message), InputProblem{line});
}

// nlohmann's DOM builder, keeping the words of a syntax error (its column, what it read) instead of
// throwing them: libraries here never throw. sax_parse calls parse_error through this type.
struct DomKeepingError : nlohmann::detail::json_sax_dom_parser<json> {
  explicit DomKeepingError(json& document) : json_sax_dom_parser(document, false) {}
  std::string what;
  template <typename Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const Exception& ex) {
    what = ex.what();
    return false;
  }
};

// nlohmann says "[json.exception.parse_error.101] parse error at line 1, column 7: ..."; a line is
// parsed alone, so only the column and what follows mean anything to the user.
std::string syntax_words(const std::string& what) {
  const auto column = what.find("column ");
  return column == std::string::npos ? what : what.substr(column);
}

bool has_control_character(std::string_view text) {
  for (const unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// The request's object from one line, or what is wrong with the line as text.
Result<json> parse_line(std::string_view text, std::size_t line, const InputLimits& limits) {
  if (text.size() > limits.max_line_bytes) {
    return problem(line, fmt::format("{} long, more than the {} a request may be", util::format_bytes(text.size()),
                                     util::format_bytes(limits.max_line_bytes)));
  }
  if (util::valid_utf8(text) != text) return problem(line, "not valid UTF-8");
  if (json_nesting_depth(text) > limits.max_depth) {
    return problem(line, fmt::format("nested deeper than {} arrays and objects", limits.max_depth));
  }
  json doc;
  DomKeepingError sax(doc);
  if (!json::sax_parse(text, &sax) || sax.is_errored()) {
    return problem(line, fmt::format("not valid JSON: {}", syntax_words(sax.what)));
  }
  if (!doc.is_object()) return problem(line, "not a JSON object");
  return doc;
}

Result<std::string> custom_id_of(const json& request, std::size_t line, const InputLimits& limits) {
  const auto it = request.find("custom_id");
  if (it == request.end()) return problem(line, "no custom_id");
  if (!it->is_string()) return problem(line, "custom_id is not a string");
  const auto& id = it->get_ref<const std::string&>();
  if (id.empty()) return problem(line, "custom_id is empty");
  if (id.size() > limits.max_custom_id_bytes) {
    return problem(line, fmt::format("custom_id is longer than {} bytes", limits.max_custom_id_bytes));
  }
  if (has_control_character(id)) return problem(line, "custom_id holds a control character");
  return id;
}

Result<Endpoint> endpoint_of(const json& request, std::size_t line) {
  const auto method = request.find("method");
  if (method == request.end()) return problem(line, "no method");
  if (!method->is_string() || method->get_ref<const std::string&>() != "POST") {
    return problem(line, fmt::format("method {} is not \"POST\"", util::json_text(*method)));
  }
  const auto url = request.find("url");
  if (url == request.end()) return problem(line, "no url");
  const auto endpoint = url->is_string() ? endpoint_from_url(url->get_ref<const std::string&>()) : std::nullopt;
  if (!endpoint) {
    return problem(line, fmt::format("url {} is not \"/v1/chat/completions\" or \"/v1/completions\"",
                                     util::json_text(*url)));
  }
  return *endpoint;
}

// The body, checked for its endpoint, with `model` set.
Result<std::string> body_of(json request, Endpoint endpoint, std::string_view model, std::size_t line) {
  const auto it = request.find("body");
  if (it == request.end()) return problem(line, "no body");
  json& body = *it;
  if (!body.is_object()) return problem(line, "body is not a JSON object");
  const auto m = body.find("model");
  if (m == body.end()) {
    body["model"] = std::string(model);
  } else if (!m->is_string() || m->get_ref<const std::string&>() != model) {
    return problem(line, fmt::format("body.model {} is not --model \"{}\": a batch has one model",
                                     util::json_text(*m), model));
  }
  if (endpoint == Endpoint::ChatCompletions) {
    const auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array() || messages->empty()) {
      return problem(line, "body.messages is not a non-empty array (url /v1/chat/completions)");
    }
  } else {
    const auto prompt = body.find("prompt");
    if (prompt == body.end() || !(prompt->is_string() || prompt->is_array())) {
      return problem(line, "body.prompt is not a string or an array (url /v1/completions)");
    }
  }
  const auto stream = body.find("stream");
  if (stream != body.end() && *stream != json(false)) {
    return problem(line, "body.stream is set: a batch's answers are whole, never streamed");
  }
  return util::json_text(body);
}

Result<BatchRequest> parse_request(std::string_view text, std::size_t line, std::string_view model,
                                   const InputLimits& limits) {
  TARMAC_TRY_ASSIGN(json request, parse_line(text, line, limits));
  for (const auto& [key, value] : request.items()) {
    if (key != "custom_id" && key != "method" && key != "url" && key != "body") {
      return problem(line, fmt::format("unknown key {} (a request has custom_id, method, url and body)",
                                       util::json_text(json(key))));
    }
  }
  BatchRequest out;
  out.line = line;
  TARMAC_TRY_ASSIGN(out.custom_id, custom_id_of(request, line, limits));
  TARMAC_TRY_ASSIGN(out.endpoint, endpoint_of(request, line));
  TARMAC_TRY_ASSIGN(out.body, body_of(std::move(request), out.endpoint, model, line));
  return out;
}

Result<void> check_size(std::string_view input, const InputLimits& limits) {
  if (input.size() <= limits.max_input_bytes) return {};
  return problem(0, fmt::format("the input is {}, more than the {} a batch may hold",
                                util::format_bytes(input.size()), util::format_bytes(limits.max_input_bytes)));
}

// The texts of a JSON array of strings, read without building a document: each string is kept as
// it arrives, anything else ends the parse with its words.
class TextsReader {
 public:
  TextsReader(std::vector<std::string>& texts, const InputLimits& limits) : texts_(texts), limits_(limits) {}
  [[nodiscard]] const std::string& problem_words() const { return words_; }

  bool string(std::string& s) {
    if (depth_ != 1) return refuse("the texts file is not a JSON array of strings");
    if (texts_.size() >= limits_.max_requests) {
      return refuse(fmt::format("more than {} texts", limits_.max_requests));
    }
    texts_.push_back(std::move(s));
    return true;
  }
  bool start_array(std::size_t /*size*/) {
    if (depth_ != 0) return refuse(fmt::format("text {} is an array, not a string", texts_.size()));
    ++depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool null() { return not_a_string("null"); }
  bool boolean(bool /*v*/) { return not_a_string("true or false"); }
  bool number_integer(json::number_integer_t /*v*/) { return not_a_string("a number"); }
  bool number_unsigned(json::number_unsigned_t /*v*/) { return not_a_string("a number"); }
  bool number_float(json::number_float_t /*v*/, const std::string& /*s*/) { return not_a_string("a number"); }
  bool binary(json::binary_t& /*v*/) { return not_a_string("binary"); }
  bool start_object(std::size_t /*size*/) { return not_a_string("an object"); }
  bool key(std::string& /*k*/) { return false; }
  bool end_object() { return false; }
  template <typename Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const Exception& ex) {
    if (words_.empty()) words_ = fmt::format("not valid JSON: {}", ex.what());
    return false;
  }

 private:
  bool refuse(std::string words) {
    words_ = std::move(words);
    return false;
  }
  bool not_a_string(const char* what) {
    if (depth_ == 0) return refuse("the texts file is not a JSON array of strings");
    return refuse(fmt::format("text {} (counting from 0) is {}, not a string", texts_.size(), what));
  }
  std::vector<std::string>& texts_;
  const InputLimits& limits_;
  std::string words_;
  int depth_ = 0;
};

constexpr std::string_view kSlot = "{text}";

// The most bytes `text` takes once written as a JSON string's contents (nlohmann writes UTF-8 as it
// is; a quote or backslash takes 2, a control character at most 6: \u001f).
std::size_t json_escaped_bytes(std::string_view text) {
  std::size_t n = 0;
  for (const unsigned char c : text) n += c == '"' || c == '\\' ? 2 : c < 0x20 ? 6 : 1;
  return n;
}

std::size_t slot_count(std::string_view template_text) {
  std::size_t n = 0;
  for (auto at = template_text.find(kSlot); at != std::string_view::npos; at = template_text.find(kSlot, at + kSlot.size())) ++n;
  return n;
}

// The most bytes a filled template's message takes in a body, known before it is filled: the
// template's own text plus each slot's copy of the text (a template of 10,000 slots makes a
// 100 KiB text 1 GB, which is refused here and never built).
std::size_t filled_bound(std::size_t template_bytes, std::size_t slots, std::string_view text) {
  return template_bytes + slots * json_escaped_bytes(text);
}

// The refusal of a batch whose bodies together, `total` once the request on `line` (a text's: 0,
// and `where` names it) is counted, pass max_batch_body_bytes.
Error batch_too_large(std::size_t total, std::size_t line, std::string_view where, const InputLimits& limits) {
  return problem(line, fmt::format("the requests {}come to {}, more than the {} a batch may hold", where,
                                   util::format_bytes(total), util::format_bytes(limits.max_batch_body_bytes)));
}

std::string fill_template(std::string_view template_text, std::string_view text) {
  std::string out;
  std::size_t from = 0;
  for (auto at = template_text.find(kSlot); at != std::string_view::npos; at = template_text.find(kSlot, from)) {
    out.append(template_text.substr(from, at - from)).append(text);
    from = at + kSlot.size();
  }
  out.append(template_text.substr(from));
  return out;
}

Result<void> check_template(std::string_view template_text, const InputLimits& limits) {
  if (template_text.size() > limits.max_template_bytes) {
    return problem(0, fmt::format("the template is longer than {}", util::format_bytes(limits.max_template_bytes)));
  }
  if (util::valid_utf8(template_text) != template_text) return problem(0, "the template is not valid UTF-8");
  if (template_text.find("{text}") == std::string_view::npos) {
    return problem(0, "the template has no {text} to put each text in");
  }
  return {};
}

}  // namespace

std::size_t json_nesting_depth(std::string_view text) {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::string_view to_url(Endpoint endpoint) {
  return endpoint == Endpoint::ChatCompletions ? "/v1/chat/completions" : "/v1/completions";
}

std::optional<Endpoint> endpoint_from_url(std::string_view url) {
  if (url == "/v1/chat/completions") return Endpoint::ChatCompletions;
  if (url == "/v1/completions") return Endpoint::Completions;
  return std::nullopt;
}

Result<void> check_model(std::string_view model, const InputLimits& limits) {
  if (model.empty()) return problem(0, "no --model");
  if (model.size() > limits.max_model_bytes) {
    return problem(0, fmt::format("the model's name is longer than {} bytes", limits.max_model_bytes));
  }
  for (const unsigned char c : model) {
    if (c <= 0x20 || c >= 0x7f) return problem(0, "the model's name holds a character other than printable ASCII");
  }
  // A managed server gets the model as one word of its command line ({model}): one that starts with
  // '-' would be read as an option of the user's choosing.
  if (model.front() == '-') return problem(0, "the model's name starts with '-'");
  return {};
}

Result<std::vector<BatchRequest>> parse_jsonl(std::string_view input, std::string_view model,
                                              const InputLimits& limits) {
  TARMAC_TRY(check_model(model, limits));
  TARMAC_TRY(check_size(input, limits));
  std::vector<BatchRequest> out;
  std::unordered_map<std::string, std::size_t> line_of;  // custom_id -> its line
  std::size_t body_bytes = 0;
  std::size_t line = 0;
  for (std::size_t from = 0; from < input.size();) {
    const auto end = input.find('\n', from);
    std::string_view text = input.substr(from, end == std::string_view::npos ? std::string_view::npos : end - from);
    from = end == std::string_view::npos ? input.size() : end + 1;
    ++line;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (out.size() >= limits.max_requests) {
      return problem(line, fmt::format("more than {} requests, the most a batch may hold", limits.max_requests));
    }
    TARMAC_TRY_ASSIGN(BatchRequest request, parse_request(text, line, model, limits));
    const auto [it, added] = line_of.emplace(request.custom_id, line);
    if (!added) {
      return problem(line, fmt::format("custom_id {} is already on line {}", util::json_text(json(request.custom_id)),
                                       it->second));
    }
    body_bytes += request.body.size();
    if (body_bytes > limits.max_batch_body_bytes) return batch_too_large(body_bytes, line, "up to here ", limits);
    out.push_back(std::move(request));
  }
  if (out.empty()) return problem(0, "the input holds no requests");
  return out;
}

Result<std::vector<BatchRequest>> parse_texts(std::string_view texts, std::string_view template_text,
                                              std::string_view model, const InputLimits& limits) {
  TARMAC_TRY(check_model(model, limits));
  TARMAC_TRY(check_template(template_text, limits));
  TARMAC_TRY(check_size(texts, limits));
  if (util::valid_utf8(texts) != texts) return problem(0, "the texts file is not valid UTF-8");
  std::vector<std::string> read;
  TextsReader reader(read, limits);
  if (!json::sax_parse(texts, &reader)) return problem(0, reader.problem_words());
  if (read.empty()) return problem(0, "the texts file holds no texts");
  const std::size_t slots = slot_count(template_text);
  const std::size_t template_bytes = json_escaped_bytes(template_text) - slots * kSlot.size();
  const auto too_long = [&](std::size_t i, std::size_t size, std::string_view would, std::string_view why) {
    return problem(0, fmt::format("text {} (counting from 0) {} a request of {}, more than the {} a request may be{}",
                                  i, would, util::format_bytes(size), util::format_bytes(limits.max_line_bytes), why));
  };
  std::vector<BatchRequest> out;
  out.reserve(read.size());
  std::size_t body_bytes = 0;
  for (std::size_t i = 0; i < read.size(); ++i) {
    if (const auto bound = filled_bound(template_bytes, slots, read[i]); bound > limits.max_line_bytes) {
      return too_long(i, bound, "would make", fmt::format(" (the template holds it {} times)", slots));
    }
    json body = {{"model", std::string(model)},
                 {"messages", json::array({json{{"role", "user"}, {"content", fill_template(template_text, read[i])}}})}};
    BatchRequest request{fmt::format("text-{}", i), Endpoint::ChatCompletions, util::json_text(body), i + 1};
    if (request.body.size() > limits.max_line_bytes) return too_long(i, request.body.size(), "makes", "");
    body_bytes += request.body.size();
    if (body_bytes > limits.max_batch_body_bytes) {
      return batch_too_large(body_bytes, 0, fmt::format("up to text {} (counting from 0) ", i), limits);
    }
    out.push_back(std::move(request));
  }
  return out;
}

std::size_t problem_line(const Error& error) {
  const auto* p = error.cause_as<InputProblem>();
  return p != nullptr ? p->line : 0;
}

}  // namespace tarmac::backfill
