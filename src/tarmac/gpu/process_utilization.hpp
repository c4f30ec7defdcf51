// Per-process utilization from the driver's sample buffer, turned into GpuProcess::sm_util_pct and
// mem_util_pct under the contract model.hpp states (a value, 0 for known idle, or unknown). Pure:
// nvml_processes.cpp reads the samples, these rules decide what they mean (tests/unit/gpu).
#pragma once

#include <optional>
#include <vector>

#include "tarmac/gpu/model.hpp"

namespace tarmac::gpu {

// One sample of one process, in the driver's terms (percentages over the driver's sample period).
struct UtilizationSample {
  unsigned pid = 0;
  unsigned long long timestamp_us = 0;  // CPU time, microseconds since the epoch
  unsigned sm_pct = 0;
  unsigned mem_pct = 0;
  unsigned enc_pct = 0;
  unsigned dec_pct = 0;
  std::optional<unsigned> jpg_pct;  // nullopt where the driver's function has no JPEG engine
  std::optional<unsigned> ofa_pct;  // nullopt where it has no OFA engine
};

// How the read of a device's samples went.
enum class UtilizationRead {
  Samples,      // the call succeeded: the samples it returned
  SamplesFull,  // it succeeded and filled the whole buffer: the driver may have left samples out
  NoSamples,    // the driver had no sample newer than the cursor (NVML_ERROR_NOT_FOUND)
  Unknown,      // not supported, MIG, or any other failure: nothing is known
};

// The name the MPS server runs under, and the 15 characters of it that /proc's comm keeps.
inline constexpr const char* kMpsServerProgram = "nvidia-cuda-mps-server";
inline constexpr const char* kMpsComm = "nvidia-cuda-mps";

// Whether one device's listing shows CUDA MPS: a process of the MPS family, or the MPS server
// itself (by its comm or program name, where the host facts were read). The MPS server runs its
// clients' work, and NVML documents no rule for whom the driver charges those samples to.
[[nodiscard]] bool runs_mps(const std::vector<GpuProcess>& processes);

// Every read of a device asks for at least this much history: a read within one driver sample
// period of the previous one would otherwise find no newer sample (NVML_ERROR_NOT_FOUND) and call
// every process, a busy one too, "known idle" (N2 of reap's second review). With the window, "no
// samples" means none in at least this long, and no read waits for a sample period.
inline constexpr unsigned long long kMinUtilizationWindowUs = 5'000'000;

// The cursor a read at `now_us` passes to the driver: the previous read's (`cursor`, nullopt for
// none) when it is older than kMinUtilizationWindowUs (a slow watch covers the whole gap), else
// now_us - kMinUtilizationWindowUs.
[[nodiscard]] unsigned long long utilization_since(std::optional<unsigned long long> cursor, unsigned long long now_us);

// Sets the per-process utilizations (SM, memory, encoder, decoder, JPEG, OFA) of every process from
// one read of its device, whose cursor was `last_seen_us` (utilization_since: only samples newer
// than it count), at `now_us`. A process with a garbage sample
// (a value above 100, or a time more than a minute in the future) is unknown; one with valid samples
// takes the busiest of them, engine by engine (several samples can fall in one period between two
// reads: the latest alone would hide a burst); one with none is idle (0) when the read succeeded or
// found no samples, NVML's documented meaning ("one sample per process with some non-zero
// utilization"). It is unknown instead, never idle (M2 of reap's third review), when the read filled
// its buffer (a busy process's samples may be the ones left out) or the GPU runs MPS (runs_mps:
// the driver may charge a client's work to the server). Returns the cursor for the next read: the
// newest valid sample's time, or `last_seen_us`.
[[nodiscard]] unsigned long long apply_utilization(UtilizationRead read, const std::vector<UtilizationSample>& samples,
                                                   unsigned long long last_seen_us, unsigned long long now_us,
                                                   std::vector<GpuProcess>& processes);

}  // namespace tarmac::gpu
