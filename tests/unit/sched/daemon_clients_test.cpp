// The agent's scheduler thread serving its socket (sched/daemon_clients.cpp, the loop in daemon.cpp),
// in-process, with no GPUs and a monotonic clock the test moves: idle connections are closed when
// that clock says so and not before, whatever the wall clock does; a client that never reads does
// not stop the others; descriptors of clients that hang up are closed.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <gtest/gtest.h>
#include <mutex>
#include <thread>
#include <vector>

#include "tarmac/sched/daemon.hpp"
#include "tarmac/sched/wire.hpp"

#include "../support/lingering_socket.hpp"
#include "daemon_fixture.hpp"
#include "open_fds.hpp"

namespace tarmac::sched {
namespace {

using testing::eventually;
using testing::open_fds;

class DaemonClients : public testing::DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    clock_runs_ = false;  // only the test moves the agent's clock
    options_.config.connection_idle_timeout_ms = 5000;
    options_.config.user_connection_cap = 4;
    options_.open_backend = [] { return Result<std::unique_ptr<gpu::Backend>>(make_error(Error::Code::NotFound, "no GPUs")); };
    start();
  }

  // Whether the agent closed `c` (POLLHUP, with or without data left to read) within the bound.
  static bool closed_by_agent(const Connection& c) { return eventually([&] { return hung_up(c); }); }
  static bool hung_up(const Connection& c) {
    pollfd p{.fd = c.fd(), .events = POLLIN, .revents = 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLHUP) != 0;
  }
};

TEST_F(DaemonClients, AnIdleConnectionIsClosedWhenTheInjectedClockSaysSoAndNotBefore) {
  auto idle = Connection::connect(dir_ + "/agent.sock");
  ASSERT_TRUE(idle.ok());
  ASSERT_TRUE(ask_line(R"({"op":"jobs"})").ok());  // the agent has accepted it and runs its loop
  // The loop waits on its own clock, so nothing a wall clock does (a step back of an hour, or
  // forward) moves its timers. One millisecond short of the timeout on that clock, a request
  // answered on another connection shows the loop has run (and closed what was idle) since.
  now_ += 4999;
  ASSERT_TRUE(ask_line(R"({"op":"jobs"})").ok());
  EXPECT_FALSE(hung_up(*idle)) << "closed before its idle timeout";
  now_ += 2;
  EXPECT_TRUE(closed_by_agent(*idle)) << "still open after its idle timeout";
}

TEST_F(DaemonClients, AClientThatNeverReadsDoesNotStopTheOthers) {
  auto greedy = Connection::connect(dir_ + "/agent.sock");
  ASSERT_TRUE(greedy.ok());
  ::fcntl(greedy->fd(), F_SETFL, O_NONBLOCK);
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "{\"op\":\"jobs\",\"all\":true}\n";
  std::size_t sent = 0;
  while (sent < many.size()) {
    const ssize_t n = ::send(greedy->fd(), many.data() + sent, many.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  for (int i = 0; i < 5; ++i) {
    auto answer = ask_line(R"({"op":"jobs"})");
    ASSERT_TRUE(answer.ok()) << answer.error().message;
    EXPECT_NE(answer->find("\"ok\":true"), std::string::npos);
  }
  now_ += 5001;  // it has read nothing for the idle timeout
  EXPECT_TRUE(closed_by_agent(*greedy));
}

TEST_F(DaemonClients, DescriptorsOfClientsThatHangUpMidLineAreClosed) {
  ASSERT_TRUE(ask_line(R"({"op":"jobs"})").ok());
  const int before = open_fds();
  for (int i = 0; i < 50; ++i) {
    auto c = Connection::connect(dir_ + "/agent.sock");
    ASSERT_TRUE(c.ok());
    int pipe_fds[2];
    ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
    // Half a request with two descriptors, then gone.
    std::string half = R"({"op":"submit")";
    iovec iov{.iov_base = half.data(), .iov_len = half.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * 2);
    std::memcpy(CMSG_DATA(cm), pipe_fds, sizeof pipe_fds);
    ASSERT_EQ(::sendmsg(c->fd(), &msg, 0), static_cast<ssize_t>(half.size()));
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
  }
  ASSERT_TRUE(ask_line(R"({"op":"jobs"})").ok());
  EXPECT_TRUE(eventually([&] { return open_fds() <= before; })) << open_fds() << " open, " << before << " before";
}

TEST_F(DaemonClients, ADescriptorWhoseCloseWaitsDoesNotHoldTheLoop) {
  // A user hands over a socket whose close lingers for 30 s with a request that takes nothing.
  auto lingering = ::tarmac::testing::LingeringSocket::make(30);
  ASSERT_TRUE(lingering.sender);
  auto sender = Connection::connect(dir_ + "/agent.sock");
  ASSERT_TRUE(sender.ok());
  ASSERT_TRUE(sender->send_line(R"({"op":"jobs"})", std::vector<int>{lingering.sender.get()}).ok());
  lingering.sender.reset();  // the agent's is now the last: its close is the one that waits
  ASSERT_TRUE(sender->read_line(20000).ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto other = ask_line(R"({"op":"jobs"})");
  ASSERT_TRUE(other.ok()) << other.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "the loop waited for the close";
  EXPECT_TRUE(lingering.drain()) << "the agent never closed it";
}

// Requests answered later (sched::Defer): "slow" is handed to the test, which answers it from a
// thread of its own, as backfill's intake answers a submission once it has read it.
class DeferredAnswers : public testing::DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    clock_runs_ = false;
    options_.config.connection_idle_timeout_ms = 5000;
    options_.open_backend = [] { return Result<std::unique_ptr<gpu::Backend>>(make_error(Error::Code::NotFound, "no GPUs")); };
    options_.more_requests = [this](const Peer&, std::vector<util::Fd>&, const nlohmann::json& req,
                                    const Defer& defer) -> std::optional<nlohmann::json> {
      if (req.value("op", "") != "slow") return std::nullopt;
      std::lock_guard lock(mutex_);
      later_.push_back(defer());
      return nlohmann::json{{"ok", false}, {"error", "this answer is not sent: the request is answered later"}};
    };
    start();
  }
  std::size_t deferred() {
    std::lock_guard lock(mutex_);
    return later_.size();
  }
  // Posts the answer to the `i`th deferred request from another thread; its Finish records the
  // thread it ran on.
  void answer_from_another_thread(std::size_t i, std::atomic<bool>& ran) {
    sched::AnswerLater later;
    {
      std::lock_guard lock(mutex_);
      later = later_.at(i);
    }
    std::thread([&, later] {
      later([&] {
        finished_on_ = std::this_thread::get_id();
        ran = true;
        return nlohmann::json{{"ok", true}, {"answered", "later"}};
      });
    }).join();
  }
  static bool hung_up(const Connection& c) {
    pollfd p{.fd = c.fd(), .events = POLLIN, .revents = 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLHUP) != 0;
  }

  std::mutex mutex_;
  std::vector<sched::AnswerLater> later_;
  std::atomic<std::thread::id> finished_on_;
};

TEST_F(DeferredAnswers, OthersAreAnsweredMeanwhileAndTheWaitingClientIsNeitherReadNorDroppedUntilItsAnswer) {
  auto slow = Connection::connect(dir_ + "/agent.sock");
  ASSERT_TRUE(slow.ok());
  ASSERT_TRUE(slow->send_line(R"({"op":"slow"})").ok());
  ASSERT_TRUE(slow->send_line(R"({"op":"slow"})").ok());  // a second request behind it
  ASSERT_TRUE(eventually([&] { return deferred() == 1; }));
  auto other = ask_line(R"({"op":"jobs"})");
  ASSERT_TRUE(other.ok()) << "another client waits for the deferred request: " << other.error().message;
  now_ += 60000;  // far past the idle timeout: a client waiting for its answer is not dropped
  ASSERT_TRUE(ask_line(R"({"op":"jobs"})").ok());  // the loop has run (and closed what was idle) since
  EXPECT_FALSE(hung_up(*slow));
  EXPECT_FALSE(slow->wait_readable(0)) << "nothing is sent before the answer";
  EXPECT_EQ(deferred(), 1U) << "nothing more is read from a client that waits for its answer";

  std::atomic<bool> ran{false};
  answer_from_another_thread(0, ran);
  auto line = slow->read_line(20000);
  ASSERT_TRUE(line.ok()) << line.error().message;
  EXPECT_EQ(nlohmann::json::parse(*line), (nlohmann::json{{"ok", true}, {"answered", "later"}}));
  EXPECT_TRUE(ran.load());
  EXPECT_NE(finished_on_.load(), std::this_thread::get_id());
  EXPECT_TRUE(eventually([&] { return hung_up(*slow); })) << "a one-shot request's connection closes once answered";
  EXPECT_EQ(deferred(), 1U);
}

TEST_F(DeferredAnswers, AClientThatHangsUpIsDroppedItsFinishStillRunsAndOnePostedAfterTheStopIsDropped) {
  ASSERT_TRUE(ask_line(R"({"op":"jobs"})").ok());
  const int before = open_fds();
  {
    auto gone = Connection::connect(dir_ + "/agent.sock");
    ASSERT_TRUE(gone.ok());
    ASSERT_TRUE(gone->send_line(R"({"op":"slow"})").ok());
    ASSERT_TRUE(eventually([&] { return deferred() == 1; }));
  }  // hung up before its answer
  EXPECT_TRUE(eventually([&] { return open_fds() <= before; })) << "dropped once it hung up, before its answer";
  std::atomic<bool> ran{false};
  answer_from_another_thread(0, ran);
  ASSERT_TRUE(ask_line(R"({"op":"jobs"})").ok());
  EXPECT_TRUE(ran.load()) << "what the request still had to do is done, though no one reads the answer";

  auto waiting = Connection::connect(dir_ + "/agent.sock");
  ASSERT_TRUE(waiting.ok());
  ASSERT_TRUE(waiting->send_line(R"({"op":"slow"})").ok());
  ASSERT_TRUE(eventually([&] { return deferred() == 2; }));
  stop();
  std::atomic<bool> late{false};
  answer_from_another_thread(1, late);  // the scheduler has stopped: dropped, never run
  EXPECT_FALSE(late.load());
  EXPECT_FALSE(waiting->read_line(1000).ok()) << "the agent's stop closed the connection with no answer";
}

}  // namespace
}  // namespace tarmac::sched
