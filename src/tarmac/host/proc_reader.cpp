#include "tarmac/host/proc_reader.hpp"

#include <fmt/format.h>
#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "tarmac/host/cgroup.hpp"
#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::host {
namespace {

// The user name of `uid`, or the number as text: a uid with no passwd entry (a container's user,
// an LDAP outage) is still worth showing.
std::string look_up_user_name(unsigned uid) {
  long hint = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::string buffer(hint > 0 ? static_cast<std::size_t>(hint) : 4096, '\0');
  for (;;) {
    passwd entry{};
    passwd* found = nullptr;
    const int rc = getpwuid_r(static_cast<uid_t>(uid), &entry, buffer.data(), buffer.size(), &found);
    if (rc == ERANGE && buffer.size() < (1U << 20)) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (rc == 0 && found != nullptr && found->pw_name != nullptr) return found->pw_name;
    return std::to_string(uid);
  }
}

}  // namespace

// The same, remembered for a minute: a passwd lookup opens and parses /etc/passwd (and may ask
// nscd or LDAP first), once per user instead of once per process. Under the simulator, whose
// processes are all root's (the first passwd line), it measured no difference; a host of many
// users with a slow directory service is where it counts. A renamed user shows its new name
// within the minute, and an LDAP outage's numeric fallback lasts a minute too.
std::string user_name(unsigned uid) {
  struct Entry {
    std::string name;
    std::chrono::steady_clock::time_point at;
  };
  static std::mutex mutex;
  static std::unordered_map<unsigned, Entry> cache;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(uid); it != cache.end() && now - it->second.at < std::chrono::minutes(1)) return it->second.name;
  }
  std::string name = look_up_user_name(uid);
  std::lock_guard lock(mutex);
  if (cache.size() > 4096) cache.clear();  // bounded, whatever uids a host shows
  cache[uid] = Entry{name, now};
  return name;
}

namespace {

// pid -> ppid for every process under `root`, from one scan so that descendants() sees one moment.
// Raw readdir and openat on the root's descriptor: this reads every process's stat each pass.
std::vector<std::pair<unsigned, unsigned>> scan_parents(const std::string& root) {
  std::vector<std::pair<unsigned, unsigned>> out;
  const util::Fd dir_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) return out;
  const std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(::dup(dir_fd.get())), &::closedir);
  if (!dir) return out;
  std::string stat_path;
  while (const dirent* entry = ::readdir(dir.get())) {
    const auto pid = pid_of_proc_entry(entry->d_name);
    if (!pid) continue;
    stat_path.assign(entry->d_name).append("/stat");
    // A process may exit between listing and reading: skip it.
    const auto text = util::read_file_at(dir_fd.get(), stat_path.c_str());
    if (!text) continue;
    if (const auto stat = parse_stat(*text)) out.emplace_back(*pid, stat->ppid);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

ProcReader::ProcReader(std::string proc_root, std::string test_device_path)
    : ProcReader(std::move(proc_root), std::move(test_device_path), BoundedReader::shared()) {}

ProcReader::ProcReader(std::string proc_root, std::string test_device_path, BoundedReader& memory_reads)
    : root_(std::move(proc_root)), test_device_path_(std::move(test_device_path)), memory_reads_(&memory_reads) {
  if (const auto text = util::read_file(root_ + "/stat")) boot_time_unix_ = parse_boot_time(*text);
  clock_ticks_per_s_ = sysconf(_SC_CLK_TCK);
  if (const auto text = util::read_file(root_ + "/sys/kernel/random/boot_id")) {
    boot_id_ = std::string(util::trim(*text));
  }
}

std::string ProcReader::pid_path(unsigned pid, const char* file) const {
  return root_ + "/" + std::to_string(pid) + "/" + file;
}

void ProcReader::note_unread(const BoundedRead& got, const std::string& path, std::optional<std::string>& unread) const {
  if (got.outcome == ReadOutcome::Late) {
    unread = fmt::format("reading {} did not finish within {} ms (a thread of the process may hold its memory map locked)",
                         path, memory_reads_->limits().deadline_ms);
  } else if (got.outcome == ReadOutcome::Refused) {
    unread = fmt::format("{} was not read: {} reads of processes' memory are stuck already", path,
                         memory_reads_->stuck());
  }
}

BoundedRead ProcReader::read_memory_file(unsigned pid, const char* file, std::optional<std::string>& unread) const {
  const std::string path = pid_path(pid, file);
  auto got = memory_reads_->read(path);
  note_unread(got, path, unread);
  return got;
}

std::optional<long long> ProcReader::unix_start(unsigned long long starttime_ticks) const {
  if (!boot_time_unix_ || clock_ticks_per_s_ <= 0) return std::nullopt;
  return *boot_time_unix_ + static_cast<long long>(starttime_ticks / static_cast<unsigned long long>(clock_ticks_per_s_));
}

ProcessInfo ProcReader::read_plain(unsigned pid, const std::optional<std::string>& stat_text) const {
  ProcessInfo info;
  info.pid = pid;
  std::error_code ec;
  // A stat the caller read proves the directory (one path lookup fewer per process).
  if (!stat_text && !std::filesystem::is_directory(root_ + "/" + std::to_string(pid), ec)) {
    info.visibility = PidVisibility::NotInNamespace;
    return info;
  }
  info.visibility = PidVisibility::Visible;

  if (const auto text = stat_text ? stat_text : util::read_file(pid_path(pid, "stat"))) {
    if (const auto stat = parse_stat(*text)) {
      info.name = stat->comm;
      info.state = stat->state;
      info.parent_pid = stat->ppid;
      info.start_time_unix = unix_start(stat->starttime_ticks);
    }
  }
  if (const auto text = util::read_file(pid_path(pid, "status"))) {
    info.uid = parse_status_uid(*text);
    if (info.uid) info.user = user_name(*info.uid);
  }
  if (const auto text = util::read_file(pid_path(pid, "cgroup"))) {
    info.container = parse_cgroup(*text);
    info.slurm_job_id = parse_slurm_job_from_cgroup(*text);
  }
  return info;
}

ProcessInfo ProcReader::read(unsigned pid) const { return std::move(read_many({pid}).front()); }

std::vector<ProcessInfo> ProcReader::read_many(const std::vector<unsigned>& pids,
                                               const std::vector<std::optional<std::string>>& stat_texts) const {
  std::vector<ProcessInfo> out;
  out.reserve(pids.size());
  for (std::size_t k = 0; k < pids.size(); ++k) {
    out.push_back(read_plain(pids[k], k < stat_texts.size() ? stat_texts[k] : std::nullopt));
  }
  // The files that take the memory map lock, each kind in one hand-over: the command lines...
  std::vector<std::size_t> which;
  std::vector<std::string> paths;
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (out[k].visibility != PidVisibility::Visible) continue;
    which.push_back(k);
    paths.push_back(pid_path(out[k].pid, "cmdline"));
  }
  auto got = memory_reads_->read_many(paths);
  for (std::size_t n = 0; n < which.size(); ++n) {
    ProcessInfo& info = out[which[n]];
    note_unread(got[n], paths[n], info.unread);
    if (got[n].text) info.command_line = join_cmdline(*got[n].text);
  }
  // ...then the environments. The cgroup is authoritative (the job that confines the process
  // now); environ is only the environment at exec, readable by the owner or root, so it is the
  // fallback. Not read after a command line that could not be: it takes the same lock (and
  // would hold another helper).
  which.clear();
  paths.clear();
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (out[k].visibility != PidVisibility::Visible || out[k].slurm_job_id || out[k].unread) continue;
    which.push_back(k);
    paths.push_back(pid_path(out[k].pid, "environ"));
  }
  got = memory_reads_->read_many(paths);
  for (std::size_t n = 0; n < which.size(); ++n) {
    ProcessInfo& info = out[which[n]];
    note_unread(got[n], paths[n], info.unread);
    if (!got[n].text) continue;
    info.slurm_job_id = find_environ_value(*got[n].text, "SLURM_JOB_ID");
    // SLURM_JOBID is the older spelling, which some wrappers still set alone.
    if (!info.slurm_job_id) info.slurm_job_id = find_environ_value(*got[n].text, "SLURM_JOBID");
  }
  return out;
}

std::vector<unsigned> ParentIndex::children(unsigned pid) const {
  const auto found = kids_.find(pid);
  return found == kids_.end() ? std::vector<unsigned>{} : found->second;
}

std::vector<unsigned> ParentIndex::descendants(unsigned pid) const {
  std::vector<unsigned> out;
  std::set<unsigned> seen{pid};  // guards against a cycle in a corrupt or racing tree
  std::deque<unsigned> queue{pid};
  while (!queue.empty()) {
    const unsigned current = queue.front();
    queue.pop_front();
    const auto found = kids_.find(current);
    if (found == kids_.end()) continue;
    for (const unsigned child : found->second) {
      if (!seen.insert(child).second) continue;
      out.push_back(child);
      queue.push_back(child);
    }
  }
  return out;
}

ParentIndex ProcReader::parent_index() const {
  ParentIndex index;
  for (const auto& [child, parent] : scan_parents(root_)) {
    if (child != parent) index.kids_[parent].push_back(child);  // already ascending: the scan is sorted
  }
  return index;
}

std::vector<unsigned> ProcReader::children(unsigned pid) const { return parent_index().children(pid); }

std::vector<unsigned> ProcReader::descendants(unsigned pid) const { return parent_index().descendants(pid); }

std::optional<ProcessIdentity> ProcReader::identity(unsigned pid) const {
  auto now = stat(pid);
  if (!now) return std::nullopt;
  return std::move(now->identity);
}

std::optional<ProcessStat> ProcReader::stat(unsigned pid) const {
  const auto text = util::read_file(pid_path(pid, "stat"));
  if (!text) return std::nullopt;
  auto fields = parse_stat(*text);
  if (!fields) return std::nullopt;
  return ProcessStat{ProcessIdentity{pid, fields->starttime_ticks, boot_id_}, unix_start(fields->starttime_ticks),
                     std::move(fields->comm), fields->state, fields->ppid, tty_name(fields->tty_nr)};
}

std::optional<unsigned> ProcReader::owner_uid(unsigned pid) const {
  const auto text = util::read_file(pid_path(pid, "status"));
  return text ? parse_status_uid(*text) : std::nullopt;
}

std::optional<std::vector<std::string>> ProcReader::live_thread_dirs(unsigned pid, unsigned at_most) const {
  std::error_code ec;
  std::filesystem::directory_iterator it(root_ + "/" + std::to_string(pid) + "/task", ec);
  if (ec) return std::nullopt;
  std::vector<std::string> out;
  unsigned read = 0;
  for (const auto& entry : it) {
    if (out.size() >= at_most || ++read > kMaxThreadsRead) break;
    const auto text = util::read_file(entry.path().string() + "/stat");
    const auto stat = text ? parse_stat(*text) : std::nullopt;
    if (stat && stat->state != 'Z' && stat->state != 'X') out.push_back(entry.path().string());
  }
  return out;
}

std::optional<unsigned> ProcReader::live_threads(unsigned pid) const {
  const auto dirs = live_thread_dirs(pid, kMaxThreadsRead);
  if (!dirs) return std::nullopt;
  return static_cast<unsigned>(dirs->size());
}

Holding ProcReader::holds_device(unsigned pid, DeviceNumber device) const {
  const Holding own = host::holds_device(root_, pid, device, {}, test_device_path_);
  if (own == Holding::Holds || read(pid).state != 'Z') return own;
  // The threads of a process share one descriptor table: the first live one's is the process's.
  const auto first = live_thread_dirs(pid, 1);
  if (!first || first->empty()) return own;
  return host::holds_device_in(first->front() + "/fd", device, {}, test_device_path_);
}

Result<std::optional<std::string>> ProcReader::environ_value(unsigned pid, std::string_view key) const {
  std::optional<std::string> unread;
  const auto environ = read_memory_file(pid, "environ", unread);
  if (unread) return make_error(Error::Code::Io, *unread);
  if (!environ.text) return std::optional<std::string>{};
  return find_environ_value(*environ.text, key);
}

std::optional<std::string> ProcReader::tty(unsigned pid) const {
  auto now = stat(pid);
  if (!now) return std::nullopt;
  return std::move(now->tty);
}

std::optional<std::string> ProcReader::cgroup_text(unsigned pid) const {
  return util::read_file(pid_path(pid, "cgroup"));
}

std::optional<bool> ProcReader::in_host_pid_namespace() const {
  const auto text = util::read_file(root_ + "/self/status");
  if (!text) return std::nullopt;
  const auto depth = parse_nspid_depth(*text);
  if (!depth) return std::nullopt;
  return *depth == 1;
}

}  // namespace tarmac::host
