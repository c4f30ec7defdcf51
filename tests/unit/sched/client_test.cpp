// The agent's hold on one socket client (sched/client.hpp): output that a peer does not read is
// bounded, descriptors a peer sent are closed on every path, the idle clock, and who is admitted.
#include "tarmac/sched/client.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <gtest/gtest.h>
#include <limits>
#include <string>

#include "open_fds.hpp"

namespace tarmac::sched {
namespace {

using testing::open_fds;

// A connected pair: the agent's end (non-blocking, as accept gives it) and the peer's.
struct Pair {
  Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ::fcntl(sv[0], F_SETFL, O_NONBLOCK);
    agent = Connection(util::Fd(sv[0]));
    peer = util::Fd(sv[1]);
  }
  Connection agent;
  util::Fd peer;
};

void send_with_fds(int sock, const std::string& data, const std::vector<int>& fds) {
  iovec iov{.iov_base = const_cast<char*>(data.data()), .iov_len = data.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ASSERT_EQ(::sendmsg(sock, &msg, 0), static_cast<ssize_t>(data.size()));
}

TEST(Client, OutputAPeerDoesNotReadIsBoundedAndThePeerDropped) {
  Pair p;
  Client c(std::move(p.agent), Peer{.uid = 1000}, 0);
  const std::string line(4000, 'x');
  int pushes = 0;
  while (!c.finished() && pushes < 100000) {
    c.push(line, 64 * 1024, 0);  // never blocks, whatever the peer does
    ++pushes;
  }
  EXPECT_TRUE(c.finished()) << "dropped once its unread output passed the bound";
  EXPECT_LE(c.conn().pending_output(), 64u * 1024);
  EXPECT_LT(pushes, 1000) << "the kernel's buffer and the bound fill within a few hundred lines";
}

TEST(Client, OneAnswerLargerThanTheBoundIsStillSentToAPeerThatReads) {
  Pair p;
  Client c(std::move(p.agent), Peer{.uid = 1000}, 0);
  const std::string big(2 << 20, 'y');
  c.push(big, 64 * 1024, 0);
  EXPECT_FALSE(c.finished());
  EXPECT_FALSE(c.reading()) << "no request is read while an answer waits";
  std::string got;
  char buf[65536];
  while (got.size() < big.size() + 1) {
    const ssize_t n = ::read(p.peer.get(), buf, sizeof buf);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<std::size_t>(n));
    c.flush(1);
  }
  EXPECT_EQ(got, big + "\n");
  EXPECT_FALSE(c.has_output());
  EXPECT_TRUE(c.reading());
}

TEST(Client, AWriteToAPeerThatHungUpDropsIt) {
  Pair p;
  Client c(std::move(p.agent), Peer{.uid = 1000}, 0);
  p.peer.reset();
  c.push("{}", 1024, 0);
  EXPECT_TRUE(c.finished());
}

TEST(Client, IdleClock) {
  Pair p;
  Client c(std::move(p.agent), Peer{.uid = 1000}, 1000);
  EXPECT_EQ(c.deadline_ms(500), 1500) << "a request is due within the idle timeout of the connection";
  c.requested(2000);
  EXPECT_EQ(c.deadline_ms(500), 2500);
  c.watching = 7;
  EXPECT_EQ(c.deadline_ms(500), std::numeric_limits<long long>::max()) << "a follower waits for its job";
  // Output it does not read: the clock runs from when it became pending, following or not.
  const std::string line(1 << 16, 'z');
  for (int i = 0; i < 64 && !c.has_output(); ++i) c.push(line, 8 << 20, 3000);
  ASSERT_TRUE(c.has_output());
  EXPECT_EQ(c.deadline_ms(500), 3500);
}

TEST(Connection, DescriptorsOfAPeerThatHangsUpOrSendsTooMuchAreClosed) {
  const int before = open_fds();
  for (const char* how : {"hangup", "long", "many"}) {
    SCOPED_TRACE(how);
    {
      Pair p;
      std::vector<util::Fd> fds;
      const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      send_with_fds(p.peer.get(), "{\"op\":", {null, null});
      ASSERT_EQ(p.agent.fill(fds), Connection::Fill::Open);
      EXPECT_EQ(fds.size(), 2u);
      if (std::string(how) == "hangup") {
        p.peer.reset();
        EXPECT_EQ(p.agent.fill(fds), Connection::Fill::Closed);
      } else if (std::string(how) == "long") {
        const std::string chunk(64 * 1024, 'x');
        Connection::Fill r = Connection::Fill::Open;
        for (int i = 0; i < 64 && r == Connection::Fill::Open; ++i) {
          (void)::send(p.peer.get(), chunk.data(), chunk.size(), MSG_DONTWAIT);
          r = p.agent.fill(fds);
        }
        EXPECT_EQ(r, Connection::Fill::LineTooLong);
      } else {
        send_with_fds(p.peer.get(), "x", {null, null, null});
        EXPECT_EQ(p.agent.fill(fds), Connection::Fill::TooManyFds);
      }
      ::close(null);
    }  // the connection and the descriptors it received go together
    EXPECT_EQ(open_fds(), before);
  }
}

TEST(Connection, FillStopsAtTheFirstLine) {
  Pair p;
  std::vector<util::Fd> fds;
  const std::string two = "{\"op\":\"jobs\"}\n{\"op\":\"jobs\"}\n";
  ASSERT_EQ(::write(p.peer.get(), two.data(), two.size()), static_cast<ssize_t>(two.size()));
  ASSERT_EQ(p.agent.fill(fds), Connection::Fill::Open);
  std::string line;
  EXPECT_TRUE(p.agent.take_line(line));
  EXPECT_EQ(line, "{\"op\":\"jobs\"}");
}

TEST(Admit, OneUserCannotTakeEveryConnectionAndRootAlwaysGetsIn) {
  const ClientLimits l{.idle_timeout_ms = 1000, .user_connection_cap = 4, .max_clients = 100, .root_reserve = 10};
  EXPECT_EQ(admit(1000, 3, 50, l), Admission::Admit);
  EXPECT_EQ(admit(1000, 4, 50, l), Admission::UserCap);
  EXPECT_EQ(admit(0, 4000, 50, l), Admission::Admit) << "root has no per-user cap";
  EXPECT_EQ(admit(1001, 0, 90, l), Admission::Full) << "the last connections are root's";
  EXPECT_EQ(admit(0, 0, 99, l), Admission::Admit);
  EXPECT_EQ(admit(0, 0, 100, l), Admission::Full);
  const ClientLimits uncapped{.idle_timeout_ms = 1000, .user_connection_cap = 0, .max_clients = 100, .root_reserve = 10};
  EXPECT_EQ(admit(1000, 80, 80, uncapped), Admission::Admit);
}

}  // namespace
}  // namespace tarmac::sched
