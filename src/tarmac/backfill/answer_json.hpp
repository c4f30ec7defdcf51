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

// Hands each line of a streamed answer that `piece` ends to `take` (without its '\n'): the first
// one with `partial` (what earlier pieces left unended) before it; keeps the rest in `partial`. Only
// the new piece is searched, so a line trickled in one byte at a time costs no more than one sent
// whole. False as soon as `take` is.
template <typename Take>
[[nodiscard]] bool each_line(std::string& partial, std::string_view piece, Take take) {
  for (std::size_t nl; (nl = piece.find('\n')) != std::string_view::npos; piece.remove_prefix(nl + 1)) {
    bool going_on = false;
    if (partial.empty()) {
      going_on = take(piece.substr(0, nl));
    } else {
      partial.append(piece.substr(0, nl));
      going_on = take(std::string_view(partial));
      partial.clear();
    }
    if (!going_on) return false;
  }
  partial.append(piece);
  return true;
}

// The bytes `text` takes once written back as a JSON string: a quote, a backslash and \b \f \n \r
// \t are 2, any other control character 6 ("\u0001"). What a reader's bound on an answer counts.
[[nodiscard]] inline std::size_t escaped_size(std::string_view text) {
  std::size_t n = text.size();
  for (const char c : text) {
    switch (c) {
      case '"': case '\\': case '\b': case '\f': case '\n': case '\r': case '\t': n += 1; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) n += 5;
    }
  }
  return n;
}

// `sent`, or a cancel when `cancel` was set meanwhile: a stream the cancel cut short may look like
// a server that closed its connection mid-answer, which would cost a retry instead of going back.
[[nodiscard]] inline Result<net::Response> unless_cancelled(Result<net::Response> sent, const net::Cancel* cancel) {
  if (cancel != nullptr && cancel->is_set()) {
    return make_error(Error::Code::Io, "the request was cancelled", net::Failure::Cancelled);
  }
  return sent;
}

}  // namespace tarmac::backfill::answer
