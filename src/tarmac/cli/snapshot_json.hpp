// The snapshot as JSON: typed values, units in the keys, null for "not supported / not read".
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"

namespace tarmac::cli {

[[nodiscard]] nlohmann::json to_json(const host::ProcessInfo& info);
[[nodiscard]] nlohmann::json to_json(const gpu::GpuProcess& process);
// One device; `activity` is its class in this snapshot.
// `mig_classes`: the class of each of the device's MIG devices (gpu::classify_mig), or empty.
[[nodiscard]] nlohmann::json to_json(const gpu::Device& device, gpu::Activity activity,
                                     const std::vector<gpu::MigActivity>& mig_classes = {});
[[nodiscard]] nlohmann::json to_json(const gpu::Topology& topology);

}  // namespace tarmac::cli
