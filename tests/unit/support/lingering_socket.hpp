// A TCP connection on loopback whose sending end, once closed, makes close() wait: SO_LINGER is
// set and its queue holds data its peer has not read. What a hostile user can hand the agent as a
// descriptor (util/closer.hpp). The close ends once the peer reads (drain()).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <thread>

#include "tarmac/util/fd.hpp"

namespace tarmac::testing {

struct LingeringSocket {
  util::Fd sender;  // hand this over, then close it: the close waits up to `linger_s`
  util::Fd peer;    // never read until drain()

  static LingeringSocket make(int linger_s = 30) {
    LingeringSocket out;
    util::Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int small = 16384;  // both ends' buffers: little is queued, and read back soon
    ::setsockopt(listener.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    socklen_t len = sizeof addr;
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0 || ::listen(listener.get(), 1) != 0) {
      return out;
    }
    out.sender = util::Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ::setsockopt(out.sender.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    if (::connect(out.sender.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return LingeringSocket{};
    out.peer = util::Fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ::fcntl(out.sender.get(), F_SETFL, O_NONBLOCK);
    const std::string chunk(65536, 'x');
    while (::send(out.sender.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
    }
    ::fcntl(out.sender.get(), F_SETFL, 0);
    const linger wait{.l_onoff = 1, .l_linger = linger_s};
    ::setsockopt(out.sender.get(), SOL_SOCKET, SO_LINGER, &wait, sizeof wait);
    return out;
  }

  // Reads what was queued until the sender's end is closed; false when it is not within ~15 s.
  bool drain() {
    std::string got(1 << 20, '\0');
    for (int i = 0; i < 3000; ++i) {
      const ssize_t n = ::recv(peer.get(), got.data(), got.size(), MSG_DONTWAIT);
      if (n == 0) return true;
      if (n < 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
};

}  // namespace tarmac::testing
