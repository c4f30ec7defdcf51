// Gathering the evidence (I/O): the GPUs' processes from the backend, their facts from /proc, and
// their utilization over time from the agent's store when it records this machine, else from
// reap's own watch of --window. The decision (decide.hpp) is then a pure function of the result.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/reap/evidence.hpp"
#include "tarmac/reap/rules.hpp"
#include "tarmac/store/rows.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::reap {

// A live lease of tarmac's scheduler (the agent's jobs and agentless pick/run write them): its
// owner and whatever runs under it belong to the job.
struct JobLease {
  std::string job_id;
  unsigned pid = 0;  // the lease's owner; 0 for none
};

// How long before a process started a listing of its (GPU, pid) for another process still makes
// its own listing unproven: 2 × the agent's process interval + 30 s covers an interval of up to
// 4m45s (the default is 5 s), since the agent's last sample of the stale listing falls within one
// interval before the new process appeared. A pid reused on the same GPU within it is refused even
// when innocent: the margin errs towards not killing.
inline constexpr long long kListingMarginMs = 10 * 60 * 1000;

struct GatherOptions {
  std::vector<unsigned> gpus;            // --gpu; empty: every GPU
  std::optional<std::string> user;       // --user: only this user's processes (name or uid)
  long long window_ms = 0;               // how long to watch without a store (already capped)
  long long idle_for_ms = 0;             // how far back the store is read (twice this, and 2 min more)
  std::optional<std::string> store_path; // the agent's store; nullopt: do not look for one
  std::vector<JobLease> leases;
  // How recent the store's last record, and a process's span, must be for the store to speak for
  // now: what lies between the span's last sample and reap's own reading was not watched (a
  // stalled agent hides a burst of work there; third review, M1). 30 s: the agent's defaults
  // (a process sample every 5 s, a write every 5 s) with room for a slow write.
  long long store_fresh_ms = 30 * 1000;
  // Tests only: the character device taken for every GPU's own file instead of 195:minor (the
  // tests cannot create a GPU's device node; docs/reap.md "Safety checks").
  std::optional<host::DeviceNumber> device_file_override;
};

struct Gathered {
  std::vector<ProcessEvidence> processes;
  EvidenceSource source = EvidenceSource::Watch;
  long long watched_ms = 0;     // how long reap actually watched (Watch), 0 with the store
  std::string store_note;       // why the store was not used (or which was), for the output
  gpu::Snapshot last;           // the last snapshot taken
};

// The per-device snapshot reap needs: UUIDs, minor numbers, memory, utilization and processes.
[[nodiscard]] gpu::SnapshotOptions reap_snapshot_options();

// One process's reading in one snapshot: the busiest of every engine NVML samples of it (SM,
// memory, encoder, decoder, JPEG, OFA; SM unknown is unknown), or, when that is unknown and it is
// the device's only process, the busiest of the device's GPU, memory, encoder and decoder
// utilization (PRODUCT.md §7).
[[nodiscard]] Observation observe(const gpu::Device& device, const gpu::GpuProcess& process, long long ts_ms);

// Readings over several snapshots, per (GPU, pid, start time): a reused pid is another process.
class Watch {
 public:
  explicit Watch(long long max_gap_ms) : max_gap_ms_(max_gap_ms) {}
  // The snapshot's readings, stamped `ts_ms` (monotonic: a watch never steps with the wall clock).
  void add(const gpu::Snapshot& snapshot, long long ts_ms);
  [[nodiscard]] IdleHistory history(unsigned gpu, const gpu::GpuProcess& process) const;
  // What the watch saw of `process`'s (GPU, pid) listed for a process of another or unknown start
  // time, as the sentence for ProcessEvidence::listed_before; nullopt when it saw none.
  [[nodiscard]] std::optional<std::string> listed_for_another(unsigned gpu, const gpu::GpuProcess& process) const;

 private:
  using Key = std::tuple<unsigned, unsigned, long long>;
  [[nodiscard]] static Key key_of(unsigned gpu, const gpu::GpuProcess& process);
  long long max_gap_ms_;
  std::map<Key, std::vector<Observation>> seen_;
};

// What the store's `spans` of one (GPU, pid) say against the listing of the process started at
// `start_unix` (seconds) holding that pid now: the sentence for ProcessEvidence::listed_before when
// one of another or unknown start time has its last sample kListingMarginMs before that start or
// later; nullopt when none does.
[[nodiscard]] std::optional<std::string> listed_for_another(const std::vector<store::ProcessSpan>& spans, unsigned pid,
                                                            std::optional<long long> start_unix);

// The device file of `device`'s GPU: (195, its minor), or `override` when given; nullopt when the
// minor is unknown or the GPU runs in MIG mode (its instances share the file: it proves nothing).
[[nodiscard]] std::optional<host::DeviceNumber> device_file_of(const gpu::Device& device,
                                                               const std::optional<host::DeviceNumber>& override);

// Whether `e` is shown under --gpu and --user (they filter what is shown, never the evidence a
// decision uses: a pid's listings on every GPU decide it).
[[nodiscard]] bool shown(const GatherOptions& options, const ProcessEvidence& e);

// The job of the live lease that `pid` or one of its ancestors owns, or whose id its TARMAC_JOB_ID
// names (a TARMAC_JOB_ID without such a lease is anybody's word and protects nothing); an error
// when it owns none and its TARMAC_JOB_ID could not be read in time (host::BoundedReader): it may
// be in one, and no caller may take it as in none.
[[nodiscard]] Result<std::optional<std::string>> tarmac_job_of(const host::ProcReader& proc, unsigned pid,
                                                               const std::vector<JobLease>& leases);

// Records on `info` that one of its facts could not be read in time (ProcessInfo::unread), so
// that the rules refuse it (rules.hpp, protected_by).
void note_unread(host::ProcessInfo& info, const Error& why);

// Gathers the evidence of every GPU process (whatever --gpu and --user say): the store's history when it records this machine now (its GPUs, a
// record within store_fresh_ms), else a watch of options.window_ms.
[[nodiscard]] Result<Gathered> gather(gpu::Backend& backend, const host::ProcReader& proc, const GatherOptions& options,
                                      const util::Clock& clock);

// Whether a process of `user` (a name, or a uid as text) is `process`'s owner.
[[nodiscard]] bool owned_by(const host::ProcessInfo& process, const std::string& user);

// Whether slurmd runs on this machine (a process named slurmd under `proc`'s root).
[[nodiscard]] bool slurmd_runs(const host::ProcReader& proc);

// reap's ancestors: its parent, that one's parent, ... (1 excluded), at most 64.
[[nodiscard]] std::vector<unsigned> ancestors_of(const host::ProcReader& proc, unsigned pid);

}  // namespace tarmac::reap
