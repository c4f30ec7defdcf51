#include "tarmac/tui/model.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <set>

namespace tarmac::tui {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool contains_any_case(const std::string& haystack, const std::string& needle_lower) {
  return lower(haystack).find(needle_lower) != std::string::npos;
}

// -1, 0, 1 for two optional values where a missing one sorts after every present one, whatever
// the direction (an unknown SM % is not the smallest).
template <typename T>
int compare_optional(const std::optional<T>& a, const std::optional<T>& b, bool descending) {
  if (a && b) {
    if (*a == *b) return 0;
    const bool less = *a < *b;
    return (less != descending) ? -1 : 1;
  }
  if (!a && !b) return 0;
  return a ? -1 : 1;
}

template <typename T>
int compare_plain(const T& a, const T& b, bool descending) {
  if (a == b) return 0;
  return ((a < b) != descending) ? -1 : 1;
}

int compare_by(const Row& a, const Row& b, const TableOptions& o) {
  switch (o.sort) {
    case Column::Host: return compare_plain(a.host_name, b.host_name, o.descending);
    case Column::Gpu: return compare_optional(a.gpu, b.gpu, o.descending);
    case Column::Pid: return compare_plain(a.pid, b.pid, o.descending);
    case Column::User: return compare_plain(a.user, b.user, o.descending);
    case Column::Where: return compare_plain(a.where, b.where, o.descending);
    case Column::Mem: return compare_optional(a.mem_bytes, b.mem_bytes, o.descending);
    case Column::Sm: return compare_optional(a.sm_pct, b.sm_pct, o.descending);
    case Column::Cpu: return compare_optional(a.cpu_pct, b.cpu_pct, o.descending);
    case Column::Rss: return compare_optional(a.rss_bytes, b.rss_bytes, o.descending);
    case Column::Age: return compare_optional(a.age_s, b.age_s, o.descending);
    case Column::State: return compare_plain(a.state, b.state, o.descending);
    case Column::Command: return compare_plain(a.command, b.command, o.descending);
  }
  return 0;
}

bool row_less(const Row& a, const Row& b, const TableOptions& o) {
  if (const int c = compare_by(a, b, o); c != 0) return c < 0;
  return std::tie(a.host, a.gpu, a.pid) < std::tie(b.host, b.gpu, b.pid);
}

std::string state_of(const gpu::GpuProcess& p, gpu::Activity gpu_class, bool remote,
                     std::optional<long long> idle_for_ms) {
  if (!remote && p.host.visibility == host::PidVisibility::NotInNamespace) return "no /proc";
  if (gpu_class == gpu::Activity::Starved && p.sm_util_pct.value_or(0) < 100) return "starved";
  if (!p.sm_util_pct) return "unknown";
  if (*p.sm_util_pct > 0) return "busy";
  if (idle_for_ms) return "holding " + short_age(*idle_for_ms / 1000);
  return "holding";
}

}  // namespace

void Series::add(double value) {
  points_.push_back(value);
  while (points_.size() > capacity_) points_.pop_front();
}

void Series::prepend(const Series& older) {
  for (auto it = older.points_.rbegin(); it != older.points_.rend() && points_.size() < capacity_; ++it) {
    points_.push_front(*it);
  }
}

const char* column_title(Column column) {
  switch (column) {
    case Column::Host: return "HOST";
    case Column::Gpu: return "GPU";
    case Column::Pid: return "PID";
    case Column::User: return "USER";
    case Column::Where: return "WHERE";
    case Column::Mem: return "GPU-MEM";
    case Column::Sm: return "SM%";
    case Column::Cpu: return "CPU%";
    case Column::Rss: return "RSS";
    case Column::Age: return "AGE";
    case Column::State: return "STATE";
    case Column::Command: return "COMMAND";
  }
  return "?";
}

std::string short_age(long long seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 100) return fmt::format("{}s", seconds);
  if (seconds < 100 * 60) return fmt::format("{}m", seconds / 60);
  if (seconds < 48 * 3600) return fmt::format("{}h", seconds / 3600);
  return fmt::format("{}d", seconds / 86400);
}

std::size_t Model::add_host(std::string name, bool remote) {
  HostData h;
  h.name = std::move(name);
  h.remote = remote;
  hosts_.push_back(std::move(h));
  return hosts_.size() - 1;
}

void Model::update(std::size_t index, HostData data, long long now_ms) {
  if (index >= hosts_.size()) return;
  HostData& host = hosts_[index];
  data.name = host.name;
  data.remote = host.remote;
  if (!data.snapshot) {
    // A failed read keeps what was known, and says since when it fails (and where it came from).
    const bool failing = host.problem.has_value();
    host.problem = data.problem;
    if (host.problem && !failing) host.problem_since_ms = now_ms;
    host.via_agent = data.via_agent;
    host.agent_problem = data.agent_problem;
    return;
  }
  auto prefill_points = std::move(data.history_prefill);
  data.history_prefill.clear();
  // A reading of the sample already shown (an agent samples at its own interval, which a faster
  // refresh reads again) adds no point to the graphs.
  const bool same_sample = host.snapshot && host.snapshot->timestamp_unix_ms == data.snapshot->timestamp_unix_ms &&
                           data.via_agent;
  host = std::move(data);
  for (const auto& [gpu, older] : prefill_points) prefill(index, gpu, older);
  std::set<unsigned> seen;
  decltype(idle_since_ms_) idle;
  for (const auto& d : host.snapshot->devices) {
    auto& h = gpu_history_[{index, d.id.index}];
    if (d.sample.util_gpu_pct && !same_sample) h.util_pct.add(*d.sample.util_gpu_pct);
    if (d.sample.mem_used_bytes && d.id.mem_total_bytes && *d.id.mem_total_bytes > 0 && !same_sample) {
      h.mem_pct.add(100.0 * static_cast<double>(*d.sample.mem_used_bytes) / static_cast<double>(*d.id.mem_total_bytes));
    }
    if (d.sample.power_mw && !same_sample) h.power_w.add(*d.sample.power_mw / 1000.0);
    if (d.sample.temp_c && !same_sample) h.temp_c.add(*d.sample.temp_c);
    for (const auto& p : d.processes) {
      if (seen.insert(p.pid).second && !same_sample) {
        auto& ph = proc_history_[{index, p.pid}];
        if (p.sm_util_pct) ph.sm_pct.add(*p.sm_util_pct);
        if (p.used_mem_bytes) ph.mem_mib.add(static_cast<double>(*p.used_mem_bytes) / (1024.0 * 1024.0));
      }
      if (p.sm_util_pct && *p.sm_util_pct == 0) {
        const auto key = std::make_tuple(index, p.pid, p.host.start_time_unix.value_or(0));
        const auto was = idle_since_ms_.find(key);
        idle[key] = was == idle_since_ms_.end() ? now_ms : was->second;
      }
    }
  }
  // Forget what this host no longer shows: its GPUs gone (an agent may name any index), the
  // processes that ended, the idle clocks of those that worked.
  std::set<unsigned> gpus;
  for (const auto& d : host.snapshot->devices) gpus.insert(d.id.index);
  for (auto it = gpu_history_.begin(); it != gpu_history_.end();) {
    it = (it->first.first == index && gpus.count(it->first.second) == 0) ? gpu_history_.erase(it) : std::next(it);
  }
  for (auto it = proc_history_.begin(); it != proc_history_.end();) {
    it = (it->first.first == index && seen.count(it->first.second) == 0) ? proc_history_.erase(it) : std::next(it);
  }
  for (auto it = idle_since_ms_.begin(); it != idle_since_ms_.end();) {
    it = std::get<0>(it->first) == index ? idle_since_ms_.erase(it) : std::next(it);
  }
  idle_since_ms_.merge(idle);
}

void Model::prefill(std::size_t index, unsigned gpu, const GpuHistory& older) {
  auto& h = gpu_history_[{index, gpu}];
  h.util_pct.prepend(older.util_pct);
  h.mem_pct.prepend(older.mem_pct);
  h.power_w.prepend(older.power_w);
  h.temp_c.prepend(older.temp_c);
}

const GpuHistory* Model::history(std::size_t host, unsigned gpu) const {
  const auto it = gpu_history_.find({host, gpu});
  return it == gpu_history_.end() ? nullptr : &it->second;
}

const ProcessHistory* Model::process_history(std::size_t host, unsigned pid) const {
  const auto it = proc_history_.find({host, pid});
  return it == proc_history_.end() ? nullptr : &it->second;
}

std::vector<diagnose::Verdict> Model::verdicts() const {
  std::vector<diagnose::Verdict> out;
  for (const auto& h : hosts_) {
    if (!h.snapshot || h.classes.size() != h.snapshot->devices.size()) continue;
    std::vector<diagnose::GpuLease> leases;  // per device, as verdicts() takes them
    for (const auto& d : h.snapshot->devices) {
      const auto lease = h.leases.find(d.id.index);
      leases.push_back(lease != h.leases.end() ? lease->second : diagnose::GpuLease{});
    }
    auto found = diagnose::verdicts(*h.snapshot, h.classes, {}, leases);
    for (auto& v : diagnose::lease_and_backfill_verdicts(*h.snapshot, h.mig_classes, h.mig_leases, h.backfill)) {
      found.push_back(std::move(v));
    }
    for (auto v : found) {
      if (hosts_.size() > 1) v.text = (h.name.empty() ? std::string("this host") : h.name) + ": " + v.text;
      out.push_back(std::move(v));
    }
  }
  return out;
}

std::vector<Row> Model::rows(const TableOptions& options, long long now_unix_s, long long now_ms) const {
  std::vector<Row> out;
  for (std::size_t hi = 0; hi < hosts_.size(); ++hi) {
    const HostData& h = hosts_[hi];
    if (!h.snapshot) continue;
    for (std::size_t di = 0; di < h.snapshot->devices.size(); ++di) {
      const gpu::Device& d = h.snapshot->devices[di];
      const gpu::Activity cls = di < h.classes.size() ? h.classes[di] : gpu::Activity::Idle;
      for (const auto& p : d.processes) {
        Row r;
        r.host = hi;
        r.host_name = h.name;
        r.gpu = d.id.index;
        r.pid = p.pid;
        r.start_time_unix = p.host.start_time_unix;
        r.start_ticks = p.host.start_ticks;
        r.user = p.host.user.value_or("");
        r.uid = p.host.uid;
        r.others = options.viewer_uid && (!p.host.uid || *p.host.uid != *options.viewer_uid);
        r.where = host::workload_label(p.host);
        if (const auto job = h.jobs.find(p.pid); job != h.jobs.end()) r.where += (r.where.empty() ? "" : " ") + job->second;
        r.mem_bytes = p.used_mem_bytes;
        r.sm_pct = p.sm_util_pct;
        if (const auto u = h.usage.find(p.pid); u != h.usage.end()) {
          r.cpu_pct = u->second.cpu_pct;
          r.rss_bytes = u->second.rss_bytes;
        }
        if (p.host.start_time_unix) r.age_s = std::max(0LL, now_unix_s - *p.host.start_time_unix);
        std::optional<long long> idle_for;
        const auto idle = idle_since_ms_.find(std::make_tuple(hi, p.pid, p.host.start_time_unix.value_or(0)));
        if (idle != idle_since_ms_.end()) idle_for = now_ms - idle->second;
        r.state = state_of(p, cls, h.remote, idle_for);
        if (p.mig && *p.mig < d.mig.size()) {
          // On a MIG device: MIG mode gives no utilization, so the state is its MIG device's class,
          // and without GPM "in use" (status says the same).
          r.mig = d.mig[*p.mig].index;
          const auto& slices = di < h.mig_classes.size() ? h.mig_classes[di] : std::vector<gpu::MigActivity>{};
          if (*p.mig < slices.size()) {
            r.state = slices[*p.mig].measured ? gpu::to_string(slices[*p.mig].activity) : "in use";
          }
        }
        r.name = p.host.name.value_or("");
        if (p.host.command_line && !p.host.command_line->empty()) {
          r.command = *p.host.command_line;
        } else if (p.host.unread) {
          r.command = "(" + r.name + ": command line unread)";
        } else {
          r.command = r.name.empty() ? "?" : r.name;
        }
        r.remote = h.remote;
        if (keeps(r, options)) out.push_back(std::move(r));
      }
    }
  }
  if (options.tree) return tree_rows(out, hosts_, options);
  sort_rows(out, options);
  return out;
}

bool keeps(const Row& row, const TableOptions& options) {
  if (options.only_mine && (!options.viewer_uid || !row.uid || *row.uid != *options.viewer_uid)) return false;
  if (options.gpu && !row.launcher && (row.host != options.gpu->first || row.gpu != options.gpu->second)) return false;
  if (!options.text.empty()) {
    const std::string needle = lower(options.text);
    if (!contains_any_case(row.user, needle) && !contains_any_case(row.command, needle) &&
        !contains_any_case(row.name, needle) && !contains_any_case(row.where, needle) &&
        !contains_any_case(row.host_name, needle) && std::to_string(row.pid).find(needle) == std::string::npos) {
      return false;
    }
  }
  return true;
}

void sort_rows(std::vector<Row>& rows, const TableOptions& options) {
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) { return row_less(a, b, options); });
}

bool is_launcher(const std::string& name, const std::string& command) {
  static const char* const kNames[] = {"torchrun", "accelerate", "deepspeed", "mpirun", "mpiexec", "srun", "horovodrun"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  // python -m torch.distributed.run / .launch, and the console scripts run by python.
  static const char* const kModules[] = {"torch.distributed.run", "torch.distributed.launch", "bin/torchrun",
                                         "bin/accelerate", "bin/deepspeed"};
  if (name.rfind("python", 0) == 0 || name.rfind("pt_main_thread", 0) == 0) {
    for (const char* m : kModules) {
      if (command.find(m) != std::string::npos) return true;
    }
  }
  return false;
}

std::vector<Row> tree_rows(const std::vector<Row>& rows, const std::vector<HostData>& hosts,
                           const TableOptions& options) {
  constexpr int kMaxDepth = 16;  // a launcher further up than this is not the job's
  // The launcher of each row: the nearest ancestor that launches ranks, else a parent (not init)
  // shared with another GPU process of the same host.
  std::map<std::pair<std::size_t, unsigned>, unsigned> parent_count;  // (host, parent) -> GPU processes
  std::set<std::pair<std::size_t, unsigned>> gpu_pids;
  for (const auto& r : rows) {
    gpu_pids.insert({r.host, r.pid});
    if (r.host >= hosts.size()) continue;
    const auto a = hosts[r.host].ancestors.find(r.pid);
    if (a != hosts[r.host].ancestors.end() && a->second.parent_pid > 1) ++parent_count[{r.host, a->second.parent_pid}];
  }
  // Count each process once, not once per GPU it holds.
  std::map<std::pair<std::size_t, unsigned>, unsigned> distinct;
  for (const auto& [host, pid] : gpu_pids) {
    const auto a = hosts[host].ancestors.find(pid);
    if (a != hosts[host].ancestors.end() && a->second.parent_pid > 1) ++distinct[{host, a->second.parent_pid}];
  }
  parent_count = std::move(distinct);

  auto launcher_of = [&](const Row& r) -> std::optional<unsigned> {
    if (r.host >= hosts.size()) return std::nullopt;
    const auto& anc = hosts[r.host].ancestors;
    unsigned pid = r.pid;
    for (int depth = 0; depth < kMaxDepth; ++depth) {
      const auto me = anc.find(pid);
      if (me == anc.end() || me->second.parent_pid <= 1) break;
      const auto parent = anc.find(me->second.parent_pid);
      if (parent == anc.end()) break;
      if (is_launcher(parent->second.name, parent->second.command)) return me->second.parent_pid;
      pid = me->second.parent_pid;
    }
    const auto me = anc.find(r.pid);
    if (me != anc.end() && me->second.parent_pid > 1 && anc.count(me->second.parent_pid) != 0 &&
        parent_count[{r.host, me->second.parent_pid}] > 1 && gpu_pids.count({r.host, me->second.parent_pid}) == 0) {
      return me->second.parent_pid;
    }
    return std::nullopt;
  };

  struct Unit {
    std::optional<Row> head;
    std::vector<Row> members;
  };
  std::map<std::pair<std::size_t, unsigned>, Unit> groups;
  std::vector<Unit> units;
  for (const auto& r : rows) {
    const auto l = launcher_of(r);
    if (!l) {
      units.push_back(Unit{std::nullopt, {r}});
      continue;
    }
    Unit& u = groups[{r.host, *l}];
    if (!u.head) {
      const Ancestor& a = hosts[r.host].ancestors.at(*l);
      Row head;
      head.host = r.host;
      head.host_name = r.host_name;
      head.pid = *l;
      head.start_time_unix = a.start_time_unix;
      head.start_ticks = a.start_ticks;
      head.user = a.user.value_or("");
      head.uid = a.uid;
      head.others = options.viewer_uid && (!a.uid || *a.uid != *options.viewer_uid);
      // now = a rank's start + its age: the launcher's age from the same clock.
      if (a.start_time_unix && r.age_s && r.start_time_unix) {
        head.age_s = std::max(0LL, *r.age_s + *r.start_time_unix - *a.start_time_unix);
      }
      head.name = a.name;
      head.command = a.command.empty() ? a.name : a.command;
      head.launcher = true;
      head.state = "launcher";
      head.remote = r.remote;
      u.head = std::move(head);
    }
    Row member = r;
    member.depth = 1;
    u.members.push_back(std::move(member));
  }
  for (auto& [key, u] : groups) {
    // The launcher's row carries its ranks' memory, so that sorting by memory keeps big jobs up.
    std::uint64_t mem = 0;
    std::optional<unsigned> sm;
    for (const auto& m : u.members) {
      mem += m.mem_bytes.value_or(0);
      if (m.sm_pct) sm = std::max(sm.value_or(0), *m.sm_pct);
    }
    u.head->mem_bytes = mem;
    u.head->sm_pct = sm;
    units.push_back(std::move(u));
  }
  for (auto& u : units) sort_rows(u.members, options);
  auto key_of = [](const Unit& u) -> const Row& { return u.head ? *u.head : u.members.front(); };
  std::stable_sort(units.begin(), units.end(),
                   [&](const Unit& a, const Unit& b) { return row_less(key_of(a), key_of(b), options); });
  std::vector<Row> out;
  auto add = [&](Row r) {
    const std::size_t host = r.host;
    const unsigned pid = r.pid;
    const unsigned depth = r.depth;
    const bool others = r.others;
    const bool remote = r.remote;
    const std::string host_name = r.host_name;
    out.push_back(std::move(r));
    if (host >= hosts.size()) return;
    // Its hidden holders under it.
    for (const auto& [hpid, h] : hosts[host].hidden) {
      if (h.parent_pid != pid || gpu_pids.count({host, hpid}) != 0) continue;
      Row hr;
      hr.host = host;
      hr.host_name = host_name;
      hr.pid = hpid;
      hr.start_time_unix = h.start_time_unix;
      hr.start_ticks = h.start_ticks;
      hr.user = h.user.value_or("");
      hr.uid = h.uid;
      hr.others = options.viewer_uid ? (!h.uid || *h.uid != *options.viewer_uid) : others;
      hr.name = h.name;
      hr.command = h.command.empty() ? h.name : h.command;
      hr.state = "hidden holder";
      hr.depth = depth + 1;
      hr.remote = remote;
      out.push_back(std::move(hr));
    }
  };
  for (auto& u : units) {
    if (u.head) add(std::move(*u.head));
    for (auto& m : u.members) add(std::move(m));
  }
  return out;
}

}  // namespace tarmac::tui
