// The owner of a loopback connection's other end (tcp_owner.hpp).
#include "tarmac/host/tcp_owner.hpp"

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

namespace tarmac::host {

namespace {

// The kernel prints each 32-bit word of an address as the number its bytes make in this machine's
// order ("%08X" of the raw word): 127.0.0.1 is 0100007F on x86.
std::string words_hex(const unsigned char* bytes, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; i += 4) {
    std::uint32_t word = 0;
    std::memcpy(&word, bytes + i, 4);
    out += fmt::format("{:08X}", word);
  }
  return out;
}

// The uid column of the line of `table` whose local and remote addresses are the ones given.
std::optional<uid_t> find_owner(const std::string& table, const std::string& local, const std::string& remote) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local_field, remote_field, state, queues, timer, retransmits;
    long long uid = -1;
    if (!(fields >> slot >> local_field >> remote_field >> state >> queues >> timer >> retransmits >> uid)) continue;
    // A TIME_WAIT entry (06) is the kernel's, listed as uid 0, not its process's.
    if (local_field == local && remote_field == remote && state != "06" && uid >= 0) return static_cast<uid_t>(uid);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> proc_net_address(const Endpoint& end, bool as_v6) {
  if (end.port == 0 || end.port > 65535) return std::nullopt;
  std::array<unsigned char, 16> bytes{};
  std::string hex;
  if (::inet_pton(AF_INET, end.ip.c_str(), bytes.data()) == 1) {
    if (as_v6) {
      std::array<unsigned char, 16> mapped{};
      mapped[10] = 0xff;
      mapped[11] = 0xff;
      std::memcpy(mapped.data() + 12, bytes.data(), 4);
      hex = words_hex(mapped.data(), 16);
    } else {
      hex = words_hex(bytes.data(), 4);
    }
  } else if (as_v6 && ::inet_pton(AF_INET6, end.ip.c_str(), bytes.data()) == 1) {
    hex = words_hex(bytes.data(), 16);
  } else {
    return std::nullopt;
  }
  return fmt::format("{}:{:04X}", hex, end.port);
}

std::optional<uid_t> tcp_owner(const Endpoint& server, const Endpoint& client, const std::string& proc_root) {
  for (const bool v6 : {false, true}) {
    const auto local = proc_net_address(server, v6);
    const auto remote = proc_net_address(client, v6);
    if (!local || !remote) continue;
    if (auto uid = find_owner(proc_root + (v6 ? "/net/tcp6" : "/net/tcp"), *local, *remote)) return uid;
  }
  return std::nullopt;
}

}  // namespace tarmac::host
