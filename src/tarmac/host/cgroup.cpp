#include "tarmac/host/cgroup.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "tarmac/util/strings.hpp"

namespace tarmac::host {
namespace {

// The path part of one "hierarchy-id:controllers:path" line; the path itself may hold ':'.
std::optional<std::string_view> cgroup_path(std::string_view line) {
  const std::size_t first = line.find(':');
  if (first == std::string_view::npos) return std::nullopt;
  const std::size_t second = line.find(':', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  return util::trim(line.substr(second + 1));
}

// Every path of the file, in file order (one per v1 hierarchy, a single "0::" line on v2).
std::vector<std::string> cgroup_paths(std::string_view text) {
  std::vector<std::string> paths;
  for (const std::string& line : util::split(text, '\n')) {
    if (auto path = cgroup_path(line)) paths.emplace_back(*path);
  }
  return paths;
}

std::vector<std::string> components(std::string_view path) {
  std::vector<std::string> out;
  for (std::string& part : util::split(path, '/')) {
    if (!part.empty()) out.push_back(std::move(part));
  }
  return out;
}

bool is_container_id(std::string_view text) {
  return text.size() == 64 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string_view strip_suffix(std::string_view text, std::string_view suffix) {
  if (text.ends_with(suffix)) text.remove_suffix(suffix.size());
  return text;
}

// One runtime's naming of a container cgroup: "<prefix><64 hex>" with an optional ".scope".
struct ScopePrefix {
  std::string_view prefix;
  std::string_view runtime;
};
// conmon (libpod-conmon-, crio-conmon-) watches a container from outside it, so it is not
// listed: its id part is not 64 hex after these prefixes, so it is not taken for the container.
constexpr std::array<ScopePrefix, 5> kScopePrefixes{{
    {"docker-", "docker"},
    {"libpod-", "podman"},
    {"cri-containerd-", "containerd"},
    {"nerdctl-", "containerd"},
    {"crio-", "cri-o"},
}};

// The container one path component names by itself (systemd-driver scopes, LXC payloads).
std::optional<ContainerRef> classify_component(std::string_view component) {
  const std::string_view name = strip_suffix(component, ".scope");
  for (const ScopePrefix& p : kScopePrefixes) {
    if (name.starts_with(p.prefix) && is_container_id(name.substr(p.prefix.size()))) {
      return ContainerRef{std::string(p.runtime), std::string(name.substr(p.prefix.size())), std::nullopt};
    }
  }
  // lxc.payload.<name> is the container; lxc.monitor.<name> is LXC's own process outside it.
  constexpr std::string_view kLxcPayload = "lxc.payload.";
  if (component.starts_with(kLxcPayload) && component.size() > kLxcPayload.size()) {
    return ContainerRef{"lxc", std::string(component.substr(kLxcPayload.size())), std::nullopt};
  }
  return std::nullopt;
}

// The pod uid of a kubepods component: systemd "kubepods-<qos>-pod<uid>.slice" spells the uid's
// '-' as '_' (systemd reserves '-' for nesting); cgroupfs "pod<uid>" keeps it as is.
std::optional<std::string> pod_uid_of(std::string_view component) {
  if (component.starts_with("kubepods")) {
    const std::size_t at = component.find("-pod");
    if (at == std::string_view::npos) return std::nullopt;
    std::string uid(strip_suffix(component.substr(at + 4), ".slice"));
    std::replace(uid.begin(), uid.end(), '_', '-');
    if (uid.empty()) return std::nullopt;
    return uid;
  }
  if (component.starts_with("pod") && component.size() > 3) return std::string(component.substr(3));
  return std::nullopt;
}

std::optional<ContainerRef> container_of_path(std::string_view path) {
  const std::vector<std::string> parts = components(path);
  bool in_kubepods = false;
  std::optional<std::string> pod_uid;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const std::string_view parent = i > 0 ? std::string_view(parts[i - 1]) : std::string_view();
    if (part.starts_with("kubepods")) in_kubepods = true;
    if (in_kubepods && !pod_uid) pod_uid = pod_uid_of(part);

    std::optional<ContainerRef> found = classify_component(part);
    // cgroupfs-driver layouts name the runtime in the parent folder, not in the component.
    if (!found && parent == "docker" && is_container_id(part)) found = ContainerRef{"docker", part, std::nullopt};
    if (!found && parent == "lxc" && !part.empty()) found = ContainerRef{"lxc", part, std::nullopt};
    if (!found && pod_uid && is_container_id(part)) found = ContainerRef{"kubernetes", part, std::nullopt};
    if (found) {
      if (in_kubepods) found->pod_uid = pod_uid;
      return found;
    }
  }
  // A process in a pod's own cgroup but in no container of it (rare, but still the pod's).
  if (pod_uid) return ContainerRef{"kubernetes", "", pod_uid};
  return std::nullopt;
}

}  // namespace

std::optional<ContainerRef> parse_cgroup(std::string_view cgroup_file_text) {
  // On v1 every hierarchy repeats the same container; the first line that names one wins.
  for (const std::string& path : cgroup_paths(cgroup_file_text)) {
    if (auto found = container_of_path(path)) return found;
  }
  return std::nullopt;
}

std::optional<std::string> parse_slurm_job_from_cgroup(std::string_view cgroup_file_text) {
  for (const std::string& path : cgroup_paths(cgroup_file_text)) {
    // A job_NNN folder counts only below a slurm folder (slurm, slurmstepd.scope,
    // <node>_slurmstepd.scope), so that some other job_7 cgroup is not taken for a Slurm job.
    bool under_slurm = false;
    for (const std::string& part : components(path)) {
      if (part.find("slurm") != std::string::npos) under_slurm = true;
      if (under_slurm && part.starts_with("job_") && is_digits(std::string_view(part).substr(4))) {
        return part.substr(4);
      }
    }
  }
  return std::nullopt;
}

}  // namespace tarmac::host
