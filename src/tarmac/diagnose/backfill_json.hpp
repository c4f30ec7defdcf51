// A backfill batch as the agent's answers carry it (docs/backfill.md): {"model", "server",
// "answered", "requests"} in /api/v1/gpus and each GPU's "backfill" of status --json; the socket's
// status answer adds its GPU's "uuid". Written by the agent, read back by status and top as
// hostile input: one writer and one reader, so that the two cannot disagree.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <optional>

#include "tarmac/diagnose/verdicts.hpp"

namespace tarmac::diagnose {

inline constexpr std::size_t kBackfillTextMax = 256;     // bytes of a model's or a server's name
inline constexpr std::size_t kBackfillBatchesMax = 4096;  // batches read from one answer, in all

[[nodiscard]] nlohmann::json backfill_json(const Backfill& batch);

// One batch, or nullopt unless every field is there and in bounds: names of at most
// kBackfillTextMax bytes, counts whole numbers of at most 2^50. A batch is shown whole or not at all.
[[nodiscard]] std::optional<Backfill> parse_backfill(const nlohmann::json& batch);

}  // namespace tarmac::diagnose
