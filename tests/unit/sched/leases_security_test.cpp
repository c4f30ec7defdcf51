// The lock directory under attack (issue 13, items 1, 2, 3 and 6): what a user who can write the
// shared directory, or create it first, may plant there, and that root's tarmac neither follows
// it, changes the mode of what it points at, hangs on it, nor believes it. Run as root, the
// "other user" is a uid with no passwd entry that files are chowned to.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <gtest/gtest.h>
#include <string>

#include "tarmac/sched/leases.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::sched {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kOther = 54321;  // someone else

mode_t mode_of(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

uid_t owner_of(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

// Runs `body` in a child and fails the test when it has not ended within 20 s: the abuse here is
// a hang, and a hung test would only show as ctest's timeout.
template <typename F>
void ends_in_time(F body, const char* what) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(20);  // SIGALRM ends a hung child
    ::_exit(body() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << what << ": hung (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << what;
}

class LeaseSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to plant another user's files";
    char tmpl[] = "/tmp/tarmac-lease-sec-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    path_ = root_ + "/locks";
    victim_ = root_ + "/shadow";
    std::ofstream(victim_) << "root:secret\n";
    ASSERT_EQ(::chmod(victim_.c_str(), 0600), 0);
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  // The lock directory as a user makes it when it does not exist yet: theirs, with mode `mode`.
  void plant_dir(mode_t mode, uid_t owner) {
    ASSERT_EQ(::mkdir(path_.c_str(), mode), 0);
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
    ASSERT_EQ(::chown(path_.c_str(), owner, owner), 0);
  }

  // A file of someone else's in the directory.
  void plant_file(const std::string& name, const std::string& text, uid_t owner) {
    const std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    ASSERT_EQ(::chown(p.c_str(), owner, owner), 0);
    ASSERT_EQ(::chmod(p.c_str(), 0644), 0);
  }

  Lease own(const std::string& uuid) const {
    return Lease{.uuid = uuid, .pid = ::getpid(), .starttime = *process_starttime(::getpid()), .expires_unix_ms = 0,
                 .job_id = "j", .user = "root"};
  }

  std::string root_, path_, victim_;
};

// 1: a user made the directory before root, with `.lock -> /etc/shadow`. Root's tarmac used it
// and made the target mode 0666.
TEST_F(LeaseSecurityTest, ADirectoryMadeBySomeoneElseIsRefusedAndNothingIsFollowed) {
  plant_dir(0755, kOther);
  ASSERT_EQ(::symlink(victim_.c_str(), (path_ + "/.lock").c_str()), 0);
  auto dir = LeaseDir::open(path_);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().message.find(path_), std::string::npos) << dir.error().message;
  EXPECT_NE(dir.error().message.find("uid 54321"), std::string::npos) << dir.error().message;
  EXPECT_EQ(mode_of(victim_), 0600u);
}

TEST_F(LeaseSecurityTest, AWorldWritableDirectoryWithoutTheStickyBitIsRefused) {
  plant_dir(0777, 0);
  auto dir = LeaseDir::open(path_);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().message.find("not sticky"), std::string::npos) << dir.error().message;
}

TEST_F(LeaseSecurityTest, ASymlinkInPlaceOfTheDirectoryIsRefused) {
  const std::string elsewhere = root_ + "/elsewhere";
  ASSERT_EQ(::mkdir(elsewhere.c_str(), 01777), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), path_.c_str()), 0);
  auto dir = LeaseDir::open(path_);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.error().message.find(path_), std::string::npos) << dir.error().message;
}

// 1, in root's own shared directory: a user plants `.lock -> victim` before root made it.
TEST_F(LeaseSecurityTest, ASymlinkedLockInRootsDirectoryIsReplacedNotFollowed) {
  plant_dir(01777, 0);
  ASSERT_EQ(::symlink(victim_.c_str(), (path_ + "/.lock").c_str()), 0);
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  {
    auto held = dir->lock();
    ASSERT_TRUE(held.ok()) << held.error().message;
  }
  EXPECT_EQ(mode_of(victim_), 0600u);
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path_ + "/.lock")));
  EXPECT_EQ(owner_of(path_ + "/.lock"), 0u);
}

// Root creates the shared directory with its lock file at once, so no user can make `.lock` first.
TEST_F(LeaseSecurityTest, RootMakesTheDirectoryAndItsLockTogether) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  EXPECT_EQ(mode_of(path_), 01777u);
  EXPECT_EQ(owner_of(path_ + "/.lock"), 0u);
  EXPECT_EQ(mode_of(path_ + "/.lock"), 0644u);
}

// 2: the temporary file's name was predictable (.gpu-<uuid>.lease.<pid>.tmp) and opened without
// O_EXCL or O_NOFOLLOW: a symlink there changed the target's mode and wrote lease text into it,
// and a user's regular file there became the lease, theirs to delete.
TEST_F(LeaseSecurityTest, PlantedTemporaryFilesAreNeverUsed) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  const std::string old_tmp = fmt::format(".gpu-GPU-a.lease.{}.tmp", ::getpid());
  ASSERT_EQ(::symlink(victim_.c_str(), (path_ + "/" + old_tmp).c_str()), 0);
  plant_file(fmt::format(".gpu-GPU-b.lease.{}.tmp", ::getpid()), "", kOther);
  ASSERT_TRUE(dir->write({own("GPU-a"), own("GPU-b")}).ok());
  EXPECT_EQ(mode_of(victim_), 0600u);
  std::ifstream victim(victim_);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(victim), {}), "root:secret\n");
  for (const char* uuid : {"GPU-a", "GPU-b"}) {
    const std::string lease = path_ + "/gpu-" + uuid + ".lease";
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(lease))) << lease;
    EXPECT_EQ(owner_of(lease), 0u) << lease << " is not root's: its owner could delete it";
  }
  EXPECT_EQ(dir->live_leases(util::wall_ms())->size(), 2u);
}

// 3: `mkfifo gpu-evil.lease`: the reader's blocking open stalled every scheduler.
TEST_F(LeaseSecurityTest, AFifoAmongTheLeasesDoesNotHang) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  ASSERT_EQ(::mkfifo((path_ + "/gpu-evil.lease").c_str(), 0666), 0);
  ASSERT_EQ(::chown((path_ + "/gpu-evil.lease").c_str(), kOther, kOther), 0);
  ends_in_time(
      [&] {
        auto held = dir->lock();
        auto live = dir->live_leases(util::wall_ms());
        return held.ok() && live.ok() && live->empty();
      },
      "live_leases with a FIFO");
  EXPECT_FALSE(fs::exists(fs::symlink_status(path_ + "/gpu-evil.lease")));  // root removed it
}

TEST_F(LeaseSecurityTest, AFifoInPlaceOfTheLockDoesNotHang) {
  plant_dir(01777, 0);
  ASSERT_EQ(::mkfifo((path_ + "/.lock").c_str(), 0666), 0);
  ASSERT_EQ(::chown((path_ + "/.lock").c_str(), kOther, kOther), 0);
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  ends_in_time([&] { return dir->lock().ok(); }, "lock with a FIFO as .lock");
}

// A symlink among the leases is not followed (its target is not read, changed or removed).
TEST_F(LeaseSecurityTest, ASymlinkedLeaseIsNotFollowed) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  ASSERT_EQ(::symlink(victim_.c_str(), (path_ + "/gpu-GPU-s.lease").c_str()), 0);
  EXPECT_TRUE(dir->live_leases(util::wall_ms())->empty());
  EXPECT_TRUE(fs::exists(victim_));
  EXPECT_EQ(mode_of(victim_), 0600u);
}

TEST_F(LeaseSecurityTest, AnOversizedLeaseIsNotRead) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  const Lease l = own("GPU-big");
  plant_file("gpu-GPU-big.lease", format_lease(l) + std::string(1 << 20, ' '), 0);
  EXPECT_TRUE(dir->live_leases(util::wall_ms())->empty());
}

// 6: a lease naming PID 1 with its public start time held a GPU for as long as the machine ran.
TEST_F(LeaseSecurityTest, ALeaseNamingAnotherUsersProcessIsNotHonoured) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  const auto init_start = process_starttime(1);
  ASSERT_TRUE(init_start.has_value());
  plant_file("gpu-GPU-1.lease", fmt::format("1 {} 0 evil evil\n", *init_start), kOther);
  // The same forgery with a pid other than 1: this process (root's), in a file another user owns.
  plant_file("gpu-GPU-2.lease", format_lease(own("GPU-2")), kOther);
  // Root's own lease of this process, in root's file: honoured.
  plant_file("gpu-GPU-3.lease", format_lease(own("GPU-3")), 0);
  auto live = dir->live_leases(util::wall_ms());
  ASSERT_TRUE(live.ok());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ(live->front().uuid, "GPU-3");
}

TEST(LeaseParsing, PidsOfOneAndBelowAndLooseNumbersAreNoLease) {
  EXPECT_FALSE(parse_lease("GPU-a", "1 5 0 j u\n").has_value());
  EXPECT_FALSE(parse_lease("GPU-a", "-1 5 0 j u\n").has_value());
  EXPECT_FALSE(parse_lease("GPU-a", "12x 5 0 j u\n").has_value());
  EXPECT_FALSE(parse_lease("GPU-a", "12 5 0 j u extra\n").has_value());
  EXPECT_FALSE(parse_lease("GPU-a", "99999999999 5 0 j u\n").has_value());
  EXPECT_TRUE(parse_lease("GPU-a", "0 0 5 j u\n").has_value());
  EXPECT_TRUE(parse_lease("GPU-a", "12 5 0 j u\n").has_value());
  EXPECT_FALSE(parse_pid("0").has_value());
  EXPECT_FALSE(parse_pid("1").has_value());
  EXPECT_EQ(parse_pid("2"), 2);
}

}  // namespace
}  // namespace tarmac::sched
