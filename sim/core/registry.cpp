#include "registry.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "proc_info.hpp"
#include "state_dir.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sim {

namespace fs = std::filesystem;

Result<void> register_process(const fs::path& procs_dir, LiveProcess p) {
  if (p.starttime == 0) {
    const auto stat = read_proc_stat(p.pid);
    if (!stat) return make_error(Error::Code::NotFound, fmt::format("process {} does not exist", p.pid));
    p.starttime = stat->starttime;
  }
  std::string gpus;
  for (unsigned g : p.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
  std::string text = fmt::format("pid={}\nstarttime={}\ngpus={}\nmemory_mib={}\nsm_util={}\nmem_util={}\ntype={}\n",
                                 p.pid, p.starttime, gpus, p.memory_mib, p.sm_util, p.mem_util,
                                 p.type == ProcessType::Graphics ? "graphics" : "compute");
  if (p.enc_util != 0) text += fmt::format("enc_util={}\n", p.enc_util);
  if (p.scenario_process) text += fmt::format("scenario_process={}\n", *p.scenario_process);
  if (p.mig_device) text += fmt::format("mig_device={}\n", *p.mig_device);
  if (p.util_sample != UtilSample::Normal) {
    text += fmt::format("util_sample={}\n", p.util_sample == UtilSample::Garbage ? "garbage" : "unreadable");
  }
  return write_file_atomic(procs_dir / std::to_string(p.pid), text);
}

void unregister_process(const fs::path& procs_dir, pid_t pid) {
  std::error_code ec;
  fs::remove(procs_dir / std::to_string(pid), ec);
}

namespace {

std::optional<LiveProcess> parse_entry(const fs::path& file) {
  auto values = read_key_values(file);
  if (!values) return std::nullopt;
  LiveProcess p;
  for (const auto& [key, value] : *values) {
    const auto n = util::parse_int(value);
    if (key == "pid" && n) p.pid = static_cast<pid_t>(*n);
    if (key == "starttime" && n) p.starttime = static_cast<unsigned long long>(*n);
    if (key == "memory_mib" && n) p.memory_mib = static_cast<unsigned long long>(*n);
    if (key == "sm_util" && n) p.sm_util = static_cast<unsigned>(*n);
    if (key == "mem_util" && n) p.mem_util = static_cast<unsigned>(*n);
    if (key == "enc_util" && n && *n >= 0 && *n <= 100) p.enc_util = static_cast<unsigned>(*n);
    if (key == "scenario_process" && n) p.scenario_process = static_cast<unsigned>(*n);
    if (key == "mig_device" && n && *n >= 0 && *n < 7) p.mig_device = static_cast<unsigned>(*n);
    if (key == "type") p.type = value == "graphics" ? ProcessType::Graphics : ProcessType::Compute;
    if (key == "util_sample" && value == "garbage") p.util_sample = UtilSample::Garbage;
    if (key == "util_sample" && value == "unreadable") p.util_sample = UtilSample::Unreadable;
    if (key == "gpus") {
      for (const std::string& g : util::split(value, ',')) {
        if (auto i = util::parse_int(g); i && *i >= 0) p.gpus.push_back(static_cast<unsigned>(*i));
      }
    }
  }
  if (p.pid <= 0) return std::nullopt;
  return p;
}

}  // namespace

std::vector<LiveProcess> read_live_processes(const fs::path& procs_dir, std::vector<pid_t>* stale) {
  std::vector<LiveProcess> out;
  std::error_code ec;
  for (fs::directory_iterator it(procs_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(".tmp") != std::string::npos) continue;  // a write in progress
    auto entry = parse_entry(it->path());
    if (!entry) continue;
    if (process_alive(entry->pid, entry->starttime)) {
      out.push_back(std::move(*entry));
    } else if (stale != nullptr) {
      stale->push_back(entry->pid);
    }
  }
  std::sort(out.begin(), out.end(), [](const LiveProcess& a, const LiveProcess& b) { return a.pid < b.pid; });
  return out;
}

}  // namespace tarmac::sim
