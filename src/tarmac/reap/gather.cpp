#include "tarmac/reap/gather.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <set>

#include "tarmac/host/cgroup.hpp"
#include "tarmac/host/device_files.hpp"
#include "tarmac/host/proc_parse.hpp"
#include "tarmac/store/reader.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::reap {
namespace {

constexpr unsigned kMaxAncestors = 64;
constexpr long long kMinWatchIntervalMs = 100;
constexpr long long kMaxWatchIntervalMs = 2000;
constexpr long long kStoreMarginMs = 2 * 60 * 1000;
constexpr unsigned kMaxUtilPct = 100;  // NVML's larger values are garbage (issue 15)

// Whether `holder` (an unlisted process with device files open) holds the GPU of minor `minor`:
// its own /dev/nvidiaN, or only the shared files, which do not say which GPU.
bool holds_gpu(const host::DeviceFileHolder& holder, std::optional<unsigned> minor) {
  bool any_gpu_file = false;
  for (const auto& device : holder.devices) {
    const auto m = host::gpu_minor_of(device);
    if (!m) continue;
    any_gpu_file = true;
    if (minor && *m == *minor) return true;
  }
  return !any_gpu_file || !minor;
}

// The cgroup of each listed process that runs in a container: its container-mates may be its
// hidden holders.
using ContainerCgroups = std::map<unsigned, std::string>;

ContainerCgroups container_cgroups(const host::ProcReader& proc, const std::set<unsigned>& listed) {
  ContainerCgroups out;
  for (const unsigned pid : listed) {
    auto text = proc.cgroup_text(pid);
    if (text && host::parse_cgroup(*text)) out.emplace(pid, std::move(*text));
  }
  return out;
}

std::vector<HiddenHolder> hidden_holders(const host::ProcReader& proc, const host::ParentIndex& parents, unsigned pid,
                                         std::optional<unsigned> minor, const ContainerCgroups& containers,
                                         const std::vector<host::DeviceFileHolder>& unlisted) {
  std::vector<HiddenHolder> out;
  if (unlisted.empty()) return out;
  const auto tree = parents.descendants(pid);
  const auto container = containers.find(pid);
  for (const auto& holder : unlisted) {
    if (!holds_gpu(holder, minor)) continue;
    HiddenHolder h;
    if (std::find(tree.begin(), tree.end(), holder.pid) != tree.end()) {
      h.relation = HiddenHolder::Relation::Descendant;
    } else if (container != containers.end() && proc.cgroup_text(holder.pid) == container->second) {
      h.relation = HiddenHolder::Relation::SameContainer;
    } else {
      continue;
    }
    // Its name and owner alone: neither takes the lock of its memory map that a read of its
    // command line or environment would (docs/reap.md "Safety checks").
    auto stat = proc.stat(holder.pid);
    h.pid = holder.pid;
    if (stat) h.name = std::move(stat->name);
    h.uid = proc.owner_uid(holder.pid);
    h.devices = holder.devices;
    out.push_back(std::move(h));
  }
  return out;
}

std::set<unsigned> listed_pids(const gpu::Snapshot& snapshot) {
  std::set<unsigned> listed;
  for (const auto& d : snapshot.devices) {
    for (const auto& p : d.processes) listed.insert(p.pid);
  }
  return listed;
}

// The device-file holders NVML does not list on any GPU that hidden_holders may show: the
// descendants of a listed process, and the processes of a listed process's container. Only their
// descriptors are read: reading every process's (hundreds of links each, on a real machine) to
// drop all but these was most of a pass's cost.
std::vector<host::DeviceFileHolder> unlisted_holders(const host::ProcReader& proc, const std::set<unsigned>& listed,
                                                     const host::ParentIndex& parents, const ContainerCgroups& containers) {
  std::set<unsigned> related;
  for (const unsigned pid : listed) {
    for (const unsigned d : parents.descendants(pid)) related.insert(d);
  }
  std::set<std::string> cgroups;
  for (const auto& [pid, text] : containers) cgroups.insert(text);
  return host::device_file_holders(proc.root(), [&](unsigned pid) {
    if (listed.count(pid) != 0) return false;
    if (related.count(pid) != 0) return true;
    if (cgroups.empty()) return false;
    const auto text = proc.cgroup_text(pid);
    return text && cgroups.count(*text) != 0;
  });
}

// The identity of `process` now (and its stat's other facts), when it is still the process the
// snapshot saw: the start time in the same read as the identity is the snapshot's.
std::optional<host::ProcessStat> first_sight(const host::ProcReader& proc, const gpu::GpuProcess& process) {
  if (process.host.visibility != host::PidVisibility::Visible || !process.host.start_time_unix) return std::nullopt;
  auto now = proc.stat(process.pid);
  if (!now || now->start_time_unix != process.host.start_time_unix) return std::nullopt;
  return now;
}

// The holders of the GPUs that NVML does not list, and what tells which listed process they belong to.
struct Unlisted {
  host::ParentIndex parents;
  ContainerCgroups containers;
  std::vector<host::DeviceFileHolder> holders;
};

Unlisted unlisted_of(const host::ProcReader& proc, const gpu::Snapshot& snapshot) {
  Unlisted out;
  const auto listed = listed_pids(snapshot);
  out.parents = proc.parent_index();  // one scan of /proc for every process's tree
  out.containers = container_cgroups(proc, listed);
  out.holders = unlisted_holders(proc, listed, out.parents, out.containers);
  return out;
}

ProcessEvidence evidence_of(const host::ProcReader& proc, const Unlisted& unlisted, const GatherOptions& options,
                            const gpu::Device& device, const gpu::GpuProcess& process, long long wall_now_ms) {
  ProcessEvidence e;
  e.gpu = device.id.index;
  e.gpu_uuid = device.id.uuid;
  e.process = process;
  e.device_file = device_file_of(device, options.device_file_override);
  auto sight = first_sight(proc, process);
  if (!sight) return e;
  e.identity = std::move(sight->identity);
  e.tty = std::move(sight->tty);
  if (e.device_file) e.holding = proc.holds_device(process.pid, *e.device_file);
  if (auto job = tarmac_job_of(proc, process.pid, options.leases); job.ok()) {
    e.tarmac_job = std::move(*job);
  } else {
    note_unread(e.process.host, job.error());
  }
  e.children = unlisted.parents.children(process.pid);
  e.hidden = hidden_holders(proc, unlisted.parents, process.pid, device.id.minor_number, unlisted.containers,
                            unlisted.holders);
  if (process.host.start_time_unix) e.age_ms = wall_now_ms - *process.host.start_time_unix * 1000;
  return e;
}

// The store's spans and rows of the last `back_ms`, or why it does not record this machine now.
struct StoreRecord {
  std::vector<store::ProcessSpan> spans;
  // By (the store's GPU index, pid), oldest first: each process's rows, grouped once for the pass.
  std::map<std::pair<unsigned, unsigned>, std::vector<store::ProcessSample>> rows_of;
  std::map<std::string, unsigned> index_of_uuid;  // the store's GPU index of each UUID
  // By (GPU UUID, pid) listed now: every span of that pid on that GPU since kListingMarginMs before
  // the process now at the pid started, however long ago (not limited to `back_ms`).
  std::map<std::pair<std::string, unsigned>, std::vector<store::ProcessSpan>> listings;
};

// Fills `out.listings` for every process `now` lists with a known start time (one without is
// never a candidate: not-visible or too-young).
Result<void> read_listings(store::Reader& reader, const gpu::Snapshot& now, long long wall_now_ms, StoreRecord& out) {
  std::vector<store::SpanQuery> queries;
  std::vector<std::pair<std::string, unsigned>> keys;  // the (UUID, pid) of each query
  for (const auto& d : now.devices) {
    if (!d.id.uuid) continue;
    const auto index = out.index_of_uuid.find(*d.id.uuid);
    if (index == out.index_of_uuid.end()) continue;
    for (const auto& p : d.processes) {
      if (!p.host.start_time_unix) continue;
      queries.push_back({index->second, p.pid, {*p.host.start_time_unix * 1000 - kListingMarginMs, wall_now_ms + 1}});
      keys.emplace_back(*d.id.uuid, p.pid);
    }
  }
  TARMAC_TRY_ASSIGN(auto spans, reader.processes_of(queries));
  for (std::size_t i = 0; i < keys.size(); ++i) out.listings[keys[i]] = std::move(spans[i]);
  return {};
}

Result<StoreRecord> read_store(const std::string& path, const gpu::Snapshot& now, long long wall_now_ms,
                               long long back_ms, long long fresh_ms) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return make_error(Error::Code::NotFound, "no agent store at " + path);
  TARMAC_TRY_ASSIGN(auto reader, store::Reader::open(path));
  TARMAC_TRY_ASSIGN(const auto gpus, reader.gpus());
  for (const auto& d : now.devices) {
    const bool known = d.id.uuid && std::any_of(gpus.begin(), gpus.end(), [&](const auto& g) { return g.uuid == *d.id.uuid; });
    if (!known) return make_error(Error::Code::NotFound, "the store at " + path + " does not record this machine's GPUs");
  }
  TARMAC_TRY_ASSIGN(const auto recorded, reader.recorded());
  if (!recorded || recorded->until_ms < wall_now_ms - fresh_ms) {
    return make_error(Error::Code::NotFound, "the store at " + path + " has no record of the last " +
                                                 util::format_duration_ms(fresh_ms) + ": no agent records this machine now");
  }
  const store::TimeRange range{wall_now_ms - back_ms, wall_now_ms + 1};
  StoreRecord out;
  for (const auto& g : gpus) out.index_of_uuid[g.uuid] = g.gpu;
  TARMAC_TRY_ASSIGN(out.spans, reader.processes(range));
  TARMAC_TRY_ASSIGN(auto rows, reader.process_samples(range, {}));
  // In time order (the reader's ORDER BY ts_ms), so each process's rows are too.
  for (auto& row : rows) out.rows_of[{row.gpu, row.pid}].push_back(row);
  TARMAC_TRY(read_listings(reader, now, wall_now_ms, out));
  return out;
}

// The history the store gives `process` on the GPU of UUID `uuid`: its span with the same start
// time that reaches the present, its rows, and reap's reading now. Rows are matched by the GPU's
// UUID (through the store's own index of it): an index names another GPU once one is removed.
IdleHistory history_from_store(const StoreRecord& record, const std::optional<std::string>& uuid,
                               const gpu::GpuProcess& process, const Observation& now, long long fresh_ms) {
  const auto found = uuid ? record.index_of_uuid.find(*uuid) : record.index_of_uuid.end();
  if (found == record.index_of_uuid.end()) return idle_history({now}, 0);
  const unsigned gpu = found->second;
  const store::ProcessSpan* best = nullptr;
  for (const auto& span : record.spans) {
    if (span.gpu != gpu || span.pid != process.pid || span.start_unix != process.host.start_time_unix) continue;
    if (span.last_ms < now.ts_ms - fresh_ms) continue;
    if (best == nullptr || span.last_ms > best->last_ms) best = &span;
  }
  if (best == nullptr) return idle_history({now}, 0);
  const auto rows = record.rows_of.find({gpu, process.pid});
  return store_history(*best, rows == record.rows_of.end() ? std::vector<store::ProcessSample>{} : rows->second, now);
}

// What the store says against `process`'s listing on the GPU of UUID `uuid` (listed_for_another).
std::optional<std::string> listed_before_in_store(const StoreRecord& record, const std::optional<std::string>& uuid,
                                                  const gpu::GpuProcess& process) {
  if (!uuid) return std::nullopt;  // no UUID: no history either, never a candidate
  const auto found = record.listings.find({*uuid, process.pid});
  const std::vector<store::ProcessSpan> none;
  const auto& spans = found == record.listings.end() ? none : found->second;
  if (auto another = listed_for_another(spans, process.pid, process.host.start_time_unix)) return another;
  // No other process's listing seen is not enough: a stale context's listing present from the
  // first sample after the pid changed hands, or through a gap in sampling, shows no other
  // owner. The listing must be seen to begin while this process had the pid (third review, H1).
  const bool proven = std::any_of(spans.begin(), spans.end(), [&](const store::ProcessSpan& s) {
    return s.start_unix == process.host.start_time_unix && s.listed_after_start;
  });
  if (proven) return std::nullopt;
  return fmt::format("the agent never saw the driver's listing of pid {} on this GPU begin while this process had "
                     "the pid (listed from the first sample after it started, after a gap in sampling, or before "
                     "the agent ran): it may be a stale context's",
                     process.pid);
}

// Watches for `window_ms`: a snapshot every interval until the last is `window_ms` after the
// first, so that what is claimed watched is the span between two readings actually taken.
Result<gpu::Snapshot> watch(gpu::Backend& backend, Watch& seen, long long window_ms, const util::Clock& clock,
                            long long& watched_ms) {
  const long long interval = std::clamp(window_ms / 8, kMinWatchIntervalMs, kMaxWatchIntervalMs);
  const std::atomic<bool> never{false};
  gpu::Snapshot last;
  std::optional<long long> first;
  for (long long next = clock.monotonic_ms();; next += interval) {
    clock.sleep_until(next, never);
    TARMAC_TRY_ASSIGN(last, backend.snapshot(reap_snapshot_options()));
    const long long now = clock.monotonic_ms();
    if (!first) first = now;
    seen.add(last, now);
    watched_ms = now - *first;
    if (watched_ms >= window_ms) return last;
  }
}

// The busiest of `first` (which must be known) and the known ones of `others`; nullopt when any
// known value is garbage (above 100): one engine's nonsense makes the whole reading unknown.
std::optional<unsigned> busiest(std::optional<unsigned> first, std::initializer_list<std::optional<unsigned>> others) {
  if (!first || *first > kMaxUtilPct) return std::nullopt;
  unsigned out = *first;
  for (const auto& v : others) {
    if (!v) continue;
    if (*v > kMaxUtilPct) return std::nullopt;
    out = std::max(out, *v);
  }
  return out;
}

}  // namespace

gpu::SnapshotOptions reap_snapshot_options() {
  using gpu::ValueGroup;
  gpu::SnapshotOptions options;
  options.processes = true;
  options.values = {ValueGroup::Uuid,        ValueGroup::Board,              ValueGroup::Memory,
                    ValueGroup::MigMode,     ValueGroup::Utilization,        ValueGroup::CodecUtilization,
                    ValueGroup::ProcessHost, ValueGroup::ProcessUtilization};
  return options;
}

Observation observe(const gpu::Device& device, const gpu::GpuProcess& process, long long ts_ms) {
  Observation o;
  o.ts_ms = ts_ms;
  o.mem_used_bytes = process.used_mem_bytes;
  // A process that runs no kernel but copies memory, encodes or decodes video, or decodes JPEG is
  // working: the busiest engine is its reading.
  if (const auto own = busiest(process.sm_util_pct, {process.mem_util_pct, process.enc_util_pct, process.dec_util_pct,
                                                     process.jpg_util_pct, process.ofa_util_pct})) {
    o.sm_util_pct = own;
    o.source = UtilSource::PerProcess;
  } else if (!process.sm_util_pct && device.processes.size() == 1) {
    // The GPU's own utilization is this process's when no other process is on it.
    const auto& s = device.sample;
    o.sm_util_pct = busiest(s.util_gpu_pct, {s.util_mem_pct, s.util_encoder_pct, s.util_decoder_pct});
    if (o.sm_util_pct) o.source = UtilSource::DeviceAlone;
  }
  return o;
}

Watch::Key Watch::key_of(unsigned gpu, const gpu::GpuProcess& process) {
  return {gpu, process.pid, process.host.start_time_unix.value_or(-1)};
}

void Watch::add(const gpu::Snapshot& snapshot, long long ts_ms) {
  for (const auto& device : snapshot.devices) {
    if (device.lost) continue;
    for (const auto& process : device.processes) seen_[key_of(device.id.index, process)].push_back(observe(device, process, ts_ms));
  }
}

std::optional<std::string> Watch::listed_for_another(unsigned gpu, const gpu::GpuProcess& process) const {
  const Key own = key_of(gpu, process);
  for (auto it = seen_.lower_bound({gpu, process.pid, std::numeric_limits<long long>::min()});
       it != seen_.end() && std::get<0>(it->first) == gpu && std::get<1>(it->first) == process.pid; ++it) {
    if (it->first == own) continue;
    const long long start = std::get<2>(it->first);
    return fmt::format("reap's watch saw the driver list pid {} on this GPU for another process ({})", process.pid,
                       start < 0 ? std::string("start time unknown") : fmt::format("started at {}", start));
  }
  return std::nullopt;
}

IdleHistory Watch::history(unsigned gpu, const gpu::GpuProcess& process) const {
  const auto found = seen_.find(key_of(gpu, process));
  if (found == seen_.end()) return {};
  return idle_history(found->second, max_gap_ms_);
}

std::optional<std::string> listed_for_another(const std::vector<store::ProcessSpan>& spans, unsigned pid,
                                              std::optional<long long> start_unix) {
  if (!start_unix) return fmt::format("the start time of pid {} is unknown: its listing cannot be tied to it", pid);
  const long long start_ms = *start_unix * 1000;
  for (const auto& span : spans) {
    if (span.pid != pid || span.start_unix == start_unix || span.last_ms < start_ms - kListingMarginMs) continue;
    const std::string whose =
        span.start_unix ? fmt::format("a process started at {}", *span.start_unix) : std::string("a pid /proc did not show");
    const std::string when = span.last_ms < start_ms
                                 ? util::format_duration_ms(start_ms - span.last_ms) + " before this process started"
                                 : std::string("after this process started");
    return fmt::format("the driver listed pid {} on this GPU for {} until {}: the listing may be a stale context's",
                       pid, whose, when);
  }
  return std::nullopt;
}

std::optional<host::DeviceNumber> device_file_of(const gpu::Device& device,
                                                 const std::optional<host::DeviceNumber>& override) {
  // A MIG GPU's instances all sit behind the one file: holding it does not say which is held.
  if (device.modes.mig_mode_current == true || !device.id.minor_number) return std::nullopt;
  if (override) return override;
  return host::DeviceNumber{host::kNvidiaMajor, *device.id.minor_number};
}

bool shown(const GatherOptions& options, const ProcessEvidence& e) {
  const auto& gpus = options.gpus;
  if (!gpus.empty() && std::find(gpus.begin(), gpus.end(), e.gpu) == gpus.end()) return false;
  return !options.user || owned_by(e.process.host, *options.user);
}

Result<std::optional<std::string>> tarmac_job_of(const host::ProcReader& proc, unsigned pid,
                                                 const std::vector<JobLease>& leases) {
  if (leases.empty()) return std::optional<std::string>{};
  const auto id = proc.environ_value(pid, "TARMAC_JOB_ID");
  if (id.ok() && *id) {
    for (const auto& lease : leases) {
      if (!lease.job_id.empty() && lease.job_id == **id) return std::optional<std::string>(lease.job_id);
    }
  }
  std::vector<unsigned> chain{pid};
  const auto up = ancestors_of(proc, pid);
  chain.insert(chain.end(), up.begin(), up.end());
  for (const unsigned p : chain) {
    for (const auto& lease : leases) {
      if (lease.pid != 0 && lease.pid == p) return std::optional<std::string>(lease.job_id);
    }
  }
  // Its TARMAC_JOB_ID could not be read in time: it may name a live lease's job.
  if (!id.ok()) return make_error(id.error().code, "whether it is in a tarmac job is unknown: " + id.error().message);
  return std::optional<std::string>{};
}

void note_unread(host::ProcessInfo& info, const Error& why) {
  if (!info.unread) info.unread = why.message;
}

bool owned_by(const host::ProcessInfo& process, const std::string& user) {
  if (process.user && *process.user == user) return true;
  const auto uid = util::parse_int(user, 0, 0xFFFFFFFFLL);
  return uid && process.uid && static_cast<long long>(*process.uid) == *uid;
}

bool slurmd_runs(const host::ProcReader& proc) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc.root(), ec)) {
    const auto pid = host::pid_of_proc_entry(entry.path().filename().string());
    if (!pid) continue;
    const auto comm = util::read_file(entry.path().string() + "/comm");
    if (comm && util::trim(*comm) == "slurmd") return true;
  }
  return false;
}

std::vector<unsigned> ancestors_of(const host::ProcReader& proc, unsigned pid) {
  std::vector<unsigned> out;
  unsigned current = pid;
  while (out.size() < kMaxAncestors) {
    const auto stat = proc.stat(current);
    const auto parent = stat ? std::optional<unsigned>(stat->parent_pid) : std::nullopt;
    if (!parent || *parent <= 1 || std::find(out.begin(), out.end(), *parent) != out.end()) break;
    out.push_back(*parent);
    current = *parent;
  }
  return out;
}

Result<Gathered> gather(gpu::Backend& backend, const host::ProcReader& proc, const GatherOptions& options,
                        const util::Clock& clock) {
  Gathered out;
  std::optional<StoreRecord> record;
  long long wall_now = clock.wall_ms();
  if (options.store_path) {
    TARMAC_TRY_ASSIGN(auto first, backend.snapshot(reap_snapshot_options()));
    auto read = read_store(*options.store_path, first, wall_now, 2 * options.idle_for_ms + kStoreMarginMs,
                           options.store_fresh_ms);
    if (read.ok()) {
      record = std::move(*read);
      out.source = EvidenceSource::Store;
      out.store_note = "the agent's store at " + *options.store_path;
      out.last = std::move(first);
    } else {
      out.store_note = read.error().message;
    }
  }
  Watch seen(3 * kMaxWatchIntervalMs);
  if (!record) {
    TARMAC_TRY_ASSIGN(out.last, watch(backend, seen, options.window_ms, clock, out.watched_ms));
    wall_now = clock.wall_ms();
  }
  const auto unlisted = unlisted_of(proc, out.last);
  for (const auto& device : out.last.devices) {
    if (device.lost) continue;
    for (const auto& process : device.processes) {
      auto e = evidence_of(proc, unlisted, options, device, process, wall_now);
      e.source = out.source;
      e.history = record ? history_from_store(*record, device.id.uuid, process, observe(device, process, wall_now),
                                              options.store_fresh_ms)
                         : seen.history(device.id.index, process);
      e.listed_before = record ? listed_before_in_store(*record, device.id.uuid, process)
                               : seen.listed_for_another(device.id.index, process);
      out.processes.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace tarmac::reap
