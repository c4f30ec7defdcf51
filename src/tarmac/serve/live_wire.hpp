// The agent's live view for a command on the same machine (docs/recorder.md "Commands through
// the agent"): the scheduler socket's `status` request answers with it, and `tarmac status` prints from
// it instead of opening NVML. Unlike the HTTP API (rounded for dashboards), it carries the latest
// snapshot whole, every value NVML gave in its own unit, with each GPU's class and since when, so
// that status prints what it would have printed reading NVML itself, and more: classes measured
// over time ("holding 2h05m") instead of guessed from one look.
//
// Processes travel without what the host says of them (user, command line, container, job): the
// client reads those from /proc itself, so it shows exactly what its own user may see there; only
// the start time (clock ticks after boot) comes along, so that a pid reused since the agent's read
// is not taken for the process the agent saw.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"
#include "tarmac/serve/live.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::serve {

// What a client makes of the answer.
struct AgentView {
  gpu::Snapshot snapshot;  // processes' `host` holds only pid and start_ticks
  std::vector<gpu::Activity> classes;                      // per device of snapshot
  std::vector<std::vector<gpu::MigActivity>> mig_classes;  // per device, per MIG device
  // Per device: since when it is in its class, and since when its processes have been at 0 %, in
  // the snapshot's clock (unix ms); nullopt where the agent did not say.
  std::vector<std::optional<long long>> class_since_unix_ms;
  std::vector<std::optional<long long>> held_idle_since_unix_ms;
  long long age_ms = 0;  // how old the sample was when the agent answered
};

// The view as one line of JSON. `now_unix_ms`: real time now (the sample's age is measured by it).
// `with_topology`: the snapshot's GPU x GPU links too, when it has them (doctor's; status needs none).
[[nodiscard]] std::string live_wire(const LiveView& view, long long now_unix_ms, bool with_topology = true);

// The views of a window (LiveState::recent), each as live_wire writes it, the topology with the
// last only: every one while together they fit in `max_bytes`, else as many as fit (at least two,
// which may then weigh more), evenly spread, the first and the last always among them.
[[nodiscard]] std::vector<std::string> window_wire(const std::vector<std::shared_ptr<const LiveView>>& views,
                                                   long long now_unix_ms, std::size_t max_bytes);

// Reads an answer back. Parsed as hostile input: every value is type- and range-checked, strings
// and lists are bounded, and anything malformed is an error that names it.
[[nodiscard]] Result<AgentView> parse_live_wire(std::string_view text);
// The same for the view already parsed as JSON (the "view" of the socket's answer). Named apart:
// where json is complete, a std::string converts to it as well as to std::string_view.
[[nodiscard]] Result<AgentView> parse_live_wire_json(const nlohmann::json& view);

}  // namespace tarmac::serve
