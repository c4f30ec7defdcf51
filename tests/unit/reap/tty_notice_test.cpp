#include "tarmac/reap/tty_notice.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace tarmac::reap {
namespace {

// The kernel's new_encode_dev: how /proc/PID/stat writes a terminal's number.
long long encode_tty(dev_t dev) {
  const long long maj = major(dev);
  const long long min = minor(dev);
  return (min & 0xff) | (maj << 8) | ((min & ~0xffLL) << 12);
}

// A pty of this test's own, and a fake /proc whose pid 4242 has it for its controlling terminal.
class TtyNoticeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (openpty(&master_, &slave_, nullptr, nullptr, nullptr) != 0) GTEST_SKIP() << "no pty here";
    struct stat st {};
    ASSERT_EQ(fstat(slave_, &st), 0);
    tty_nr_ = encode_tty(st.st_rdev);
    root_ = std::filesystem::temp_directory_path() / ("tarmac-tty-" + std::to_string(getpid()));
    std::filesystem::create_directories(root_ / "4242");
    write_stat(tty_nr_, kStart);
    // The holder and the agent (this test) share a mount namespace: this test's own.
    std::filesystem::create_directory_symlink("/proc/self", root_ / "self");
    std::filesystem::create_directory_symlink("/proc/self/ns", root_ / "4242" / "ns");
  }
  void TearDown() override {
    if (master_ >= 0) close(master_);
    if (slave_ >= 0) close(slave_);
    std::filesystem::remove_all(root_);
  }
  void write_stat(long long tty_nr, unsigned long long start) {
    std::ofstream(root_ / "4242" / "stat") << "4242 (py) th) S 1 4242 4242 " << tty_nr
                                          << " -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 " << start << " 0 0\n";
  }
  // What reached the terminal, without waiting when nothing did.
  std::string read_terminal() {
    std::string out;
    pollfd p{master_, POLLIN, 0};
    char buf[4096];
    while (poll(&p, 1, 100) > 0) {
      const ssize_t n = read(master_, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }
  static constexpr unsigned long long kStart = 777;
  int master_ = -1;
  int slave_ = -1;
  long long tty_nr_ = 0;
  std::filesystem::path root_;
};

TEST_F(TtyNoticeTest, TheHoldersOwnTerminalGetsOneEscapedLine) {
  const host::ProcReader proc(root_.string());
  const auto sent = notify_terminal(proc, {4242, kStart, ""}, getuid(), "pid 4242 holds 38 GiB\x1b[2J\nrm -rf");
  ASSERT_EQ(sent.outcome, TtyOutcome::Written) << sent.why;
  const auto text = read_terminal();
  EXPECT_NE(text.find("tarmac: pid 4242 holds 38 GiB\\x1b[2J\\x0arm -rf"), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << "an escape sequence reached the terminal";
}

TEST_F(TtyNoticeTest, ATerminalOwnedBySomeoneElseIsSkipped) {
  const host::ProcReader proc(root_.string());
  const auto sent = notify_terminal(proc, {4242, kStart, ""}, getuid() + 1, "hello");
  EXPECT_EQ(sent.outcome, TtyOutcome::Skipped) << sent.why;
  EXPECT_EQ(read_terminal(), "");
}

TEST_F(TtyNoticeTest, ADeviceThatIsNotTheNamedTerminalIsRefused) {
  EXPECT_FALSE(terminal_mismatch(slave_, tty_nr_, getuid()).has_value());
  EXPECT_TRUE(terminal_mismatch(slave_, tty_nr_ + 1, getuid()).has_value()) << "another rdev was accepted";
  const auto file = root_ / "plain";
  std::ofstream(file) << "x";
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(terminal_mismatch(fd, tty_nr_, getuid()).value_or(""), "not a character device");
  close(fd);
}

// L2 of reap's third review: a container's own devpts numbers its terminals as the host's does, so
// the number of a holder in another mount namespace may name someone else's terminal here. The
// old code wrote to it.
TEST_F(TtyNoticeTest, AHolderInAnotherMountNamespaceIsSkipped) {
  const host::ProcReader proc(root_.string());
  std::filesystem::remove(root_ / "4242" / "ns");
  std::filesystem::create_directories(root_ / "4242" / "ns");
  std::ofstream(root_ / "4242" / "ns" / "mnt") << "";  // another inode than this test's namespace
  auto sent = notify_terminal(proc, {4242, kStart, ""}, getuid(), "hello");
  EXPECT_EQ(sent.outcome, TtyOutcome::Skipped) << sent.why;
  EXPECT_NE(sent.why.find("another mount namespace"), std::string::npos) << sent.why;
  std::filesystem::remove_all(root_ / "4242" / "ns");  // unreadable: not known to be the same
  sent = notify_terminal(proc, {4242, kStart, ""}, getuid(), "hello");
  EXPECT_EQ(sent.outcome, TtyOutcome::Skipped) << sent.why;
  EXPECT_EQ(read_terminal(), "");
}

// The review's nit: the escaped line keeps valid UTF-8, so a cut at 512 bytes could leave half a
// character (the old code sent 511 'a' and a lone 0xC3). The cut falls before the character.
TEST_F(TtyNoticeTest, TheCutAtTheBoundNeverSplitsACharacter) {
  const host::ProcReader proc(root_.string());
  const std::string line = std::string(511, 'a') + "\xC3\xA9 and more";
  ASSERT_EQ(notify_terminal(proc, {4242, kStart, ""}, getuid(), line).outcome, TtyOutcome::Written);
  const auto text = read_terminal();
  EXPECT_NE(text.find(std::string(511, 'a') + "\r"), std::string::npos) << text;
  EXPECT_EQ(text.find('\xC3'), std::string::npos) << "half a character reached the terminal";
}

TEST_F(TtyNoticeTest, NoTerminalOrAnotherProcessBehindThePidWritesNothing) {
  const host::ProcReader proc(root_.string());
  EXPECT_EQ(notify_terminal(proc, {4242, kStart + 1, ""}, getuid(), "x").outcome, TtyOutcome::NoTerminal)
      << "a reused pid's terminal was written";
  write_stat(0, kStart);
  EXPECT_EQ(notify_terminal(proc, {4242, kStart, ""}, getuid(), "x").outcome, TtyOutcome::NoTerminal);
  EXPECT_EQ(notify_terminal(proc, {4243, kStart, ""}, getuid(), "x").outcome, TtyOutcome::NoTerminal);
  EXPECT_EQ(read_terminal(), "");
}

}  // namespace
}  // namespace tarmac::reap
