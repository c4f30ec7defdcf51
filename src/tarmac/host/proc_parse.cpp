#include "tarmac/host/proc_parse.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "tarmac/util/strings.hpp"

namespace tarmac::host {
namespace {

// Whitespace-separated fields; stat uses single spaces but a trailing newline is common.
std::vector<std::string_view> fields_of(std::string_view text) {
  std::vector<std::string_view> out;
  out.reserve(64);  // a stat line has 52 fields: one allocation, not seven
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n')) ++i;
    const std::size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t' && text[i] != '\n') ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

template <typename T>
std::optional<T> parse_unsigned(std::string_view text) {
  const auto value = util::parse_int(text);
  if (!value || *value < 0 || static_cast<unsigned long long>(*value) > std::numeric_limits<T>::max()) {
    return std::nullopt;
  }
  return static_cast<T>(*value);
}

// The value after "<key>:" or "<key> " on the first line that starts with the key.
std::optional<std::string_view> line_value(std::string_view text, std::string_view key) {
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    if (line.starts_with(key) && line.size() > key.size() && (line[key.size()] == ':' || line[key.size()] == ' ')) {
      return line.substr(key.size() + 1);
    }
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace

std::optional<StatFields> parse_stat(std::string_view stat_text) {
  const std::size_t open = stat_text.find('(');
  const std::size_t close = stat_text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
  // After ") ": state(3) ppid(4) ... starttime(22), numbered as in proc(5).
  const std::vector<std::string_view> rest = fields_of(stat_text.substr(close + 1));
  constexpr std::size_t kState = 0;
  constexpr std::size_t kPpid = 1;
  constexpr std::size_t kTtyNr = 7 - 3;
  constexpr std::size_t kUtime = 14 - 3;
  constexpr std::size_t kStime = 15 - 3;
  constexpr std::size_t kStarttime = 22 - 3;
  constexpr std::size_t kRss = 24 - 3;
  if (rest.size() <= kStarttime || rest[kState].size() != 1) return std::nullopt;
  const auto ppid = parse_unsigned<unsigned>(rest[kPpid]);
  const auto starttime = parse_unsigned<unsigned long long>(rest[kStarttime]);
  const auto tty_nr = util::parse_int(rest[kTtyNr]);
  if (!ppid || !starttime || !tty_nr) return std::nullopt;
  StatFields out{std::string(stat_text.substr(open + 1, close - open - 1)), rest[kState][0], *ppid, *starttime, *tty_nr};
  // CPU times and the resident size are extras: a line without them still names the process.
  out.utime_ticks = parse_unsigned<unsigned long long>(rest[kUtime]).value_or(0);
  out.stime_ticks = parse_unsigned<unsigned long long>(rest[kStime]).value_or(0);
  if (rest.size() > kRss) out.rss_pages = parse_unsigned<unsigned long long>(rest[kRss]).value_or(0);
  return out;
}

std::string join_cmdline(std::string_view raw_nul_separated) {
  // Trailing NULs end argv (setproctitle may pad with many); interior ones separate arguments.
  while (!raw_nul_separated.empty() && raw_nul_separated.back() == '\0') raw_nul_separated.remove_suffix(1);
  std::string out(raw_nul_separated);
  for (char& c : out) {
    if (c == '\0') c = ' ';
  }
  return out;
}

std::optional<std::string> find_environ_value(std::string_view raw_environ, std::string_view key) {
  for (std::size_t start = 0; start < raw_environ.size();) {
    std::size_t end = raw_environ.find('\0', start);
    if (end == std::string_view::npos) end = raw_environ.size();
    const std::string_view entry = raw_environ.substr(start, end - start);
    if (entry.size() > key.size() && entry.starts_with(key) && entry[key.size()] == '=') {
      return std::string(entry.substr(key.size() + 1));
    }
    start = end + 1;
  }
  return std::nullopt;
}

std::optional<unsigned> parse_status_uid(std::string_view status_text) {
  // "Uid:\treal\teffective\tsaved\tfs"; the effective one decides permissions and is what ps shows.
  const auto value = line_value(status_text, "Uid");
  if (!value) return std::nullopt;
  const std::vector<std::string_view> ids = fields_of(*value);
  if (ids.size() < 2) return std::nullopt;
  return parse_unsigned<unsigned>(ids[1]);
}

std::optional<unsigned> parse_nspid_depth(std::string_view status_text) {
  const auto value = line_value(status_text, "NSpid");
  if (!value) return std::nullopt;
  const auto depth = fields_of(*value).size();
  if (depth == 0) return std::nullopt;
  return static_cast<unsigned>(depth);
}

std::optional<std::string> tty_name(long long tty_nr) {
  if (tty_nr <= 0) return std::nullopt;
  // The kernel's new_encode_dev: major in bits 8-19, minor in bits 0-7 and 20-31.
  const long long major = (tty_nr >> 8) & 0xfff;
  const long long minor = (tty_nr & 0xff) | ((tty_nr >> 12) & 0xfff00);
  constexpr long long kPtsFirstMajor = 136;  // Unix98 ptys: majors 136-143
  constexpr long long kPtsLastMajor = 143;
  constexpr long long kTtyMajor = 4;         // virtual consoles and serial ports
  if (major >= kPtsFirstMajor && major <= kPtsLastMajor) {
    return "pts/" + std::to_string((major - kPtsFirstMajor) * 256 + minor);
  }
  if (major == kTtyMajor && minor < 64) return "tty" + std::to_string(minor);
  return "tty(" + std::to_string(major) + ":" + std::to_string(minor) + ")";
}

std::optional<unsigned> parse_digits(std::string_view text, std::size_t max_digits) {
  if (text.empty() || text.size() > max_digits) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return parse_unsigned<unsigned>(text);
}

std::optional<unsigned> pid_of_proc_entry(std::string_view name) { return parse_digits(name, 10); }

std::optional<long long> parse_boot_time(std::string_view proc_stat_text) {
  const auto value = line_value(proc_stat_text, "btime");
  if (!value) return std::nullopt;
  return util::parse_int(util::trim(*value));
}

}  // namespace tarmac::host
