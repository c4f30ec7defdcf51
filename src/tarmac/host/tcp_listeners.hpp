// Which processes serve a local TCP port: the listening sockets /proc/net/tcp{,6} list on it, the
// processes that hold one of them open (their /proc/PID/fd links), and those processes'
// descendants (Ollama's `serve` answers on the port, its runners, children of it, hold the GPU).
// For the agent's external backfill servers: which of NVML's processes are theirs
// (docs/backfill.md "External servers"). The stat files and fd links read here do not take a
// process's memory map lock (bounded_read.hpp): a read cannot be held up by another user.
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tarmac::host {

// The socket inodes of the lines of a /proc/net/tcp or tcp6 table (`table_text`) that listen (state
// 0A) on `port`, on any address, made by `uid` (the table's uid column: the account whose process
// made the socket, which no other user can forge). Lines that do not parse are skipped.
[[nodiscard]] std::vector<unsigned long long> listening_inodes(std::string_view table_text, unsigned port, uid_t uid);

// `roots` and every process whose parent chain (`parent_of`: pid to its parent's pid) reaches one of them.
[[nodiscard]] std::set<unsigned> with_descendants(const std::set<unsigned>& roots,
                                                  const std::map<unsigned, unsigned>& parent_of);

// The processes of account `uid` that listen on TCP `port` of this network namespace (on a socket
// `uid` made), with their descendants that are `uid`'s too, from `proc_root`; empty when none does
// (or /proc cannot be read). Another user can neither make a socket nor a process count as
// `uid`'s: a user who listens on the same port on another address, or hands such a socket to a
// process of someone else's, is not the server. Reads the fd links of `uid`'s processes only:
// milliseconds on a busy machine, never for the scheduler's thread.
[[nodiscard]] std::set<unsigned> processes_serving(unsigned port, uid_t uid, const std::string& proc_root = "/proc");

}  // namespace tarmac::host
