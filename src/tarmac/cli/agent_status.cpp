#include "tarmac/cli/agent_status.hpp"

#include <cstdint>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "tarmac/diagnose/backfill_json.hpp"
#include "tarmac/serve/live_wire.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::cli {

namespace {

// The client reads a line of 1 MiB at most: a window's answer is kept under this.
constexpr std::size_t kWindowAnswerBytes = 768 * 1024;

// The answers made from the newest view, made again only when a newer one is published or a
// second has passed: any local user may ask as often as the socket lets them, and the answer is
// made on the scheduler's thread. The age each answer states is at most that second short, so an
// agent whose sampling is stuck still shows its samples growing old.
struct AnswerCache {
  std::shared_ptr<const serve::LiveView> view;
  long long made_unix_ms = 0;
  std::optional<nlohmann::json> status;
  // By the window's first view and how many (at most kRecentViews different windows per sample,
  // whatever `ms` a client names).
  std::map<std::pair<const serve::LiveView*, std::size_t>, nlohmann::json> windows;
  static constexpr long long kLifetimeMs = 1000;
};

}  // namespace

// `{"op":"status"}` and `{"op":"window","ms":N}` on the scheduler's socket (docs/recorder.md
// "Commands through the agent"): the latest view, for `tarmac status`, `watch` and `top`, and the
// views of the last N ms (at most serve::LiveState::kRecentMs) with the topology, for `doctor`;
// these commands then need not open NVML. Any local user may ask: they carry what NVML tells
// anyone, and no process's host facts (the client reads /proc as its own user). Which NVML the
// agent reads comes with both: a command reading another (a simulation) takes neither.
void wire_status(sched::DaemonOptions& dopts, const serve::LiveState& live, std::string nvml,
                 const agent::AgentOptions& sampling, std::function<std::vector<serve::GpuBatch>()> batches) {
  dopts.more_requests = [&live, nvml = std::move(nvml), batches = std::move(batches), interval_ms = sampling.interval_ms,
                         process_interval_ms = sampling.process_interval_ms, cache = std::make_shared<AnswerCache>(),
                         more = std::move(dopts.more_requests)](
                            const sched::Peer& peer, std::vector<util::Fd>& fds, const nlohmann::json& req,
                            const sched::Defer& defer) -> std::optional<nlohmann::json> {
    const auto op = req.find("op");
    if (op == req.end() || (*op != "status" && *op != "window")) return more ? more(peer, fds, req, defer) : std::nullopt;
    const auto view = live.view();
    if (!view) return nlohmann::json{{"ok", false}, {"code", "busy"}, {"error", "the agent has not sampled yet"}};
    const long long now = util::wall_ms();
    if (cache->view != view || now - cache->made_unix_ms > AnswerCache::kLifetimeMs || now < cache->made_unix_ms) {
      *cache = AnswerCache{view, now, std::nullopt, {}};
    }
    if (*op == "status") {
      if (!cache->status) {
        // The backfill batch on each GPU, as the dashboard's cards show it: not whose batch it is.
        nlohmann::json on_gpus = nlohmann::json::array();
        for (const auto& b : batches ? batches() : std::vector<serve::GpuBatch>{}) {
          auto batch = diagnose::backfill_json({b.model, b.server, b.answered, b.requests});
          batch["uuid"] = b.uuid;
          on_gpus.push_back(std::move(batch));
        }
        cache->status = nlohmann::json{{"ok", true},
                                       {"nvml", nvml},
                                       {"view", nlohmann::json::parse(serve::live_wire(*view, now, false))},
                                       {"backfill", std::move(on_gpus)}};
      }
      return *cache->status;
    }
    const auto ms = req.find("ms");
    if (ms == req.end() || !ms->is_number_unsigned() || ms->get<std::uint64_t>() > serve::LiveState::kRecentMs) {
      return nlohmann::json{{"ok", false}, {"code", "invalid"},
                            {"error", fmt::format("window: ms is a whole number from 0 to {}", serve::LiveState::kRecentMs)}};
    }
    const auto views = live.recent(ms->get<long long>());
    const auto key = std::make_pair(views.empty() ? nullptr : views.front().get(), views.size());
    if (const auto known = cache->windows.find(key); known != cache->windows.end()) return known->second;
    nlohmann::json samples = nlohmann::json::array();
    for (auto& text : serve::window_wire(views, now, kWindowAnswerBytes)) samples.push_back(nlohmann::json::parse(text));
    return cache->windows[key] = nlohmann::json{{"ok", true},
                                                   {"nvml", nvml},
                                                   {"interval_ms", interval_ms},
                                                   {"process_interval_ms", process_interval_ms},
                                                   {"samples", std::move(samples)}};
  };
}

}  // namespace tarmac::cli
