#include "tarmac/kube/pod_watcher.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include "fake_kubelet.hpp"

namespace tarmac::kube {
namespace {

namespace fs = std::filesystem;
using testing::answer_from_json;
using testing::FakeKubelet;

// Waits for `done` (an event), bounded only against a hang.
template <typename F>
bool eventually(F done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

struct Logged {
  std::mutex mutex;
  std::vector<std::string> lines;
  util::LogSink sink() {
    return [this](util::LogLevel, const std::string& line) {
      std::lock_guard lock(mutex);
      lines.push_back(line);
    };
  }
  std::size_t count() {
    std::lock_guard lock(mutex);
    return lines.size();
  }
  std::string at(std::size_t i) {
    std::lock_guard lock(mutex);
    return lines.at(i);
  }
};

class Watcher : public testing::SocketDirTest {};

TEST_F(Watcher, FollowsTheKubeletAndKeepsTheLastAnswerThroughAnOutage) {
  Logged log;
  std::atomic<int> version{1};
  PodWatcher watcher({socket_, 20, 1000, log.sink()});
  // No socket yet (a node outside Kubernetes): nothing listed, nothing said.
  ASSERT_TRUE(eventually([&] { return watcher.failures() >= 3; }));
  EXPECT_TRUE(watcher.latest()->empty());
  EXPECT_EQ(log.count(), 0U);

  auto kubelet = std::make_unique<FakeKubelet>(socket_, [&] {
    return answer_from_json(version == 1 ? R"([{"name": "a", "namespace": "ml", "containers": [{"name": "c",
        "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["0"]}]}]}])"
                                         : "[]");
  });
  ASSERT_TRUE(eventually([&] { return watcher.latest()->size() == 1; }));
  EXPECT_EQ(watcher.latest()->front().pod.name, "a");
  ASSERT_TRUE(eventually([&] { return log.count() == 1; }));  // logged just after the answer is kept
  EXPECT_NE(log.at(0).find("reading pod GPU allocations"), std::string::npos) << log.at(0);

  // The kubelet goes away: the containers keep running, and so does their allocation.
  const long long failed = watcher.failures();
  kubelet.reset();
  fs::remove(socket_);
  ASSERT_TRUE(eventually([&] { return watcher.failures() > failed + 2; }));
  EXPECT_EQ(watcher.latest()->size(), 1U);
  ASSERT_TRUE(eventually([&] { return log.count() == 2; }));
  EXPECT_NE(log.at(1).find("is gone; the pods it last listed stand"), std::string::npos) << log.at(1);
  // A socket nobody answers on is a problem worth one line (not one per try).
  const int dead = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_.c_str());
  ASSERT_EQ(bind(dead, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const long long before_dead = watcher.failures();
  ASSERT_TRUE(eventually([&] { return watcher.failures() > before_dead + 2; }));
  ASSERT_TRUE(eventually([&] { return log.count() == 3; }));
  EXPECT_NE(log.at(2).find(socket_), std::string::npos) << log.at(2);
  EXPECT_EQ(watcher.latest()->size(), 1U);
  close(dead);
  fs::remove(socket_);

  // Back, with the pod gone.
  version = 2;
  kubelet = std::make_unique<FakeKubelet>(socket_, [&] { return answer_from_json("[]"); });
  ASSERT_TRUE(eventually([&] { return watcher.latest()->empty(); }));
}

TEST_F(Watcher, AnAnswerIsDroppedOnceTheKubeletIsSilentTooLong) {
  Logged log;
  PodWatcherOptions o{socket_, 20, 1000, log.sink()};
  o.stale_after_ms = 300;
  PodWatcher watcher(o);
  auto kubelet = std::make_unique<FakeKubelet>(socket_, [] {
    return answer_from_json(R"([{"name": "a", "namespace": "ml", "containers": [{"name": "c",
        "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["0"]}]}]}])");
  });
  ASSERT_TRUE(eventually([&] { return watcher.latest()->size() == 1; }));
  kubelet.reset();
  fs::remove(socket_);
  // Kept a while (a restart's worth), then dropped, and said so.
  ASSERT_TRUE(eventually([&] { return watcher.latest()->empty(); }));
  ASSERT_TRUE(eventually([&] { return log.count() == 3; }));
  EXPECT_NE(log.at(1).find("stand for 300ms"), std::string::npos) << log.at(1);
  EXPECT_NE(log.at(2).find("the pods it last listed are dropped"), std::string::npos) << log.at(2);
}

TEST_F(Watcher, StopsPromptlyEvenWithALongInterval) {
  const auto started = std::chrono::steady_clock::now();
  {
    PodWatcher watcher({socket_, 3600 * 1000, 1000, {}});
    ASSERT_TRUE(eventually([&] { return watcher.failures() == 1; }));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
}

}  // namespace
}  // namespace tarmac::kube
