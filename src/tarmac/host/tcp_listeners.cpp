// The processes that serve a local TCP port (tcp_listeners.hpp).
#include "tarmac/host/tcp_listeners.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <memory>
#include <sstream>

#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/fs.hpp"

namespace tarmac::host {

namespace {

// The port of a /proc/net/tcp address ("0100007F:2CAA"); 0 for one that does not parse.
unsigned port_of(std::string_view address) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos) return 0;
  const std::string_view hex = address.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), port, 16);
  return ec == std::errc() && end == hex.data() + hex.size() && port <= 65535 ? port : 0;
}

struct ProcDirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using ProcDir = std::unique_ptr<DIR, ProcDirCloser>;

// Whether process `pid` holds one of `inodes` open (its fd links read "socket:[N]").
bool holds_socket(const std::string& proc_root, unsigned pid, const std::set<std::string>& links) {
  const std::string fd_dir = proc_root + "/" + std::to_string(pid) + "/fd";
  const ProcDir dir(::opendir(fd_dir.c_str()));
  if (!dir) return false;  // ended, or not ours to read
  char target[64];
  while (const dirent* e = ::readdir(dir.get())) {
    if (e->d_name[0] == '.') continue;
    const ssize_t n = ::readlinkat(::dirfd(dir.get()), e->d_name, target, sizeof target);
    if (n > 0 && n < static_cast<ssize_t>(sizeof target) && links.contains(std::string(target, static_cast<std::size_t>(n)))) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<unsigned long long> listening_inodes(std::string_view table_text, unsigned port, uid_t uid) {
  std::vector<unsigned long long> out;
  if (port == 0 || port > 65535) return out;  // port_of's "does not parse"
  std::istringstream lines{std::string(table_text)};
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, timeout;
    long long owner = -1;
    unsigned long long inode = 0;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> owner >> timeout >> inode)) {
      continue;
    }
    if (state == "0A" && inode != 0 && port_of(local) == port && owner == static_cast<long long>(uid)) {
      out.push_back(inode);
    }
  }
  return out;
}

std::set<unsigned> with_descendants(const std::set<unsigned>& roots, const std::map<unsigned, unsigned>& parent_of) {
  std::map<unsigned, std::vector<unsigned>> children;
  for (const auto& [pid, parent] : parent_of) children[parent].push_back(pid);
  // Breadth first from the roots: each process is looked at once (a cycle, which a live /proc cannot
  // show, ends at a member).
  std::set<unsigned> out = roots;
  std::vector<unsigned> next(roots.begin(), roots.end());
  while (!next.empty()) {
    const unsigned pid = next.back();
    next.pop_back();
    const auto it = children.find(pid);
    if (it == children.end()) continue;
    for (const unsigned child : it->second) {
      if (out.insert(child).second) next.push_back(child);
    }
  }
  return out;
}

std::set<unsigned> processes_serving(unsigned port, uid_t uid, const std::string& proc_root) {
  std::set<std::string> links;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    const auto text = util::read_file(proc_root + table);
    if (!text) continue;
    for (const auto inode : listening_inodes(*text, port, uid)) links.insert("socket:[" + std::to_string(inode) + "]");
  }
  if (links.empty()) return {};
  const ProcDir dir(::opendir(proc_root.c_str()));
  if (!dir) return {};
  std::set<unsigned> listeners;
  std::map<unsigned, unsigned> parent_of;
  while (const dirent* e = ::readdir(dir.get())) {
    const auto pid = pid_of_proc_entry(e->d_name);
    if (!pid) continue;
    struct stat owner {};
    // Only `uid`'s processes: neither a listener nor a descendant of anyone else's counts (the owner
    // of /proc/PID is the process's effective uid).
    if (::fstatat(::dirfd(dir.get()), e->d_name, &owner, 0) != 0 || owner.st_uid != uid) continue;
    const auto stat = util::read_file(proc_root + "/" + e->d_name + "/stat");
    const auto fields = stat ? parse_stat(*stat) : std::nullopt;
    if (!fields) continue;  // ended meanwhile
    parent_of[*pid] = fields->ppid;
    if (holds_socket(proc_root, *pid, links)) listeners.insert(*pid);
  }
  if (listeners.empty()) return {};
  return with_descendants(listeners, parent_of);
}

}  // namespace tarmac::host
