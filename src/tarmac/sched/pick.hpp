// The agentless pick policy (PRODUCT.md §7 "Scheduler"): which GPUs are free for a new job and which
// n of them suit it best. Pure: a function of one snapshot and the set of leased GPUs, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/gpu/model.hpp"
#include "tarmac/gpu/value_groups.hpp"

namespace tarmac::sched {

// What a job asks for.
struct PickRequest {
  unsigned n = 1;
  std::uint64_t min_free_bytes = 0;
  unsigned max_util_pct = 100;
  // A MIG device instead of GPUs (docs/mig.md): of this profile ("1g.18gb"), or of any when empty.
  std::optional<std::string> mig;
};

// Why a GPU is not free. In the order checked: the first that applies is reported.
// Mig: the GPU is in MIG mode: CUDA cannot use it whole, only its
// MIG devices (docs/mig.md), so it is never handed out as a GPU.
// Profile: a MIG device of another profile than the one asked for.
enum class Exclusion { Lost, NoUuid, Mig, Leased, Process, NotEnoughMemory, TooBusy, Profile };

[[nodiscard]] const char* to_string(Exclusion reason);

struct Excluded {
  unsigned index = 0;
  Exclusion reason = Exclusion::Lost;
  std::string detail;  // for people: "2 processes (pid 123, 456)", "1.2 GiB free < 20.0 GiB"
  std::optional<unsigned> mig;  // a MIG device of that GPU (its index under it), for MIG picks
};

struct PickResult {
  std::vector<unsigned> chosen;    // device indices in ascending (PCI bus) order; empty when not enough
  // A MIG pick's: the MIG device chosen (its GPU is chosen[0]) and its UUID, what CUDA is given.
  std::optional<unsigned> chosen_mig;
  std::optional<std::string> mig_uuid;
  std::vector<unsigned> free;      // every free GPU, best first
  std::vector<Excluded> excluded;  // every GPU that is not free, by index
  [[nodiscard]] bool ok() const { return !chosen.empty(); }
};

// The values a pick reads (a snapshot with processes and only these is enough, and cheaper).
inline constexpr gpu::ValueGroups kPickValues = {gpu::ValueGroup::Uuid, gpu::ValueGroup::Board, gpu::ValueGroup::Memory,
                                                 gpu::ValueGroup::Utilization, gpu::ValueGroup::MigMode};

// The leased GPUs: UUID -> who holds it, for messages ("by alice, job J, pid 123").
using LeasedGpus = std::map<std::string, std::string>;

// Picks `request.n` GPUs of `snapshot` that are free: not leased (`leased`), no process on
// them, not lost, at least `min_free_bytes` free and at most `max_util_pct` busy. Single GPUs rank by
// free memory (more first), then utilization (less first), then index. For n > 1 the set whose
// every pair is NVLink-connected wins (more links first), then a set within one NUMA node, then the
// set of best-ranked GPUs. Without a topology in the snapshot only the ranking counts.
//
// With `request.mig`, one MIG device (a process sees one): of the profile asked for, not leased (by
// its MIG UUID), without processes, with at least `min_free_bytes` free; the smallest that fits
// first (fewest slices, then least memory), so that big slices stay free for big jobs; `free` and
// `chosen` name GPUs, `chosen_mig` the device. GPUs not in MIG mode are excluded as `mig`.
[[nodiscard]] PickResult pick(const gpu::Snapshot& snapshot, const LeasedGpus& leased, const PickRequest& request);

// What is wrong with a MIG request, or nullopt: `profile` must be a MIG profile name ("1g.18gb",
// "1g.20gb+me") or "" (any), and a request for a MIG device asks for one, with no utilization bound
// (MIG mode gives none). Both `pick`/`run`/`reserve` and the agent's socket check with it.
[[nodiscard]] std::optional<std::string> mig_request_error(const PickRequest& request);

// The UUIDs what `result` chose is given by: its MIG device's when it is a MIG pick, else its GPUs'
// (in `chosen` order). A MIG device is leased, and named to CUDA, by its own UUID.
[[nodiscard]] std::vector<std::string> given_uuids(const gpu::Snapshot& snapshot, const PickResult& result);

// What `request` waits for, for people: "2 free GPUs", "a free MIG device of profile 1g.18gb".
[[nodiscard]] std::string wanted_text(const PickRequest& request);

// Whether `uuid` names a MIG device ("MIG-..."), which CUDA_VISIBLE_DEVICES takes only as itself.
[[nodiscard]] bool is_mig_uuid(std::string_view uuid);

}  // namespace tarmac::sched
