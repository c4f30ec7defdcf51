#include "proc_info.hpp"

#include <fmt/format.h>

#include "state_dir.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sim {

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto text = read_file(fmt::format("/proc/{}/stat", pid));
  if (!text) return std::nullopt;
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const std::size_t close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string> fields;
  for (const std::string& f : util::split(std::string_view(*text).substr(close + 1), ' ')) {
    if (!f.empty()) fields.push_back(f);
  }
  // fields[0] is field 3 (state); starttime is field 22.
  if (fields.size() < 20 || fields[0].empty()) return std::nullopt;
  auto start = util::parse_int(util::trim(fields[19]));
  if (!start) return std::nullopt;
  return ProcStat{fields[0][0], static_cast<unsigned long long>(*start)};
}

bool process_alive(pid_t pid, unsigned long long starttime) {
  const auto stat = read_proc_stat(pid);
  return stat && stat->starttime == starttime && stat->state != 'Z' && stat->state != 'X';
}

std::vector<std::string> read_cmdline(pid_t pid) {
  auto text = read_file(fmt::format("/proc/{}/cmdline", pid));
  if (!text || text->empty()) return {};
  if (text->back() == '\0') text->pop_back();
  return util::split(*text, '\0');
}

std::optional<std::string> read_comm(pid_t pid) {
  auto text = read_file(fmt::format("/proc/{}/comm", pid));
  if (!text) return std::nullopt;
  if (!text->empty() && text->back() == '\n') text->pop_back();
  return *text;
}

}  // namespace tarmac::sim
