// `tarmac top --host`'s reader of a remote agent over its HTTP API (AgentReader) and the parsers of
// its answers, which are hostile input: bounded in size, depth, count and every value.
#include "tarmac/tui/sources.hpp"

#include <cstdint>
#include <fmt/format.h>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "tarmac/diagnose/backfill_json.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::tui {

namespace {

using nlohmann::json;

constexpr std::size_t kMaxAgentGpus = 1024;
constexpr std::size_t kMaxAgentMigDevices = 8;  // a board has at most 7 (docs/mig.md)
constexpr std::size_t kMaxAgentProcesses = 1 << 14;
// What each of an agent's answers may weigh: 1,024 GPUs are about 0.5 MiB, 16,384 processes about
// 6 MiB, 600 points of history for 1,024 GPUs about 0.1 GiB... which no screen needs: 4 MiB.
constexpr std::size_t kMaxGpusBody = 1U << 20;
constexpr std::size_t kMaxProcessesBody = 8U << 20;
constexpr std::size_t kMaxHistoryBody = 4U << 20;
// An agent's answers nest 4 deep; a document nested deeper is refused before it is parsed (a
// megabyte of "[" would otherwise become a tree of a gigabyte).
constexpr int kMaxJsonDepth = 8;
constexpr double kMaxMib = static_cast<double>(1ULL << 40);  // 1 EiB: beyond, a number is not memory

template <typename T>
std::optional<T> unsigned_at(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return std::nullopt;
  const auto v = it->get<std::uint64_t>();
  if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
  return static_cast<T>(v);
}

std::optional<double> number_at(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!(v >= 0 && v < 1e15)) return std::nullopt;  // NaN, negative, absurd
  return v;
}

// A MiB count as bytes, nullopt beyond kMaxMib (the conversion would overflow).
std::optional<std::uint64_t> mib_at(const json& j, const char* key) {
  const auto v = number_at(j, key);
  if (!v || *v >= kMaxMib) return std::nullopt;
  return static_cast<std::uint64_t>(*v * 1024.0 * 1024.0);
}

std::optional<std::string> string_at(const json& j, const char* key, std::size_t max = 4096) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  std::string s = it->get<std::string>();
  if (s.size() > max) s.resize(max);
  return s;
}

std::optional<gpu::Activity> activity_named(const std::string& name) {
  for (const auto a : gpu::kActivities) {
    if (name == gpu::to_string(a)) return a;
  }
  return std::nullopt;
}

Result<json> parse_object(std::string_view text, const char* what) {
  if (util::json_depth(text) > kMaxJsonDepth) {
    return make_error(Error::Code::Invalid, fmt::format("{} nests deeper than {} levels", what, kMaxJsonDepth));
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(Error::Code::Invalid, fmt::format("{} is not a JSON object", what));
  return j;
}

}  // namespace

// ---- AgentReader ----

std::string agent_url(const std::string& address) {
  std::string url = address.find("://") == std::string::npos ? "http://" + address : address;
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

AgentReader::AgentReader(std::string address, long long timeout_ms) : base_(agent_url(address)), timeout_ms_(timeout_ms) {}

HostData AgentReader::read() {
  HostData out;
  out.remote = true;
  auto gpus = net::get(base_ + "/api/v1/gpus", timeout_ms_, kMaxGpusBody);
  auto procs = gpus.ok() ? net::get(base_ + "/api/v1/processes", timeout_ms_, kMaxProcessesBody) : Result<std::string>(gpus.error());
  out.received_ms = util::monotonic_ms();
  if (!procs.ok()) {
    out.problem = procs.error().message;
    return out;
  }
  auto parsed = parse_agent(*gpus, *procs);
  if (!parsed.ok()) {
    out.problem = parsed.error().message;
    return out;
  }
  parsed->received_ms = out.received_ms;
  parsed->remote = true;
  return std::move(*parsed);
}

std::map<unsigned, GpuHistory> AgentReader::history(long long seconds, long long step_ms) {
  auto body = net::get(fmt::format("{}/api/v1/history?since={}s&step={}ms", base_, seconds, std::max(1000LL, step_ms)), timeout_ms_,
                  kMaxHistoryBody);
  if (!body.ok()) return {};
  auto parsed = parse_agent_history(*body);
  return parsed.ok() ? std::move(*parsed) : std::map<unsigned, GpuHistory>{};
}

Result<HostData> parse_agent(std::string_view gpus_json, std::string_view processes_json) {
  TARMAC_TRY_ASSIGN(const json g, parse_object(gpus_json, "the agent's /api/v1/gpus"));
  TARMAC_TRY_ASSIGN(const json p, parse_object(processes_json, "the agent's /api/v1/processes"));
  const auto gpus = g.find("gpus");
  const auto procs = p.find("processes");
  if (gpus == g.end() || !gpus->is_array()) return make_error(Error::Code::Invalid, "the agent's /api/v1/gpus has no \"gpus\" list");
  if (procs == p.end() || !procs->is_array()) {
    return make_error(Error::Code::Invalid, "the agent's /api/v1/processes has no \"processes\" list");
  }
  if (gpus->size() > kMaxAgentGpus || procs->size() > kMaxAgentProcesses) {
    return make_error(Error::Code::Invalid, "the agent's answer lists more GPUs or processes than tarmac top shows");
  }
  HostData out;
  gpu::Snapshot snap;
  snap.driver_version = string_at(g, "driver_version", 64);
  if (const auto ts = g.find("timestamp_ms"); ts != g.end() && ts->is_number_integer()) snap.timestamp_unix_ms = ts->get<long long>();
  std::map<unsigned, std::size_t> by_index;
  std::size_t batches_taken = 0;
  for (const auto& item : *gpus) {
    if (!item.is_object()) continue;
    const auto index = unsigned_at<unsigned>(item, "index");
    if (!index || by_index.count(*index) != 0) continue;
    gpu::Device d;
    d.id.index = *index;
    d.id.uuid = string_at(item, "uuid", 128);
    d.id.name = string_at(item, "name", 128);
    d.id.pci_bus_id = string_at(item, "pci_bus_id", 64);
    d.id.mem_total_bytes = mib_at(item, "mem_total_mib");
    d.sample.mem_used_bytes = mib_at(item, "mem_used_mib");
    d.sample.util_gpu_pct = unsigned_at<unsigned>(item, "util_gpu_pct");
    d.sample.util_mem_pct = unsigned_at<unsigned>(item, "util_mem_pct");
    d.sample.temp_c = unsigned_at<unsigned>(item, "temp_c");
    d.sample.clock_sm_mhz = unsigned_at<unsigned>(item, "clock_sm_mhz");
    if (const auto w = number_at(item, "power_w")) d.sample.power_mw = static_cast<unsigned>(std::min(*w * 1000.0, 4e9));
    if (const auto w = number_at(item, "power_limit_w")) d.modes.enforced_power_limit_mw = static_cast<unsigned>(std::min(*w * 1000.0, 4e9));
    d.lost = string_at(item, "lost", 256);
    if (const auto mode = item.find("mig_mode_current"); mode != item.end() && mode->is_boolean()) {
      d.modes.mig_mode_current = mode->get<bool>();
    }
    const auto activity = string_at(item, "activity", 32);
    auto& mig_classes = out.mig_classes.emplace_back();
    if (const auto mig = item.find("mig"); mig != item.end() && mig->is_array()) {
      for (const auto& m : *mig) {
        if (!m.is_object() || d.mig.size() >= kMaxAgentMigDevices) continue;
        gpu::MigDevice md;
        md.index = unsigned_at<unsigned>(m, "index").value_or(static_cast<unsigned>(d.mig.size()));
        md.uuid = string_at(m, "uuid", 128);
        md.profile = string_at(m, "profile", 32);
        md.gpu_instance_id = unsigned_at<unsigned>(m, "gpu_instance_id");
        md.slices = unsigned_at<unsigned>(m, "slices");
        md.mem_used_bytes = mib_at(m, "mem_used_mib");
        md.mem_total_bytes = mib_at(m, "mem_total_mib");
        if (const auto v = number_at(m, "gpm_sm_active_pct")) md.gpm_sm_active_pct = std::clamp(*v, 0.0, 100.0);
        const auto cls = string_at(m, "activity", 32);
        mig_classes.push_back(gpu::MigActivity{cls ? activity_named(*cls).value_or(gpu::Activity::Idle) : gpu::Activity::Idle,
                                               md.gpm_sm_active_pct.has_value()});
        d.mig.push_back(std::move(md));
      }
    }
    // The backfill batches sent to it (/api/v1/gpus "backfill"), each whole or not at all, at most
    // diagnose::kBackfillBatchesMax in the whole answer.
    auto& batches = out.backfill.emplace_back();
    if (const auto list = item.find("backfill"); list != item.end() && list->is_array()) {
      for (const auto& b : *list) {
        if (batches_taken == diagnose::kBackfillBatchesMax) break;
        if (auto batch = diagnose::parse_backfill(b)) {
          batches.push_back(std::move(*batch));
          ++batches_taken;
        }
      }
    }
    by_index[*index] = snap.devices.size();
    snap.devices.push_back(std::move(d));
    out.classes.push_back(activity ? activity_named(*activity).value_or(gpu::Activity::Idle) : gpu::Activity::Idle);
  }
  for (const auto& item : *procs) {
    if (!item.is_object()) continue;
    const auto index = unsigned_at<unsigned>(item, "gpu");
    const auto pid = unsigned_at<unsigned>(item, "pid");
    if (!index || !pid) continue;
    const auto at = by_index.find(*index);
    if (at == by_index.end()) continue;
    gpu::GpuProcess proc;
    proc.pid = *pid;
    proc.host.pid = *pid;
    proc.host.visibility = host::PidVisibility::Visible;  // on its own host
    proc.host.user = string_at(item, "user", 64);
    proc.host.command_line = string_at(item, "command", 4096);
    if (proc.host.command_line) {
      const auto space = proc.host.command_line->find(' ');
      const std::string first = proc.host.command_line->substr(0, space);
      proc.host.name = first.substr(first.rfind('/') == std::string::npos ? 0 : first.rfind('/') + 1);
    }
    if (const auto c = string_at(item, "container", 128)) proc.host.container = host::ContainerRef{*c, "", std::nullopt};
    proc.host.slurm_job_id = string_at(item, "job", 64);
    proc.used_mem_bytes = mib_at(item, "used_mib");
    proc.sm_util_pct = unsigned_at<unsigned>(item, "sm_util_pct");
    if (proc.sm_util_pct && *proc.sm_util_pct > 100) proc.sm_util_pct.reset();
    proc.mig = unsigned_at<unsigned>(item, "mig");
    if (proc.mig && *proc.mig >= snap.devices[at->second].mig.size()) proc.mig.reset();
    snap.devices[at->second].processes.push_back(std::move(proc));
  }
  out.snapshot = std::move(snap);
  return out;
}

Result<std::map<unsigned, GpuHistory>> parse_agent_history(std::string_view history_json) {
  TARMAC_TRY_ASSIGN(const json h, parse_object(history_json, "the agent's /api/v1/history"));
  const auto gpus = h.find("gpus");
  if (gpus == h.end() || !gpus->is_array()) return make_error(Error::Code::Invalid, "the agent's history has no \"gpus\" list");
  std::map<unsigned, GpuHistory> out;
  for (const auto& g : *gpus) {
    if (!g.is_object() || out.size() >= kMaxAgentGpus) continue;
    const auto index = unsigned_at<unsigned>(g, "gpu");
    const auto points = g.find("points");
    if (!index || points == g.end() || !points->is_array()) continue;
    GpuHistory& series = out[*index];
    for (const auto& p : *points) {
      if (!p.is_object()) continue;
      if (const auto v = number_at(p, "util_gpu_pct")) series.util_pct.add(std::min(*v, 100.0));
      if (const auto v = number_at(p, "power_w")) series.power_w.add(*v);
      if (const auto v = number_at(p, "temp_c")) series.temp_c.add(*v);
    }
  }
  return out;
}

}  // namespace tarmac::tui
