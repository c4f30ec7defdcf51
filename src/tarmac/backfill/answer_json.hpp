// What the protocol readers (ollama.*, openai.*) share for a server's answers, every one hostile:
// a JSON object read with its depth bounded first, a token count believed only within range, and
// OpenAI's error body that the output holds for a failed request whatever the server.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "tarmac/backfill/batch_input.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::backfill::answer {

// Deeper answers are refused before nlohmann parses them (its writer recurses): real ones are 3-4 deep.
inline constexpr std::size_t kMaxDepth = 64;

// `text` as a JSON object; Invalid names `what` when it is none or is nested too deeply.
[[nodiscard]] inline Result<nlohmann::json> parse_object(std::string_view text, std::string_view what) {
  if (json_nesting_depth(text) > kMaxDepth) {
    return make_error(Error::Code::Invalid, fmt::format("{} is nested too deeply", what));
  }
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return make_error(Error::Code::Invalid, fmt::format("{} is not a JSON object", what));
  }
  return doc;
}

// doc[key] as a token count: believed up to a trillion tokens, so that prompt + completion and the
// sums of a batch stay in range; nullopt when absent, negative, larger or not a whole number.
[[nodiscard]] inline std::optional<long long> count_of(const nlohmann::json& doc, const char* key) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_number_integer() || it->get<long long>() < 0 || it->get<long long>() > (1LL << 40)) {
    return std::nullopt;
  }
  return it->get<long long>();
}

// OpenAI's error body ({"error": {"message", "type", "code"}}) for a failure of type `type`.
[[nodiscard]] inline std::string error_body(std::string_view message, long status, std::string_view type) {
  return util::json_text(nlohmann::json{{"error", {{"message", message}, {"type", type}, {"code", status}}}});
}

// A streamed request whose transfer failed (`error`, net::perform's): when the stream's reader
// stopped it on a piece that is not JSON (its problem, not too_large), that is the server's failure
// mid-answer, a 502 with OpenAI's error body of `type`, sent again like any 5xx; else the error.
template <typename Reader>
[[nodiscard]] Result<net::Response> failed_stream(Error error, const Reader& reader, std::string_view type) {
  const auto* failure = error.cause_as<net::Failure>();
  if (failure != nullptr && *failure == net::Failure::Refused && !reader.too_large() && !reader.problem().empty()) {
    return net::Response{502, error_body(reader.problem(), 502, type)};
  }
  return error;
}

// Appends `piece` of a streamed answer to `partial` (the line not yet ended) and hands each line it
// ends to `take` (without its '\n'), keeping what follows the last one; false as soon as `take` is.
template <typename Take>
[[nodiscard]] bool each_line(std::string& partial, std::string_view piece, Take take) {
  partial.append(piece);
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    if (!take(std::string_view(partial).substr(start, nl - start))) return false;
  }
  partial.erase(0, start);
  return true;
}

}  // namespace tarmac::backfill::answer
