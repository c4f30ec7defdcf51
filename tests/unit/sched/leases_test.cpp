#include "tarmac/sched/leases.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <set>
#include <thread>

#include "tarmac/util/clock.hpp"

namespace tarmac::sched {
namespace {

namespace fs = std::filesystem;

class LeaseDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tarmac-leases-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    path_ = root_ + "/locks";
  }
  void TearDown() override { fs::remove_all(root_); }

  Lease own(const std::string& uuid, const std::string& job = "job") const {
    return Lease{.uuid = uuid, .pid = ::getpid(), .starttime = *process_starttime(::getpid()), .expires_unix_ms = 0,
                 .job_id = job, .user = "me"};
  }

  std::string root_;
  std::string path_;
};

TEST(LeaseText, RoundTrips) {
  const Lease l{.uuid = "GPU-a", .pid = 12, .starttime = 345, .expires_unix_ms = 678, .job_id = "h-1-2", .user = "bob"};
  const auto back = parse_lease("GPU-a", format_lease(l));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->pid, 12);
  EXPECT_EQ(back->starttime, 345u);
  EXPECT_EQ(back->expires_unix_ms, 678);
  EXPECT_EQ(back->job_id, "h-1-2");
  EXPECT_EQ(back->user, "bob");
  EXPECT_FALSE(parse_lease("GPU-a", "12 34").has_value());
  EXPECT_FALSE(parse_lease("GPU-a", "").has_value());
}

TEST(LeaseText, DescribesWhoHoldsIt) {
  EXPECT_EQ(describe(Lease{.uuid = "GPU-a", .pid = 12, .starttime = 1, .expires_unix_ms = 0, .job_id = "j", .user = "bob"}),
            "by bob, job j, pid 12");
  EXPECT_EQ(describe(Lease{.uuid = "GPU-a", .pid = 0, .starttime = 0, .expires_unix_ms = 1764590400000,
                           .job_id = "p", .user = "amy"}),
            "by amy, job p, until 2025-12-01 12:00:00 UTC");
}

TEST_F(LeaseDirTest, CreatesASharedStickyDirectory) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  {
    auto held = dir->lock();
    ASSERT_TRUE(held.ok());
    ASSERT_TRUE(dir->write({own("GPU-x")}).ok());
  }
  ASSERT_EQ(::stat((path_ + "/gpu-GPU-x.lease").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(LeaseDirTest, LiveWhileTheOwnerRunsAndRemovedByJob) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir->write({own("GPU-a"), own("GPU-b", "other")}).ok());
  auto live = dir->live_leases(util::wall_ms());
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->size(), 2u);
  dir->remove({"GPU-a", "GPU-b"}, "job");  // GPU-b belongs to another job: kept
  live = dir->live_leases(util::wall_ms());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ(live->front().uuid, "GPU-b");
}

TEST_F(LeaseDirTest, StaleWhenTheOwnerIsGone) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok());
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  const auto start = process_starttime(child);  // may already be a zombie: then nullopt
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(dir->write({Lease{.uuid = "GPU-dead", .pid = child, .starttime = start.value_or(1),
                                .expires_unix_ms = 0, .job_id = "j", .user = "u"}})
                  .ok());
  auto live = dir->live_leases(util::wall_ms());
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->empty());
  EXPECT_FALSE(fs::exists(path_ + "/gpu-GPU-dead.lease"));  // removed
}

TEST_F(LeaseDirTest, StaleWhenThePidIsReused) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok());
  Lease l = own("GPU-r");
  l.starttime += 1;  // same pid, another start time: not the process that leased
  ASSERT_TRUE(dir->write({l}).ok());
  EXPECT_TRUE(dir->live_leases(util::wall_ms())->empty());
}

TEST_F(LeaseDirTest, OwnerlessLeaseLivesUntilItExpires) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok());
  const long long now = util::wall_ms();
  ASSERT_TRUE(dir->write({Lease{.uuid = "GPU-h", .pid = 0, .starttime = 0, .expires_unix_ms = now + 1000,
                                .job_id = "pick", .user = "u"}})
                  .ok());
  EXPECT_EQ(dir->live_leases(now + 999)->size(), 1u);
  EXPECT_TRUE(dir->live_leases(now + 1000)->empty());
  EXPECT_FALSE(fs::exists(path_ + "/gpu-GPU-h.lease"));
}

TEST(LeaseLife, AnOwnerlessLeaseOfAUserHoldsAtMostMaxHoldAfterItWasWritten) {
  constexpr long long kHour = 3600 * 1000;
  const long long written = 1'700'000'000'000;
  Lease held{.uuid = "GPU-h", .pid = 0, .starttime = 0, .expires_unix_ms = written + 365 * 24 * kHour,
             .job_id = "pick", .user = "mallory"};
  held.file_uid = 1000;
  held.written_unix_ms = written;
  EXPECT_TRUE(lease_is_live(held, written + kHour - 1, kHour));
  EXPECT_FALSE(lease_is_live(held, written + kHour, kHour)) << "a year asked for, an hour given";
  EXPECT_TRUE(lease_is_live(held, written + kHour, 0)) << "0: no bound";
  Lease agents = held;
  agents.file_uid = 0;  // the agent's reservations are the agent's to bound
  EXPECT_TRUE(lease_is_live(agents, written + kHour, kHour));
}

TEST_F(LeaseDirTest, AnotherUsersLongHoldIsGoneMaxHoldAfterItWasWritten) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving the lease file to another user needs root";
  constexpr long long kHour = 3600 * 1000;
  auto dir = LeaseDir::open(path_, kHour);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  const long long now = util::wall_ms();
  ASSERT_TRUE(dir->write({Lease{.uuid = "GPU-h", .pid = 0, .starttime = 0, .expires_unix_ms = now + 365 * 24 * kHour,
                                .job_id = "pick", .user = "u"},
                          Lease{.uuid = "GPU-r", .pid = 0, .starttime = 0, .expires_unix_ms = now + 365 * 24 * kHour,
                                .job_id = "reserve", .user = "root"}})
                  .ok());
  ASSERT_EQ(::chown((path_ + "/gpu-GPU-h.lease").c_str(), 1000, 1000), 0);  // as `pick --hold 365d` by uid 1000
  EXPECT_EQ(dir->live_leases(now + kHour / 2)->size(), 2u);
  const auto later = dir->live_leases(now + kHour + 60'000);
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), 1u);
  EXPECT_EQ(later->front().uuid, "GPU-r") << "root's own lease keeps the expiry it names";
  EXPECT_FALSE(fs::exists(path_ + "/gpu-GPU-h.lease"));
}

TEST_F(LeaseDirTest, GarbageFilesAreStale) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok());
  std::ofstream(path_ + "/gpu-GPU-g.lease") << "not a lease\n";
  std::ofstream(path_ + "/notes.txt") << "kept\n";
  EXPECT_TRUE(dir->live_leases(util::wall_ms())->empty());
  EXPECT_FALSE(fs::exists(path_ + "/gpu-GPU-g.lease"));
  EXPECT_TRUE(fs::exists(path_ + "/notes.txt"));
}

TEST(LockDir, EnvironmentThenConfigThenDefault) {
  ::unsetenv("TARMAC_LOCK_DIR");
  EXPECT_EQ(lock_dir(""), "/run/tarmac/locks");  // root-made (systemd-tmpfiles), not world-writable /run/lock
  EXPECT_EQ(lock_dir("/srv/locks"), "/srv/locks");
  ::setenv("TARMAC_LOCK_DIR", "/tmp/x", 1);
  EXPECT_EQ(lock_dir("/srv/locks"), "/tmp/x");
  ::unsetenv("TARMAC_LOCK_DIR");
}

// Forked children each lease one of four GPUs under the lock, hold it a moment, and release it; a
// shared counter per GPU (in shared memory) would go above 1 if two ever held the same GPU.
TEST_F(LeaseDirTest, ConcurrentLeasesInForkedChildrenNeverOverlap) {
  ASSERT_TRUE(LeaseDir::open(path_).ok());
  constexpr int kGpus = 4;
  constexpr int kChildren = 12;
  constexpr int kRounds = 5;
  struct Shared {
    std::atomic<int> holders[kGpus];
    std::atomic<int> overlaps;
    std::atomic<int> leases_taken;
  };
  void* mem = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* shared = new (mem) Shared{};
  std::vector<pid_t> kids;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto dir = LeaseDir::open(path_);
      for (int round = 0; round < kRounds; ++round) {
        int mine = -1;
        const std::string job = "job-" + std::to_string(::getpid()) + "-" + std::to_string(round);
        while (mine < 0) {
          {
            auto held = dir->lock();
            if (!held.ok()) ::_exit(3);
            auto live = dir->live_leases(util::wall_ms());
            if (!live.ok()) ::_exit(5);
            std::set<std::string> leased;
            for (const auto& l : *live) leased.insert(l.uuid);
            for (int g = 0; g < kGpus && mine < 0; ++g) {
              const std::string uuid = "GPU-" + std::to_string(g);
              if (leased.contains(uuid)) continue;
              Lease l{.uuid = uuid, .pid = ::getpid(), .starttime = *process_starttime(::getpid()),
                      .expires_unix_ms = 0, .job_id = job, .user = "u"};
              if (!dir->write({l}).ok()) ::_exit(4);
              mine = g;
            }
          }
          if (mine < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (shared->holders[mine].fetch_add(1) != 0) shared->overlaps.fetch_add(1);
        shared->leases_taken.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        shared->holders[mine].fetch_sub(1);
        auto held = dir->lock();
        dir->remove({"GPU-" + std::to_string(mine)}, job);
      }
      ::_exit(0);
    }
    ASSERT_GT(pid, 0);
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(k, &status, 0), k);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  EXPECT_EQ(shared->overlaps.load(), 0);
  EXPECT_EQ(shared->leases_taken.load(), kChildren * kRounds);
  ::munmap(mem, sizeof(Shared));
}

// A kill -9 of the owner ends its lease: nothing has to clean up.
TEST_F(LeaseDirTest, LeasesDieWithTheirOwner) {
  auto dir = LeaseDir::open(path_);
  ASSERT_TRUE(dir.ok());
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto d = LeaseDir::open(path_);
    Lease l{.uuid = "GPU-k", .pid = ::getpid(), .starttime = *process_starttime(::getpid()), .expires_unix_ms = 0,
            .job_id = "k", .user = "u"};
    if (!d->write({l}).ok()) ::_exit(4);
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 6000 && !fs::exists(path_ + "/gpu-GPU-k.lease"); ++i) {  // a hang's bound: a minute
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(dir->live_leases(util::wall_ms())->size(), 1u);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(dir->live_leases(util::wall_ms())->empty());
}

}  // namespace
}  // namespace tarmac::sched
