// One escaping function per place text leaves tarmac. Process names, command lines, users, job and
// container names come from other people (a command line is any bytes but NUL, not necessarily
// UTF-8): every such string goes out through the function of its sink, never raw.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tarmac::util {

// `text` as valid UTF-8: each byte that does not belong to a well-formed sequence (a stray
// continuation byte, a truncated or overlong sequence, a surrogate, past U+10FFFF) becomes U+FFFD.
[[nodiscard]] std::string valid_utf8(std::string_view text);

// The longest prefix of the valid UTF-8 `text` that has at most `max_bytes` bytes and ends between
// two characters (a cut must never leave half a character behind).
[[nodiscard]] std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

// A Prometheus label value, ready to go between the quotes: valid UTF-8 (a single invalid byte
// makes Prometheus refuse the whole scrape), cut at a character boundary with "..." when longer
// than `max_bytes` before escaping, and \ " and newline escaped as the text format wants.
[[nodiscard]] std::string prometheus_label_value(std::string_view text,
                                                 std::size_t max_bytes = std::string_view::npos);

// Text for a terminal: control characters (C0, DEL, C1), invalid UTF-8 bytes and the bidirectional
// overrides shown escaped (\x1b, \u009b, \u202e), so that nobody's process can move the cursor,
// retitle or clear the terminal of the person who runs status, jobs or report.
[[nodiscard]] std::string terminal_text(std::string_view text);

// As terminal_text, but a message of several lines keeps its line breaks: each line is escaped
// on its own. For messages that quote others' text over several lines (an agent's refusal that
// lists each GPU and who holds it).
[[nodiscard]] std::string terminal_lines(std::string_view text);

// Text for HTML, in an element or an attribute value: & < > " ' as entities, valid UTF-8.
[[nodiscard]] std::string html_text(std::string_view text);

// Text for a Slack message: & < > as &amp; &lt; &gt; (what Slack documents), so that a process
// named "<!channel>" or "<http://x|y>" is shown, not obeyed.
[[nodiscard]] std::string slack_text(std::string_view text);

// A JSON document as text. nlohmann refuses invalid UTF-8 by throwing (type_error 316), so every
// document tarmac writes goes through here: invalid bytes become U+FFFD. A template so that util
// needs no JSON library; `Json` is nlohmann::json.
template <typename Json>
[[nodiscard]] std::string json_text(const Json& document, int indent = -1) {
  return document.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tarmac::util
