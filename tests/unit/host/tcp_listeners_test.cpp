// Which processes serve a local TCP port (src/tarmac/host/tcp_listeners.cpp): the table's parser on
// the kernel's own text, the descendants on a made-up tree, and the whole search on a real
// listener of this process and a child of it.
#include "tarmac/host/tcp_listeners.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tarmac/util/fd.hpp"

namespace tarmac::host {
namespace {

// /proc/net/tcp as Linux 6.1 writes it: a listener on 127.0.0.1:11434 (2CAA), one on *:8080
// (1F90), a connection to 11434 (state 01) and a short line.
constexpr const char* kTable =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 0100007F:2CAA 00000000:0000 0A 00000000:00000000 00:00000000 00000000   998        0 41234 1 "
    "0000000000000000 100 0 0 10 0\n"
    "   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 "
    "0000000000000000 100 0 0 10 0\n"
    "   2: 0100007F:C350 0100007F:2CAA 01 00000000:00000000 00:00000000 00000000  1000        0 777 1 "
    "0000000000000000 20 4 30 10 -1\n"
    "   3: 0100007F:2CAA\n";

TEST(TcpListeners, OnlyListeningLinesOfThePortAreRead) {
  EXPECT_EQ(listening_inodes(kTable, 11434, 998), (std::vector<unsigned long long>{41234}));
  EXPECT_EQ(listening_inodes(kTable, 8080, 0), (std::vector<unsigned long long>{555}));
  EXPECT_TRUE(listening_inodes(kTable, 11434, 1000).empty()) << "another user's socket on the port";
  EXPECT_TRUE(listening_inodes(kTable, 50000, 1000).empty()) << "a connection's local end does not listen";
  EXPECT_TRUE(listening_inodes("", 11434, 998).empty());
  EXPECT_TRUE(listening_inodes("header\n   0: 0100007F:ZZZZ 00000000:0000 0A a b c 0 0 9\n", 0, 0).empty());
}

TEST(TcpListeners, DescendantsAreFoundThroughAnyDepthAndNothingElse) {
  // 10 -> 11 -> 12 -> 13; 20 -> 21; 1 is init.
  const std::map<unsigned, unsigned> parent_of = {{1, 0}, {10, 1}, {11, 10}, {12, 11}, {13, 12}, {20, 1}, {21, 20}};
  EXPECT_EQ(with_descendants({11}, parent_of), (std::set<unsigned>{11, 12, 13}));
  EXPECT_EQ(with_descendants({11, 20}, parent_of), (std::set<unsigned>{11, 12, 13, 20, 21}));
  EXPECT_EQ(with_descendants({99}, parent_of), (std::set<unsigned>{99})) << "a root gone from the table";
  EXPECT_EQ(with_descendants({5}, {{5, 6}, {6, 5}, {7, 6}}), (std::set<unsigned>{5, 6, 7})) << "a cycle ends";
}

TEST(TcpListeners, ThisProcessListeningAndItsChildAreFoundAndNothingForAClosedPort) {
  util::Fd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));  // dual-stack: listed in tcp6
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd.get(), 4), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  const unsigned port = ntohs(a.sin6_port);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();  // a runner: it holds no socket, it descends from the listener
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fd.get());
    ::close(ready[0]);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  const auto found = processes_serving(port, ::geteuid());
  const auto not_theirs = processes_serving(port, ::geteuid() + 1);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(found.contains(static_cast<unsigned>(::getpid())));
  EXPECT_TRUE(found.contains(static_cast<unsigned>(child)));
  EXPECT_FALSE(found.contains(1u));
  EXPECT_TRUE(not_theirs.empty()) << "the socket and the processes are another account's";
  fd.reset();
  EXPECT_TRUE(processes_serving(port, ::geteuid()).empty()) << "nobody listens there any more";
}

// Another user listens on the same port of another address ([::1] beside 127.0.0.1: no conflict),
// in a child of the server's own process: it counts neither as a listener of the server's account
// nor as a descendant of its listener (issue 16's review X, H1).
TEST(TcpListeners, AnotherUsersListenerOnThePortIsNotTheServers) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to make a listener as another user";
  util::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd.get(), 4), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  const unsigned port = ntohs(a.sin_port);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fd.get());
    if (::setgid(1001) != 0 || ::setuid(1001) != 0) ::_exit(1);
    const int v6 = ::socket(AF_INET6, SOCK_STREAM, 0);
    const int only = 1;
    (void)::setsockopt(v6, IPPROTO_IPV6, IPV6_V6ONLY, &only, sizeof only);
    sockaddr_in6 b{};
    b.sin6_family = AF_INET6;
    b.sin6_addr = in6addr_loopback;
    b.sin6_port = htons(static_cast<uint16_t>(port));
    const char ok = ::bind(v6, reinterpret_cast<sockaddr*>(&b), sizeof b) == 0 && ::listen(v6, 4) == 0 ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ::close(ready[0]);
  const auto root = processes_serving(port, 0);
  const auto theirs = processes_serving(port, 1001);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_EQ(ok, 'y') << "the other user could not listen on [::1]:" << port;
  EXPECT_TRUE(root.contains(static_cast<unsigned>(::getpid())));
  EXPECT_FALSE(root.contains(static_cast<unsigned>(child))) << "another user's listener counted as root's server";
  EXPECT_EQ(theirs, (std::set<unsigned>{static_cast<unsigned>(child)}));
}

}  // namespace
}  // namespace tarmac::host
