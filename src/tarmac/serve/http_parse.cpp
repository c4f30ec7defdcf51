// The request head's parser (parse_head) and the Host check: pure functions of text, apart from
// the server that calls them (http.cpp).
#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <span>
#include <vector>

#include "tarmac/serve/http.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::serve {

namespace {

constexpr std::size_t kMaxBodyBytes = 1 << 20;  // a GET has no business sending more

Error http_error(int status, std::string message) {
  return make_error(Error::Code::Invalid, std::move(message), Refusal{status});
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 32 || u >= 127 || std::strchr("()<>@,;:\\\"/[]?={}", c) != nullptr) return false;
  }
  return true;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      const int hi = hex_digit(s[i + 1]);
      const int lo = hex_digit(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      const char c = static_cast<char>(hi * 16 + lo);
      if (c == '\0') return std::nullopt;
      out += c;
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

namespace {

// The head's lines without their CR LF, up to the empty line that ends it.
std::vector<std::string_view> head_lines(std::string_view head) {
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    const auto nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    lines.push_back(line);
    if (nl == std::string_view::npos) break;
    head.remove_prefix(nl + 1);
  }
  return lines;
}

struct RequestLine {
  std::string_view method;
  std::string_view target;
  std::string_view version;
};

// "METHOD TARGET VERSION", strictly: one space between, a token, HTTP/1.x, an origin-form target.
Result<RequestLine> parse_request_line(std::string_view line, const ServerLimits& limits) {
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.find(' ', sp2 + 1) != std::string_view::npos) {
    return http_error(400, "the request line is not METHOD TARGET VERSION");
  }
  const RequestLine r{line.substr(0, sp1), line.substr(sp1 + 1, sp2 - sp1 - 1), line.substr(sp2 + 1)};
  if (!is_token(r.method)) return http_error(400, "malformed method");
  if (r.version != "HTTP/1.1" && r.version != "HTTP/1.0") {
    if (r.version.substr(0, 5) == "HTTP/") return http_error(505, "only HTTP/1.0 and HTTP/1.1 are spoken here");
    return http_error(400, "malformed HTTP version");
  }
  if (r.target.size() > limits.max_target_bytes) {
    return http_error(414, fmt::format("the request target is over {} bytes", limits.max_target_bytes));
  }
  if (r.target.empty() || r.target.front() != '/') return http_error(400, "the request target must start with /");
  for (char c : r.target) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 32 || u >= 127) return http_error(400, "the request target has characters that must be escaped");
  }
  return r;
}

// The headers the server acts on (Connection, Content-Length, Transfer-Encoding, one Host); every
// line must at least be "token: value".
Result<void> read_headers(std::span<const std::string_view> lines, ParsedHead& out) {
  for (const std::string_view line : lines) {
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
      return http_error(400, "malformed header line");
    }
    const std::string name = lower(line.substr(0, colon));
    const std::string value(util::trim(line.substr(colon + 1)));
    if (name == "connection") {
      const std::string v = lower(value);
      if (v.find("close") != std::string::npos) out.keep_alive = false;
      if (v.find("keep-alive") != std::string::npos) out.keep_alive = true;
    } else if (name == "content-length") {
      const auto n = util::parse_int(value);
      if (!n || *n < 0) return http_error(400, "malformed Content-Length");
      if (static_cast<std::size_t>(*n) > kMaxBodyBytes) return http_error(413, "request body too large");
      out.body_bytes = static_cast<std::size_t>(*n);
    } else if (name == "transfer-encoding") {
      return http_error(411, "bodies must come with a Content-Length");
    } else if (name == "host") {
      if (!out.request.host.empty()) return http_error(400, "more than one Host header");
      out.request.host = value;
    } else if (name == "authorization") {
      if (!out.request.authorization.empty()) return http_error(400, "more than one Authorization header");
      out.request.authorization = value;
    }
  }
  return {};
}

// The target's path and query parameters, percent-decoded.
Result<void> read_target(std::string_view target, Request& out) {
  const auto qmark = target.find('?');
  auto path = percent_decode(target.substr(0, qmark), false);
  if (!path) return http_error(400, "malformed percent-escape in the path");
  out.path = std::move(*path);
  if (qmark == std::string_view::npos) return {};
  for (const auto& part : util::split(target.substr(qmark + 1), '&')) {
    if (part.empty()) continue;
    const auto eq = part.find('=');
    auto name = percent_decode(std::string_view(part).substr(0, eq), true);
    auto value =
        percent_decode(eq == std::string::npos ? std::string_view() : std::string_view(part).substr(eq + 1), true);
    if (!name || !value) return http_error(400, "malformed percent-escape in the query");
    out.query[*name] = *value;
  }
  return {};
}

}  // namespace

Result<ParsedHead> parse_head(std::string_view head, const ServerLimits& limits) {
  const std::vector<std::string_view> lines = head_lines(head);
  if (lines.empty()) return http_error(400, "empty request");
  TARMAC_TRY_ASSIGN(const RequestLine line, parse_request_line(lines[0], limits));
  ParsedHead out;
  out.keep_alive = line.version == "HTTP/1.1";
  TARMAC_TRY(read_headers(std::span(lines).subspan(1), out));
  if (line.method != "GET" && line.method != "HEAD") {
    return http_error(405,
                      fmt::format("{} is not allowed: the agent's endpoints are read-only (GET, HEAD)", line.method));
  }
  out.request.method = std::string(line.method);
  TARMAC_TRY(read_target(line.target, out.request));
  return out;
}

int refusal_status(const Error& error) {
  const Refusal* refusal = error.cause_as<Refusal>();
  return refusal != nullptr ? refusal->status : 400;
}

bool is_loopback_host(std::string_view host) {
  std::string_view name = host;
  std::string_view port;
  if (name.starts_with('[')) {
    const auto close = name.find(']');
    if (close == std::string_view::npos) return false;
    port = name.substr(close + 1);
    name = name.substr(0, close + 1);
  } else if (const auto colon = name.find(':'); colon != std::string_view::npos) {
    port = name.substr(colon);
    name = name.substr(0, colon);
  }
  if (!port.empty()) {
    const auto n = util::parse_int(port.substr(1));
    if (!port.starts_with(':') || port.size() < 2 || port.size() > 6 || !n || *n < 0 || *n > 65535 ||
        port.find_first_not_of("0123456789", 1) != std::string_view::npos) {
      return false;
    }
  }
  return util::to_lower(name) == "localhost" || name == "127.0.0.1" || name == "[::1]";
}

}  // namespace tarmac::serve
