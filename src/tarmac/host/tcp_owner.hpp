// Who owns the other end of a loopback TCP connection: the uid the kernel lists for the server's
// socket in /proc/net/tcp{,6}. An accepted socket carries the uid of the process that made the
// listening one, so this says who listens, checked on the very connection a request is about to
// use (docs/backfill.md "Who the server is"): a user who took a server's port while it was down
// is seen before a prompt is sent.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace tarmac::host {

// One end of a TCP connection, as libcurl reports it: "127.0.0.1" or "::1", and a port.
struct Endpoint {
  std::string ip;
  unsigned port = 0;
};

// The uid of the socket whose local end is `server` and remote end is `client`, from
// `proc_root`/net/tcp and tcp6 (an IPv4 connection to a dual-stack listener is in tcp6 as
// ::ffff:a.b.c.d); nullopt when no such connection is listed, or an address does not parse.
[[nodiscard]] std::optional<uid_t> tcp_owner(const Endpoint& server, const Endpoint& client,
                                             const std::string& proc_root = "/proc");

// The address and port as /proc/net/tcp{,6} write them ("0100007F:1F90"); nullopt for an address
// that is neither IPv4 nor IPv6. IPv4 in tcp6's form when `as_v6` is set (::ffff:a.b.c.d).
[[nodiscard]] std::optional<std::string> proc_net_address(const Endpoint& end, bool as_v6);

}  // namespace tarmac::host
