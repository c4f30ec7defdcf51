#include "tarmac/sched/wire.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <gtest/gtest.h>
#include <thread>

namespace tarmac::sched {
namespace {

class WireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tarmac-wire-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/run/agent.sock";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::string path_;
};

// Accepts one connection (the listener does not block); gives up after a minute, which only a
// hang reaches: the connection was made before.
Connection accept_one(Listener& l) {
  for (int i = 0; i < 6000; ++i) {
    Connection c = l.accept();
    if (c.fd() >= 0) return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Connection();
}

TEST_F(WireTest, LinesDescriptorsAndThePeersUidCross) {
  auto listener = Listener::open(path_);
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u) << "anyone may connect";

  auto client = Connection::connect(path_);
  ASSERT_TRUE(client.ok()) << client.error().message;
  Connection server = accept_one(*listener);
  ASSERT_GE(server.fd(), 0);
  auto peer = server.peer();
  ASSERT_TRUE(peer.ok()) << peer.error().message;
  EXPECT_EQ(peer->uid, ::geteuid());
  EXPECT_EQ(peer->gid, ::getegid());
  EXPECT_EQ(peer->pid, ::getpid());

  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ASSERT_TRUE(client->send_line(R"({"op":"submit"})", {pipe_fds[1]}).ok());
  ASSERT_TRUE(client->send_line(R"({"op":"jobs"})").ok());
  std::vector<util::Fd> fds;
  auto first = server.read_line(1000, &fds);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(*first, R"({"op":"submit"})");
  ASSERT_EQ(fds.size(), 1u);
  // The received descriptor is the pipe's write end: what goes in comes out of the read end.
  ASSERT_EQ(::write(fds[0].get(), "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  EXPECT_NE(::fcntl(fds[0].get(), F_GETFD) & FD_CLOEXEC, 0) << "received descriptors are close-on-exec";
  auto second = server.read_line(1000);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, R"({"op":"jobs"})");
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST_F(WireTest, ASecondListenerOnALiveSocketFailsAndAStaleOneIsReplaced) {
  {
    auto first = Listener::open(path_);
    ASSERT_TRUE(first.ok());
    auto second = Listener::open(path_);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.error().message.find("another tarmac agent"), std::string::npos) << second.error().message;
  }
  // A socket file nobody listens on (left by a killed agent).
  auto again = Listener::open(path_);
  ASSERT_TRUE(again.ok());
}

TEST_F(WireTest, NoAgentIsAClearError) {
  auto c = Connection::connect(dir_ + "/nobody.sock");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("nobody.sock"), std::string::npos) << c.error().message;
  auto bad = Listener::open(dir_ + "/not-a-socket");
  ASSERT_TRUE(bad.ok());  // created fresh
}

TEST_F(WireTest, AClosedPeerAndATimeoutAreErrors) {
  auto listener = Listener::open(path_);
  ASSERT_TRUE(listener.ok());
  auto client = Connection::connect(path_);
  ASSERT_TRUE(client.ok());
  Connection server = accept_one(*listener);
  auto nothing = client->read_line(50);
  EXPECT_FALSE(nothing.ok());
  server = Connection();  // closed
  auto closed = client->read_line(1000);
  ASSERT_FALSE(closed.ok());
  EXPECT_NE(closed.error().message.find("closed"), std::string::npos);
}

TEST(SocketPath, EnvironmentThenConfigurationThenTheDefault) {
  ::setenv("TARMAC_SOCKET", "/tmp/x.sock", 1);
  EXPECT_EQ(socket_path("/etc/y.sock"), "/tmp/x.sock");
  ::unsetenv("TARMAC_SOCKET");
  EXPECT_EQ(socket_path("/etc/y.sock"), "/etc/y.sock");
  if (::geteuid() == 0) EXPECT_EQ(socket_path(""), "/run/tarmac/agent.sock");
}

}  // namespace
}  // namespace tarmac::sched
