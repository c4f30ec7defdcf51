#include "tarmac/util/escape.hpp"

#include <fmt/format.h>


namespace tarmac::util {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence at the start of `s` (Unicode table 3-7) and its code
// point; 0 when the first byte does not start one.
struct Decoded {
  std::size_t length = 0;
  char32_t code = 0;
};

Decoded decode(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return {1, b0};
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t code = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, code = b0 & 0x1FU;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, code = b0 & 0x0FU;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, code = b0 & 0x07U;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return {};
  }
  if (s.size() < n) return {};
  for (std::size_t i = 1; i < n; ++i) {
    const unsigned char b = byte(i);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return {};
    code = (code << 6) | (b & 0x3FU);
  }
  return {n, code};
}

bool is_bidi_control(char32_t c) { return (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069); }

enum class Quotes { Keep, Escape };

// & < > as entities, and " ' too with Quotes::Escape: the markup characters of HTML and Slack.
std::string entities(std::string_view text, Quotes quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += quotes == Quotes::Escape ? "&quot;" : "\""; break;
      case '\'': out += quotes == Quotes::Escape ? "&#39;" : "'"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const Decoded d = decode(text);
    if (d.length == 0) {
      out += kReplacement;
      text.remove_prefix(1);
    } else {
      out += text.substr(0, d.length);
      text.remove_prefix(d.length);
    }
  }
  return out;
}

std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0U) == 0x80U) --cut;  // a character's middle
  return text.substr(0, cut);
}

std::string prometheus_label_value(std::string_view text, std::size_t max_bytes) {
  std::string valid = valid_utf8(text);
  if (valid.size() > max_bytes) {
    constexpr std::string_view kEllipsis = "...";
    valid.resize(utf8_prefix(valid, max_bytes > kEllipsis.size() ? max_bytes - kEllipsis.size() : 0).size());
    valid += kEllipsis;
  }
  std::string out;
  out.reserve(valid.size());
  for (char c : valid) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string terminal_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const Decoded d = decode(text);
    if (d.length == 0) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", static_cast<unsigned char>(text[0]));
      text.remove_prefix(1);
      continue;
    }
    if (d.code < 0x20 || d.code == 0x7F) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", static_cast<unsigned>(d.code));
    } else if ((d.code >= 0x80 && d.code <= 0x9F) || is_bidi_control(d.code)) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(d.code));
    } else {
      out += text.substr(0, d.length);
    }
    text.remove_prefix(d.length);
  }
  return out;
}

std::string terminal_lines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find('\n', start);
    out += terminal_text(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    out += '\n';
    start = end + 1;
  }
}

std::string html_text(std::string_view text) { return entities(valid_utf8(text), Quotes::Escape); }

std::string slack_text(std::string_view text) { return entities(text, Quotes::Keep); }

}  // namespace tarmac::util
