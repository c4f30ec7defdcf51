// Who owns the other end of a loopback connection (src/tarmac/host/tcp_owner.cpp): on real sockets
// of this kernel, a listener made by another user when the tests run as root, and a fake /proc.
#include "tarmac/host/tcp_owner.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "tarmac/util/fd.hpp"

namespace tarmac::host {
namespace {

unsigned port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  EXPECT_EQ(peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                 : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len),
            0);
  return ntohs(a.sin_port);
}

util::Fd listener() {
  util::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(fd.get(), 4), 0);
  return fd;
}

util::Fd connect_to(unsigned port) {
  util::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

TEST(TcpOwner, TheServerEndOfALoopbackConnectionIsItsListenersOwner) {
  auto server = listener();
  const unsigned port = port_of(server.get(), false);
  auto client = connect_to(port);  // in the accept queue, not accepted: listed all the same
  const Endpoint server_end{"127.0.0.1", port};
  const Endpoint client_end{"127.0.0.1", port_of(client.get(), false)};
  EXPECT_EQ(tcp_owner(server_end, client_end), ::getuid());
  EXPECT_EQ(tcp_owner(client_end, server_end), ::getuid()) << "the client's end, for completeness";
  EXPECT_EQ(tcp_owner(server_end, Endpoint{"127.0.0.1", 1}), std::nullopt) << "no such connection";
  EXPECT_EQ(tcp_owner(Endpoint{"not an address", port}, client_end), std::nullopt);
}

TEST(TcpOwner, AListenerMadeByAnotherUserIsThatUsers) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to make a listener as another user";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(1001) != 0 || ::setuid(1001) != 0) ::_exit(1);
    auto fd = listener();
    const unsigned p = port_of(fd.get(), false);
    if (::write(ready[1], &p, sizeof p) != sizeof p) ::_exit(1);
    ::pause();  // listening until the parent kills it
    ::_exit(0);
  }
  ::close(ready[1]);
  unsigned port = 0;
  ASSERT_EQ(::read(ready[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  auto client = connect_to(port);
  EXPECT_EQ(tcp_owner(Endpoint{"127.0.0.1", port}, Endpoint{"127.0.0.1", port_of(client.get(), false)}), 1001U);
  ::close(ready[0]);
  ::kill(child, SIGKILL);  // NOLINT: the child only listens
  ::waitpid(child, nullptr, 0);
}

TEST(TcpOwner, ReadsTcp6AndAnIpv4ConnectionToADualStackListener) {
  char tmpl[] = "/tmp/tarmac-tcp-owner-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  std::filesystem::create_directories(root + "/net");
  const std::string header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
  std::ofstream(root + "/net/tcp") << header;
  const auto mapped_server = proc_net_address({"127.0.0.1", 8080}, true);
  const auto mapped_client = proc_net_address({"127.0.0.1", 40000}, true);
  const auto v6_server = proc_net_address({"::1", 11434}, true);
  const auto v6_client = proc_net_address({"::1", 50000}, true);
  ASSERT_TRUE(mapped_server && mapped_client && v6_server && v6_client);
  EXPECT_EQ(*mapped_server, "0000000000000000FFFF00000100007F:1F90");
  std::ofstream(root + "/net/tcp6") << header << "   0: " << *mapped_server << " " << *mapped_client
                                    << " 01 00000000:00000000 00:00000000 00000000   998        0 1 1 0\n"
                                    << "   1: " << *v6_server << " " << *v6_client
                                    << " 01 00000000:00000000 00:00000000 00000000   997        0 2 1 0\n"
                                    << "   2: garbage\n";
  EXPECT_EQ(tcp_owner({"127.0.0.1", 8080}, {"127.0.0.1", 40000}, root), 998U);
  EXPECT_EQ(tcp_owner({"::1", 11434}, {"::1", 50000}, root), 997U);
  EXPECT_EQ(tcp_owner({"::1", 11434}, {"::1", 50001}, root), std::nullopt);
  EXPECT_EQ(proc_net_address({"127.0.0.1", 8080}, false), "0100007F:1F90");
  EXPECT_EQ(proc_net_address({"127.0.0.1", 0}, false), std::nullopt);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tarmac::host
