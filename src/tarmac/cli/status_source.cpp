#include "tarmac/cli/status_source.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tarmac/diagnose/backfill_json.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/serve/live.hpp"
#include "tarmac/serve/live_wire.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {

namespace {

// The agent answers from memory on its scheduler's thread: a second means it is stuck.
constexpr int kAnswerMs = 2000;
// An answer from a sample older than this is not shown (agent.interval is at most a minute).
constexpr long long kStaleMs = 90'000;

void warn(const std::string& message) {
  fmt::print(stderr, "tarmac: warning: {}: reading the GPUs directly (--direct does so at once)\n",
             util::terminal_text(message));
}

}  // namespace

StatusSource::StatusSource(const GlobalOptions& global, gpu::ActivityThresholds thresholds, std::string socket,
                           LeaseFiles leases, gpu::ValueGroups values)
    : global_(global),
      thresholds_(thresholds),
      socket_(std::move(socket)),
      leases_(std::move(leases)),
      values_(values) {}

std::string lease_label(const sched::Lease& lease) {
  // The user a lease file names is its writer's word: taken only from root's (the agent writes
  // leases for the users it serves); any other file is named by its owner. A lease file writes
  // "-" for no job.
  const std::string user = lease.file_uid == 0 ? lease.user : host::user_name(lease.file_uid);
  const bool job = !lease.job_id.empty() && lease.job_id != "-";
  return job ? fmt::format("job {} {}", lease.job_id, user) : "lease " + user;
}

std::string cancel_id(const sched::Lease& lease) {
  // `tarmac cancel` takes the agent's jobs (whole numbers), and only the agent's (root's) file
  // says which: another user's file may name anyone's job.
  const bool agent_job = lease.file_uid == 0 && !lease.job_id.empty() && lease.job_id.size() <= 18 &&
                         std::all_of(lease.job_id.begin(), lease.job_id.end(), [](char c) { return c >= '0' && c <= '9'; });
  return agent_job ? lease.job_id : std::string();
}

std::map<std::string, diagnose::GpuLease> lease_labels(const LeaseFiles& files) {
  std::map<std::string, diagnose::GpuLease> out;
  // Only read: a command that shows the GPUs makes no lock directory (a missing one holds no lease).
  if (files.dir.empty() || ::access(files.dir.c_str(), F_OK) != 0) return out;
  auto dir = sched::LeaseDir::open(files.dir, files.max_hold_ms);
  if (!dir.ok()) return out;
  auto leases = dir->live_leases(util::wall_ms(), sched::LeaseDir::StaleFiles::Keep);
  if (!leases.ok()) return out;
  for (const auto& l : *leases) out[l.uuid] = diagnose::GpuLease{lease_label(l), cancel_id(l)};
  return out;
}

namespace {

// One request to the agent on `socket`: the answer when it is ok and of the GPUs `nvml` names;
// nullopt otherwise, with `problem` set when that is news.
std::optional<nlohmann::json> ask(const std::string& socket, const std::string& request, const std::string& nvml,
                                  std::string& problem) {
  auto conn = sched::Connection::connect(socket);
  if (!conn.ok()) {
    // No socket, or nobody listening on it: no agent runs, which is no news.
    if (conn.error().code != Error::Code::NotFound) problem = conn.error().message;
    return std::nullopt;
  }
  // Only an agent of root's or of this user's is this machine's (or this user's own): a socket
  // another user made, at a path TARMAC_SOCKET names, is not believed, nor even asked.
  const auto peer = conn->peer();
  if (!peer.ok() || (peer->uid != 0 && peer->uid != ::geteuid())) {
    problem = fmt::format("{} is served by uid {}, neither root nor you", socket, peer.ok() ? std::to_string(peer->uid) : "?");
    return std::nullopt;
  }
  if (auto sent = conn->send_line(request); !sent.ok()) {
    problem = sent.error().message;
    return std::nullopt;
  }
  auto line = conn->read_line(kAnswerMs);  // one deadline for the whole answer
  if (!line.ok()) {
    problem = line.error().message;
    return std::nullopt;
  }
  nlohmann::json body = nlohmann::json::parse(*line, nullptr, false);
  if (!body.is_object()) {
    problem = "the agent's answer is not JSON";
    return std::nullopt;
  }
  // An agent older than the request ("unknown request"), or one that has not sampled yet: NVML.
  if (const auto ok = body.find("ok"); ok == body.end() || *ok != true) return std::nullopt;
  // An agent of other GPUs than this command would read (a simulation here, the real ones there):
  // not this command's view, which is no news either.
  if (const auto source = body.find("nvml"); source == body.end() || *source != nvml) return std::nullopt;
  return body;
}

// An agent whose sampling is stuck (NVML hangs) still answers from its last sample: past kStaleMs
// that is not "now" in any sense a command means.
std::string stale(long long age_ms) {
  if (age_ms <= kStaleMs) return "";
  return fmt::format("the agent's last sample is {} s old (is its sampling stuck? `journalctl -u tarmac-agent`)", age_ms / 1000);
}

// Who each process is, read here as this user may: a pid whose start time differs from the
// agent's is another process by now, and is not described as the one the agent saw.
void describe_processes(const std::vector<gpu::Snapshot*>& snapshots, host::ProcessCache& processes) {
  std::vector<unsigned> pids;
  for (const auto* s : snapshots) {
    for (const auto& d : s->devices) {
      for (const auto& p : d.processes) pids.push_back(p.pid);
    }
  }
  auto hosts = processes.lookup_many(pids);  // every command line in one hand-over, each pid once
  std::size_t k = 0;
  for (auto* s : snapshots) {
    for (auto& d : s->devices) {
      for (auto& p : d.processes) {
        host::ProcessInfo info = hosts[k++];
        if (p.host.start_ticks && info.start_ticks && *p.host.start_ticks != *info.start_ticks) {
          info = host::ProcessInfo{};
          info.pid = p.pid;
        }
        p.host = std::move(info);
      }
    }
  }
  processes.end_round();
}

// The backfill batches on each of `snap`'s GPUs from the answer's "backfill" (each its GPU's UUID,
// model, server, requests answered and sent); what does not parse is left out (an older agent sends
// none).
std::vector<std::vector<GpuBackfill>> backfill_of(const nlohmann::json& body, const gpu::Snapshot& snap) {
  std::vector<std::vector<GpuBackfill>> out(snap.devices.size());
  const auto list = body.find("backfill");
  if (list == body.end() || !list->is_array()) return out;
  std::size_t taken = 0;
  for (const auto& b : *list) {
    if (taken == diagnose::kBackfillBatchesMax) break;
    const auto batch = diagnose::parse_backfill(b);
    const auto uuid = batch ? b.find("uuid") : b.end();
    if (!batch || uuid == b.end() || !uuid->is_string()) continue;
    for (std::size_t i = 0; i < snap.devices.size(); ++i) {
      if (snap.devices[i].id.uuid == uuid->get_ref<const std::string&>()) {
        out[i].push_back(*batch);
        ++taken;
      }
    }
  }
  return out;
}

}  // namespace

AgentViewAnswer agent_view(const std::string& socket, const std::string& nvml, host::ProcessCache& processes) {
  AgentViewAnswer a;
  const auto body = ask(socket, R"({"op":"status"})", nvml, a.problem);
  if (!body) return a;
  const auto view = body->find("view");
  if (view == body->end()) return a;
  auto parsed = serve::parse_live_wire_json(*view);
  if (!parsed.ok()) {
    a.problem = parsed.error().message;
    return a;
  }
  if (a.problem = stale(parsed->age_ms); !a.problem.empty()) return a;
  StatusView& out = a.view.emplace();
  out.snapshot = std::move(parsed->snapshot);
  out.classes = std::move(parsed->classes);
  out.mig_classes = std::move(parsed->mig_classes);
  out.class_since_unix_ms = std::move(parsed->class_since_unix_ms);
  out.held_idle_since_unix_ms = std::move(parsed->held_idle_since_unix_ms);
  out.agent_age_ms = parsed->age_ms;
  out.backfill = backfill_of(*body, out.snapshot);
  describe_processes({&out.snapshot}, processes);
  return a;
}

AgentWindowAnswer agent_window(const std::string& socket, const std::string& nvml, long long window_ms,
                               host::ProcessCache& processes) {
  AgentWindowAnswer a;
  const auto body = ask(socket, fmt::format(R"({{"op":"window","ms":{}}})", window_ms), nvml, a.problem);
  if (!body) return a;
  const auto samples = body->find("samples");
  const auto interval = body->find("interval_ms");
  const auto process_interval = body->find("process_interval_ms");
  // An agent older than `window` answers `status`'s way or not at all: no news.
  if (samples == body->end() || interval == body->end() || process_interval == body->end()) return a;
  if (!samples->is_array() || samples->empty() || samples->size() > serve::LiveState::kRecentViews ||
      !interval->is_number_unsigned() || !process_interval->is_number_unsigned() ||
      interval->get<std::uint64_t>() > 3'600'000 || process_interval->get<std::uint64_t>() > 3'600'000) {
    a.problem = "the agent's window is not a bounded list of samples with their intervals";
    return a;
  }
  AgentWindow w;
  w.interval_ms = interval->get<long long>();
  w.process_interval_ms = process_interval->get<long long>();
  for (const auto& j : *samples) {
    auto parsed = serve::parse_live_wire_json(j);
    if (!parsed.ok()) {
      a.problem = parsed.error().message;
      return a;
    }
    if (!w.samples.empty() && parsed->snapshot.timestamp_unix_ms < w.samples.back().timestamp_unix_ms) {
      a.problem = "the agent's window is not in time order";
      return a;
    }
    w.newest_age_ms = parsed->age_ms;
    w.samples.push_back(std::move(parsed->snapshot));
  }
  if (a.problem = stale(w.newest_age_ms); !a.problem.empty()) return a;
  std::vector<gpu::Snapshot*> all;
  for (auto& s : w.samples) all.push_back(&s);
  describe_processes(all, processes);
  a.window = std::move(w);
  return a;
}

std::optional<StatusView> StatusSource::from_agent() {
  if (socket_.empty()) return std::nullopt;
  const std::string socket = std::exchange(socket_, std::string());  // asked again only while it answers
  auto answer = agent_view(socket, nvml_source(global_), processes_);
  if (!answer.problem.empty()) warn(answer.problem);
  if (answer.view) socket_ = socket;
  return std::move(answer.view);
}

std::optional<StatusView> StatusSource::read() {
  std::optional<StatusView> view = from_agent();
  const bool direct = !view;
  if (direct) {
    if (!backend_) {
      auto opened = open_backend(global_);  // prints its failure
      if (!opened.ok()) return std::nullopt;
      backend_ = std::move(*opened);
    }
    gpu::SnapshotOptions options;
    options.values = values_;
    auto snap = backend_->snapshot(options);
    if (!snap.ok()) {
      print_error(snap.error());
      return std::nullopt;
    }
    view = view_of(std::move(*snap), thresholds_);
  }
  // Who holds each reserved GPU. A look of its own classes a leased GPU as the agent does: with
  // nothing running on it, reserved-idle.
  const auto labels = lease_labels(leases_);
  for (std::size_t i = 0; i < view->snapshot.devices.size(); ++i) {
    const gpu::Device& d = view->snapshot.devices[i];
    const auto lease = d.id.uuid ? labels.find(*d.id.uuid) : labels.end();
    view->leases.push_back(lease != labels.end() ? lease->second : diagnose::GpuLease{});
    if (direct && lease != labels.end() && i < view->classes.size()) {
      view->classes[i] = gpu::classify(d, thresholds_, view->snapshot.timestamp_unix_ms / 1000, gpu::Leased::Yes);
    }
    // A job given one MIG device leases that device (gpu-MIG-... files): an empty one is reserved-idle.
    std::vector<gpu::MigActivity> unknown;  // no classes for this GPU's MIG devices: none to change
    auto& classes = i < view->mig_classes.size() ? view->mig_classes[i] : unknown;
    view->mig_leases.push_back(
        diagnose::overlay_mig_leases(d, labels, thresholds_, view->snapshot.timestamp_unix_ms / 1000, classes));
  }
  return view;
}

}  // namespace tarmac::cli
