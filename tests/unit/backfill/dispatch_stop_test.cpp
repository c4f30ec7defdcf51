// The dispatcher stopped, released, held outside its window, or killed with kill -9 mid-batch
// (src/tarmac/backfill/dispatch.cpp), against the fake OpenAI-compatible server.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "dispatch_support.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::backfill {
namespace {

using namespace test_support;

TEST(Dispatch, StopClosesTheConnectionsInFlightAndPutsTheirRequestsBackToPending) {
  BatchFixture f(10);
  std::atomic<bool> hang{true};
  FakeLlm fake([&](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1), hang.load()}; });
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 3), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(FakeLlm::wait_for([&] { return fake.hanging() == 3; }));
  const long long t0 = util::monotonic_ms();
  EXPECT_EQ((*d)->stop(f.id()), 3);
  EXPECT_LT(util::monotonic_ms() - t0, 1000) << "the connections are shut down at once (libcurl alone looks at a flag once a second)";
  EXPECT_TRUE(FakeLlm::wait_for([&] { return fake.closed_by_client() == 3; }))
      << "the server sees each connection closed, which cancels its generation";
  auto db = f.open_db();
  auto progress = db.progress(f.id());
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->pending, 10);
  EXPECT_EQ(progress->in_flight, 0);
  EXPECT_EQ(f.output(), "");
  EXPECT_EQ(fake.requests(), 3) << "nothing more is sent";
  EXPECT_EQ((*d)->stop(f.id()), 0) << "a batch not being sent";

  // The output stays held: go() sends the rest (what a yield's end will do), each once.
  EXPECT_TRUE((*d)->holds(f.id()));
  hang = false;
  ASSERT_TRUE((*d)->go(f.id()).ok());
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  EXPECT_EQ(fake.requests(), 13);
  EXPECT_FALSE((*d)->go(12345).ok());
}

TEST(Dispatch, ReleaseStopsAndClosesTheOutput) {
  BatchFixture f(4);
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"200 OK", "", true}; });
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 2), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(FakeLlm::wait_for([&] { return fake.hanging() == 2; }));
  EXPECT_EQ((*d)->release(f.id()), 2);
  EXPECT_FALSE((*d)->holds(f.id()));
  EXPECT_EQ(f.open_db().progress(f.id())->pending, 4);
  EXPECT_EQ((*d)->release(f.id()), 0);
}

// Batch f sent by one sender to `fake`, until the output's write that `output` hangs has begun.
std::unique_ptr<Dispatcher> started_until_a_write_hangs(const BatchFixture& f, HungSync& output, const FakeLlm& fake,
                                                        long long writer_wait_ms) {
  auto options = quick(f);
  options.writer_wait_ms = writer_wait_ms;
  options.io.sync = output.sync();
  auto d = Dispatcher::open(options);
  EXPECT_TRUE(d.ok());
  if (!d.ok()) return nullptr;
  EXPECT_TRUE((*d)->start(batch_of(f, 1), server_at(fake), f.open_output()).ok());
  EXPECT_TRUE(FakeLlm::wait_for([&] { return output.hung() == 1; }));
  return std::move(*d);
}

TEST(Dispatch, AStopDoesNotWaitForAWriteThatHangsAndTheBatchGoesOnOnceItReturns) {
  BatchFixture f(6);
  HungSync output([](int number, int) { return number == 0; });  // its first fdatasync hangs
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1)}; });
  auto d = started_until_a_write_hangs(f, output, fake, 200);
  ASSERT_TRUE(d && output.hung() == 1);
  const long long t0 = util::monotonic_ms();
  const long long interrupted = d->stop(f.id());  // the yield, on the scheduler's thread
  EXPECT_LT(util::monotonic_ms() - t0, 2000) << "stop() waits writer_wait_ms for the writer, not for the write";
  auto refused = d->go(f.id());
  ASSERT_FALSE(refused.ok()) << "not sent again while its writer is in a write";
  EXPECT_NE(refused.error().message.find("has not returned yet"), std::string::npos) << refused.error().message;
  EXPECT_TRUE(d->holds(f.id()));

  output.release();  // the write returns: the answer is written, nothing more is sent
  ASSERT_TRUE(FakeLlm::wait_for([&] { return d->go(f.id()).ok(); })) << "sent again once the write returned";
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  // The answer whose write hung, and the one queued behind it, were written, not asked for again;
  // only the one its sender still held is (interrupted), which the server may or may not have seen
  // before stop() shut its connection.
  EXPECT_GE(fake.requests(), 6);
  EXPECT_LE(fake.requests(), 6 + interrupted);
  EXPECT_LE(interrupted, 1);
}

TEST(Dispatch, AReleaseDuringAHungWriteReturnsAndTheOutputClosesWhenTheWriteDoes) {
  BatchFixture f(3);
  HungSync output([](int, int) { return true; });
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1)}; });
  auto d = started_until_a_write_hangs(f, output, fake, 100);
  ASSERT_TRUE(d && output.hung() == 1);
  struct stat st {};
  ASSERT_EQ(::stat(f.output_path().c_str(), &st), 0);
  const long long t0 = util::monotonic_ms();
  (void)d->release(f.id());  // a cancel
  EXPECT_LT(util::monotonic_ms() - t0, 2000);
  EXPECT_FALSE(d->holds(f.id()));
  EXPECT_TRUE(d->drains_output(st.st_dev, st.st_ino)) << "not another batch's output while the write hangs";
  auto again = d->start(batch_of(f, 1), server_at(fake), f.open_output());  // a resume after a failed cancel
  ASSERT_FALSE(again.ok()) << "no second Run beside the draining one";
  EXPECT_NE(again.error().message.find("still being written"), std::string::npos) << again.error().message;
  output.release();
  ASSERT_TRUE(FakeLlm::wait_for([&] { return !d->drains_output(st.st_dev, st.st_ino); }));
  // The answer whose write hung is written; the one queued behind it is not (the output is no
  // longer the batch's): pending again, like the rest; nothing in flight.
  const auto progress = f.open_db().progress(f.id());
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->done, 1);
  EXPECT_EQ(progress->pending, 2);
  EXPECT_EQ(progress->in_flight, 0);
  EXPECT_EQ(output_lines(f).size(), 1U);
}

TEST(Dispatch, SendsOnlyInsideTheBatchsWindow) {
  EXPECT_TRUE(in_window("", 0));
  EXPECT_TRUE(in_window("00:00-06:00", 0));
  EXPECT_TRUE(in_window("00:00-06:00", 359));
  EXPECT_FALSE(in_window("00:00-06:00", 360));
  EXPECT_TRUE(in_window("22:00-02:00", 23 * 60));
  EXPECT_TRUE(in_window("22:00-02:00", 60));
  EXPECT_FALSE(in_window("22:00-02:00", 12 * 60));
  EXPECT_EQ(minutes_until_open("22:00-02:00", 21 * 60 + 30), 30);
  EXPECT_EQ(minutes_until_open("00:00-06:00", 23 * 60), 60);

  BatchFixture f(4);
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1)}; });
  std::atomic<int> minute{12 * 60};  // noon: outside 22:00-02:00
  DispatchOptions o = quick(f);
  o.local_minute = [&] { return minute.load(); };
  auto d = Dispatcher::open(o);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 2, "22:00-02:00"), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(FakeLlm::wait_for([&] { return reason_of(f).find("waiting for its window 22:00-02:00") != std::string::npos; }))
      << reason_of(f);
  EXPECT_EQ(fake.requests(), 0);
  minute = 23 * 60;
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
}

// A sender keeps its connection from one request to the next (net::Session), and closes it before
// it waits for its window: an open connection would hold one of the server's connection threads
// for hours (security review, L3).
TEST(Dispatch, ASenderKeepsItsConnectionAndClosesItBeforeWaitingForItsWindow) {
  BatchFixture f(5);
  std::atomic<int> minute{60};  // inside 00:00-06:00
  FakeLlm fake(
      [&](int number, const std::string&) {
        if (number == 2) minute = 12 * 60;  // the window closes during the third request
        return FakeLlm::Reply{"200 OK", completion(1)};
      },
      0, /*keep_alive=*/true);
  DispatchOptions o = quick(f);
  o.local_minute = [&] { return minute.load(); };
  auto d = Dispatcher::open(o);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 1, "00:00-06:00"), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(FakeLlm::wait_for([&] { return reason_of(f).starts_with(kWaitingForWindow); })) << reason_of(f);
  EXPECT_EQ(fake.requests(), 3);
  EXPECT_EQ(fake.connections(), 1) << "the three requests went over one connection";
  EXPECT_TRUE(FakeLlm::wait_for([&] { return fake.connections_ended() == 1; }))
      << "the connection is closed while the sender waits for its window";
  // The span it ran is recorded when its window closes (before, only a stop or the batch's end did).
  auto spans = [&] {
    auto b = f.open_db().batch(f.id());
    return b.ok() && b->has_value() ? (*b)->windows.size() : 0U;
  };
  EXPECT_TRUE(FakeLlm::wait_for([&] { return spans() == 1; })) << spans();
  minute = 120;
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  EXPECT_EQ(fake.connections(), 2) << "a new connection for the rest";
  EXPECT_EQ(spans(), 1U) << "two stints a moment apart are one span (kSpanJoinMs)";
}

// kill -9 of a child process that runs a dispatcher, mid-batch; then a dispatcher in this process
// takes the output over (as `tarmac backfill resume` does): every custom_id exactly once, and no
// request whose line was in the output is sent again.
TEST(Dispatch, Kill9MidBatchThenRecoveryHasEveryCustomIdOnce) {
  constexpr int kRequests = 40;
  BatchFixture f(kRequests);
  // The child is forked before this process has a thread (the fake server's): a fork with threads
  // running can copy a lock one of them holds (the sanitizers' allocator's), and the child hangs.
  // It learns the server's address through a pipe.
  int url_pipe[2];
  ASSERT_EQ(::pipe(url_pipe), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(url_pipe[1]);
    std::string url;
    char buf[256];
    for (ssize_t n; (n = ::read(url_pipe[0], buf, sizeof buf)) > 0;) url.append(buf, static_cast<std::size_t>(n));
    auto d = Dispatcher::open(quick(f));
    if (url.empty() || !d.ok() || !(*d)->start(batch_of(f, 4), server_at(url), f.open_output()).ok()) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(url_pipe[0]);
  std::atomic<bool> recovering{false};
  std::mutex m;
  std::vector<std::string> sent_after;
  std::atomic<int> answered{0};
  FakeLlm fake([&](int, const std::string& request) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!recovering) {
      // Half the batch is answered before the kill; the rest waits, so the kill is mid-batch
      // however slowly this test looks.
      if (++answered > kRequests / 2) {
        while (!recovering) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    } else {
      std::lock_guard lock(m);
      sent_after.push_back(custom_id_of(request));
    }
    return FakeLlm::Reply{"200 OK", completion(1)};
  });
  const std::string url = fake.url();
  EXPECT_EQ(::write(url_pipe[1], url.data(), url.size()), static_cast<ssize_t>(url.size()));
  ::close(url_pipe[1]);
  // Whole lines only while the child writes (output_ids fails a line read half written); the
  // server holds every request past the half, so nothing is being written once they are there.
  ASSERT_TRUE(FakeLlm::wait_for([&] {
    const std::string out = f.output();
    return std::count(out.begin(), out.end(), '\n') >= kRequests / 2;
  }));
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  const auto before = output_ids(f.output());
  EXPECT_EQ(before.size(), static_cast<std::size_t>(kRequests / 2));
  recovering = true;
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 4), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  std::lock_guard lock(m);
  // Lines of the output before recovery could be one more than the store knew (written, not yet
  // committed): recovery adopts them; none of them is sent again.
  for (const auto& id : before) {
    EXPECT_EQ(std::count(sent_after.begin(), sent_after.end(), id), 0) << id << " was answered before the kill";
  }
}

}  // namespace
}  // namespace tarmac::backfill
