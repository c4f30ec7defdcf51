#include "tarmac/cli/status_source.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tarmac/sched/wire.hpp"
#include "tarmac/serve/live_wire.hpp"
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

StatusSource::StatusSource(const GlobalOptions& global, gpu::ActivityThresholds thresholds, std::string socket)
    : global_(global), thresholds_(thresholds), socket_(std::move(socket)) {}

AgentViewAnswer agent_view(const std::string& socket, const std::string& nvml, host::ProcessCache& processes) {
  AgentViewAnswer a;
  auto conn = sched::Connection::connect(socket);
  if (!conn.ok()) {
    // No socket, or nobody listening on it: no agent runs, which is no news.
    if (conn.error().code != Error::Code::NotFound) a.problem = conn.error().message;
    return a;
  }
  // Only an agent of root's or of this user's is this machine's (or this user's own): a socket
  // another user made, at a path TARMAC_SOCKET names, is not believed, nor even asked.
  const auto peer = conn->peer();
  if (!peer.ok() || (peer->uid != 0 && peer->uid != ::geteuid())) {
    a.problem = fmt::format("{} is served by uid {}, neither root nor you", socket, peer.ok() ? std::to_string(peer->uid) : "?");
    return a;
  }
  if (auto sent = conn->send_line(R"({"op":"status"})"); !sent.ok()) {
    a.problem = sent.error().message;
    return a;
  }
  auto line = conn->read_line(kAnswerMs);  // one deadline for the whole answer
  if (!line.ok()) {
    a.problem = line.error().message;
    return a;
  }
  const nlohmann::json body = nlohmann::json::parse(*line, nullptr, false);
  if (!body.is_object()) {
    a.problem = "the agent's answer is not JSON";
    return a;
  }
  const auto ok = body.find("ok");
  const auto view = body.find("view");
  // An agent older than `status` ("unknown request"), or one that has not sampled yet: NVML.
  if (ok == body.end() || *ok != true || view == body.end()) return a;
  // An agent of other GPUs than this command would read (a simulation here, the real ones there):
  // not this command's view, which is no news either.
  if (const auto source = body.find("nvml"); source == body.end() || *source != nvml) return a;
  auto parsed = serve::parse_live_wire(*view);
  if (!parsed.ok()) {
    a.problem = parsed.error().message;
    return a;
  }
  // An agent whose sampling is stuck (NVML hangs) still answers from its last sample: past
  // kStaleMs that is not "now" in any sense a status means.
  if (parsed->age_ms > kStaleMs) {
    a.problem = fmt::format("the agent's last sample is {} s old (is its sampling stuck? `journalctl -u tarmac-agent`)",
                            parsed->age_ms / 1000);
    return a;
  }
  StatusView& out = a.view.emplace();
  out.snapshot = std::move(parsed->snapshot);
  out.classes = std::move(parsed->classes);
  out.mig_classes = std::move(parsed->mig_classes);
  out.class_since_unix_ms = std::move(parsed->class_since_unix_ms);
  out.held_idle_since_unix_ms = std::move(parsed->held_idle_since_unix_ms);
  out.agent_age_ms = parsed->age_ms;
  // Who each process is, read here as this user may: a pid whose start time differs from the
  // agent's is another process by now, and is not described as the one the agent saw.
  std::vector<unsigned> pids;
  for (const auto& d : out.snapshot.devices) {
    for (const auto& p : d.processes) pids.push_back(p.pid);
  }
  auto hosts = processes.lookup_many(pids);  // every command line in one hand-over
  std::size_t k = 0;
  for (auto& d : out.snapshot.devices) {
    for (auto& p : d.processes) {
      host::ProcessInfo& info = hosts[k++];
      if (p.host.start_ticks && info.start_ticks && *p.host.start_ticks != *info.start_ticks) {
        info = host::ProcessInfo{};
        info.pid = p.pid;
      }
      p.host = std::move(info);
    }
  }
  processes.end_round();
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
  if (auto v = from_agent()) return v;
  if (!backend_) {
    auto opened = open_backend(global_);  // prints its failure
    if (!opened.ok()) return std::nullopt;
    backend_ = std::move(*opened);
  }
  auto snap = backend_->snapshot(gpu::SnapshotOptions{});
  if (!snap.ok()) {
    print_error(snap.error());
    return std::nullopt;
  }
  return view_of(std::move(*snap), thresholds_);
}

}  // namespace tarmac::cli
