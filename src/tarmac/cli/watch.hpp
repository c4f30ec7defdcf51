// `tarmac watch [-n S]`: status redrawn in place, the `watch -n 1 nvidia-smi` reflex done right.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tarmac/cli/context.hpp"
#include "tarmac/cli/status.hpp"
#include "tarmac/gpu/activity.hpp"

namespace tarmac::cli {

void add_watch_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// The pieces of `watch`, declared for their unit tests.
namespace detail {

// One frame of status (with its "Every Ns" line) as text.
[[nodiscard]] std::string render_frame(const gpu::Snapshot& snapshot, const gpu::ActivityThresholds& thresholds,
                                       bool color, double interval_s);
[[nodiscard]] std::string render_frame(const StatusView& view, bool color, double interval_s);

// `frame` drawn over the previous one on a terminal: cursor home, each line cleared to its end,
// the rest of the screen erased; nothing is cleared first, so the screen never flashes empty.
[[nodiscard]] std::string in_place_frame(const std::string& frame);

// One line of `watch --json` (NDJSON): what `status --json` prints for `view` (every GPU with its
// class, leases, backfill batches and MIG devices; the verdicts), on one line.
[[nodiscard]] nlohmann::json frame_json(const StatusView& view, const std::optional<std::string>& cuda_visible,
                                        const std::optional<std::string>& cuda_order);

}  // namespace detail

}  // namespace tarmac::cli
