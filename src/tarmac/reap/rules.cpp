#include "tarmac/reap/rules.hpp"

#include <fnmatch.h>

#include <algorithm>

#include "tarmac/host/process_info.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::reap {
namespace {

bool glob_matches(std::string_view pattern, const std::string& text) {
  if (text.empty()) return false;
  return fnmatch(std::string(pattern).c_str(), text.c_str(), 0) == 0;
}

// The first of `patterns` that matches the process's name or program, if any.
template <typename Patterns>
std::optional<std::string> matching_command(const Patterns& patterns, const host::ProcessInfo& process) {
  const std::string name = process.name.value_or("");
  const std::string program = host::program_name(process.command_line);
  for (const auto& pattern : patterns) {
    if (glob_matches(pattern, name) || glob_matches(pattern, program)) return std::string(pattern);
  }
  return std::nullopt;
}

bool container_matches(const std::string& wanted, const host::ContainerRef& container) {
  if (wanted.empty()) return false;
  if (!container.id.empty() && container.id.starts_with(wanted)) return true;
  return container.pod_uid && *container.pod_uid == wanted;
}

}  // namespace

const std::vector<std::string_view>& builtin_allowed_commands() {
  // The driver's and the fabric's daemons, MPS (its server holds memory for its clients), DCGM,
  // display servers and compositors (they hold a little memory by design), nvidia-smi, tarmac.
  static const std::vector<std::string_view> kCommands = {
      "nvidia-persistenced", "nv-fabricmanager", "nvidia-fabricmanager", "nvidia-cuda-mps-control",
      "nvidia-cuda-mps-server", "nv-hostengine", "dcgm*", "nvidia-dcgm*", "Xorg", "X", "Xwayland",
      "gnome-shell", "kwin_wayland", "kwin_x11", "sway", "weston", "mutter", "nvidia-smi", "tarmac"};
  return kCommands;
}

std::optional<std::string> protected_by(const host::ProcessInfo& process, const ReaperConfig& config) {
  if (auto pattern = matching_command(builtin_allowed_commands(), process)) {
    return "built-in allow-list (" + *pattern + ")";
  }
  if (process.user) {
    const auto& users = config.allow_users;
    if (std::find(users.begin(), users.end(), *process.user) != users.end()) {
      return "reaper.allow_users (" + *process.user + ")";
    }
  }
  if (auto pattern = matching_command(config.allow_commands, process)) return "reaper.allow_commands (" + *pattern + ")";
  if (process.container) {
    for (const auto& wanted : config.allow_containers) {
      if (container_matches(wanted, *process.container)) return "reaper.allow_containers (" + wanted + ")";
    }
  }
  // A command line (argv[0] against the allow-lists) or an environment (its Slurm or tarmac job)
  // that could not be read is unknown, never "no match": a user whose process keeps them blocked
  // must not slip past a rule that way.
  if (process.unread) return "its command line or environment is unknown, and a rule may match: " + *process.unread;
  return std::nullopt;
}

std::vector<std::string> parse_list(std::string_view text) {
  std::vector<std::string> out;
  for (const auto& part : util::split(text, ',')) {
    const auto item = util::trim(part);
    if (!item.empty()) out.emplace_back(item);
  }
  return out;
}

std::string list_text(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += ",";
    out += item;
  }
  return out;
}

}  // namespace tarmac::reap
