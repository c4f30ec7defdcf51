#include "tarmac/host/bounded_read.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "fake_proc.hpp"

namespace tarmac::host {
namespace {

using test_support::FakeProc;

// A read function whose reads of the paths in `blocked` do not return until release(): what a
// read of /proc/PID/cmdline does while a thread of PID holds its memory map locked. Every other
// path reads as its own name. Its state is shared with the read function, which a detached helper
// may still be running when the Gate goes (the helper outlives a reader that is gone).
class Gate {
 public:
  explicit Gate(std::set<std::string> blocked) : inner_(std::make_shared<Inner>()) { inner_->blocked = std::move(blocked); }
  ~Gate() { release(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  BoundedReader::ReadFn fn() {
    return [inner = inner_](const std::string& path) -> std::optional<std::string> {
      std::unique_lock lock(inner->mutex);
      ++inner->calls;
      if (inner->blocked.count(path) != 0) inner->open.wait(lock, [&] { return inner->released; });
      return "read " + path;
    };
  }
  void release() {
    const std::lock_guard lock(inner_->mutex);
    inner_->released = true;
    inner_->open.notify_all();
  }
  [[nodiscard]] unsigned calls() {
    const std::lock_guard lock(inner_->mutex);
    return inner_->calls;
  }

 private:
  struct Inner {
    std::set<std::string> blocked;
    std::mutex mutex;
    std::condition_variable open;
    bool released = false;
    unsigned calls = 0;
  };
  std::shared_ptr<Inner> inner_;
};

// Waits (yielding) until no read of `reader` is stuck: the helpers have seen their reads end.
bool none_stuck(const BoundedReader& reader) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (reader.stuck() != 0) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

constexpr BoundedReadLimits kQuick{20, 2};

TEST(BoundedRead, AReadThatBlocksIsLateAndTheCallerGoesOn) {
  Gate gate({"/proc/7/cmdline"});
  BoundedReader reader(kQuick, gate.fn());
  const auto got = reader.read("/proc/7/cmdline");
  EXPECT_EQ(got.outcome, ReadOutcome::Late);
  EXPECT_TRUE(got.unknown());
  EXPECT_FALSE(got.text);
  EXPECT_EQ(reader.stuck(), 1U);
  gate.release();
  EXPECT_TRUE(none_stuck(reader));
  // Once its read ended, the file may be read again.
  EXPECT_EQ(reader.read("/proc/7/cmdline").text, "read /proc/7/cmdline");
}

TEST(BoundedRead, AFileWhoseReadIsStuckIsNotReadAgain) {
  Gate gate({"/proc/7/cmdline"});
  BoundedReader reader(kQuick, gate.fn());
  EXPECT_EQ(reader.read("/proc/7/cmdline").outcome, ReadOutcome::Late);
  // Another pass asks again: refused at once, without another helper stuck on it.
  EXPECT_EQ(reader.read("/proc/7/cmdline").outcome, ReadOutcome::Refused);
  EXPECT_EQ(gate.calls(), 1U);
  EXPECT_EQ(reader.stuck(), 1U);
  // Other files are still read.
  const auto other = reader.read("/proc/8/cmdline");
  EXPECT_EQ(other.outcome, ReadOutcome::Read);
  EXPECT_EQ(other.text, "read /proc/8/cmdline");
}

TEST(BoundedRead, PastMaxStuckEveryReadIsRefused) {
  Gate gate({"/proc/1/cmdline", "/proc/2/cmdline", "/proc/3/cmdline"});
  BoundedReader reader(kQuick, gate.fn());
  EXPECT_EQ(reader.read("/proc/1/cmdline").outcome, ReadOutcome::Late);
  EXPECT_EQ(reader.read("/proc/2/cmdline").outcome, ReadOutcome::Late);
  // Two helpers stuck (max_stuck): a user with more blocked processes gets no more of them.
  EXPECT_EQ(reader.read("/proc/3/cmdline").outcome, ReadOutcome::Refused);
  const auto fine = reader.read("/proc/4/cmdline");
  EXPECT_EQ(fine.outcome, ReadOutcome::Refused);
  EXPECT_TRUE(fine.unknown());
  EXPECT_EQ(gate.calls(), 2U);
  gate.release();
  EXPECT_TRUE(none_stuck(reader));
  EXPECT_EQ(reader.read("/proc/4/cmdline").outcome, ReadOutcome::Read);
}

TEST(BoundedRead, TheReaderMayGoAwayWhileAReadIsStuck) {
  Gate gate({"/proc/7/environ"});
  {
    BoundedReader reader(kQuick, gate.fn());
    EXPECT_EQ(reader.read("/proc/7/environ").outcome, ReadOutcome::Late);
  }
  gate.release();  // the helper ends on its own, with the state it shares
  EXPECT_EQ(gate.calls(), 1U);
}

TEST(BoundedRead, ABatchReadsEveryFileInItsPlace) {
  Gate gate({});
  BoundedReader reader(kQuick, gate.fn());
  const std::vector<std::string> paths{"/proc/1/cmdline", "/proc/2/cmdline", "/proc/3/environ"};
  const auto got = reader.read_many(paths);
  ASSERT_EQ(got.size(), 3U);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(got[k].outcome, ReadOutcome::Read);
    EXPECT_EQ(got[k].text, "read " + paths[k]);
  }
  EXPECT_TRUE(reader.read_many({}).empty());
}

TEST(BoundedRead, AStuckReadInABatchIsLateAndTheRestAreStillRead) {
  Gate gate({"/proc/2/cmdline"});
  BoundedReader reader(kQuick, gate.fn());
  const auto got = reader.read_many({"/proc/1/cmdline", "/proc/2/cmdline", "/proc/3/cmdline", "/proc/4/cmdline"});
  ASSERT_EQ(got.size(), 4U);
  EXPECT_EQ(got[0].outcome, ReadOutcome::Read);
  EXPECT_EQ(got[1].outcome, ReadOutcome::Late);
  EXPECT_EQ(got[2].outcome, ReadOutcome::Read);  // handed to another helper
  EXPECT_EQ(got[3].text, "read /proc/4/cmdline");
  EXPECT_EQ(reader.stuck(), 1U);
  // The stuck file is refused in the next batch without another helper stuck on it.
  EXPECT_EQ(reader.read_many({"/proc/2/cmdline"}).front().outcome, ReadOutcome::Refused);
  gate.release();
  EXPECT_TRUE(none_stuck(reader));
}

TEST(BoundedRead, ABatchStopsAtMaxStuck) {
  Gate gate({"/proc/1/cmdline", "/proc/2/cmdline", "/proc/3/cmdline"});
  BoundedReader reader(kQuick, gate.fn());
  const auto got = reader.read_many({"/proc/1/cmdline", "/proc/2/cmdline", "/proc/3/cmdline", "/proc/4/cmdline"});
  ASSERT_EQ(got.size(), 4U);
  EXPECT_EQ(got[0].outcome, ReadOutcome::Late);
  EXPECT_EQ(got[1].outcome, ReadOutcome::Late);
  // Two stuck (max_stuck): the user who blocks them gets no third helper, and the rest is unknown.
  EXPECT_EQ(got[2].outcome, ReadOutcome::Refused);
  EXPECT_EQ(got[3].outcome, ReadOutcome::Refused);
  EXPECT_EQ(gate.calls(), 2U);
  gate.release();
  EXPECT_TRUE(none_stuck(reader));
}

// A read function whose reads of each path in `closed` wait until that path is opened.
class Latches {
 public:
  explicit Latches(std::set<std::string> closed) : inner_(std::make_shared<Inner>()) { inner_->closed = std::move(closed); }
  ~Latches() {
    const std::lock_guard lock(inner_->mutex);
    inner_->closed.clear();
    inner_->changed.notify_all();
  }
  Latches(const Latches&) = delete;
  Latches& operator=(const Latches&) = delete;

  BoundedReader::ReadFn fn() {
    return [inner = inner_](const std::string& path) -> std::optional<std::string> {
      std::unique_lock lock(inner->mutex);
      inner->started.insert(path);
      inner->changed.notify_all();
      inner->changed.wait(lock, [&] { return inner->closed.count(path) == 0; });
      return "read " + path;
    };
  }
  void open(const std::string& path) {
    const std::lock_guard lock(inner_->mutex);
    inner_->closed.erase(path);
    inner_->changed.notify_all();
  }
  void wait_started(const std::string& path) {
    std::unique_lock lock(inner_->mutex);
    inner_->changed.wait(lock, [&] { return inner_->started.count(path) != 0; });
  }

 private:
  struct Inner {
    std::set<std::string> closed;
    std::multiset<std::string> started;
    std::mutex mutex;
    std::condition_variable changed;
  };
  std::shared_ptr<Inner> inner_;
};

// The caller of a batch sleeps until the batch's last read is done. When another helper finished
// that last read while an earlier one still ran, the earlier one must wake the caller when it ends,
// not leave it asleep until its deadline.
TEST(BoundedRead, ABatchReadOutOfOrderByTwoHelpersWakesItsCallerWhenDone) {
  Latches latches({"/proc/1/cmdline", "/proc/2/cmdline", "/proc/3/cmdline"});
  BoundedReader reader(BoundedReadLimits{60'000, 4}, latches.fn());
  // Two helpers, both idle once these two reads have returned (each waits for work again before
  // it lets its caller see the result).
  std::thread one([&] { EXPECT_EQ(reader.read("/proc/1/cmdline").outcome, ReadOutcome::Read); });
  std::thread two([&] { EXPECT_EQ(reader.read("/proc/2/cmdline").outcome, ReadOutcome::Read); });
  latches.wait_started("/proc/1/cmdline");
  latches.wait_started("/proc/2/cmdline");
  latches.open("/proc/1/cmdline");
  latches.open("/proc/2/cmdline");
  one.join();
  two.join();
  // One helper takes the slow first read, the other the last one, which ends first.
  std::thread opener([&] {
    latches.wait_started("/proc/4/cmdline");
    latches.wait_started("/proc/3/cmdline");
    latches.open("/proc/3/cmdline");
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = reader.read_many({"/proc/3/cmdline", "/proc/4/cmdline"});
  const auto took = std::chrono::steady_clock::now() - t0;
  opener.join();
  ASSERT_EQ(got.size(), 2U);
  EXPECT_EQ(got[0].text, "read /proc/3/cmdline");
  EXPECT_EQ(got[1].text, "read /proc/4/cmdline");
  EXPECT_LT(took, std::chrono::seconds(30)) << "woken by the deadline (60 s), not by the read";
}

TEST(BoundedRead, ReadsRealFiles) {
  FakeProc proc;
  proc.write("9/cmdline", std::string("sleep\0" "100\0", 10));
  BoundedReader reader;
  const auto got = reader.read(proc.root() + "/9/cmdline");
  EXPECT_EQ(got.outcome, ReadOutcome::Read);
  EXPECT_EQ(got.text, std::string("sleep\0" "100\0", 10));
  const auto missing = reader.read(proc.root() + "/10/cmdline");
  EXPECT_EQ(missing.outcome, ReadOutcome::Failed);
  EXPECT_FALSE(missing.unknown());  // an ended process: nothing to know, not unknown
}

}  // namespace
}  // namespace tarmac::host
