// The dispatcher (src/tarmac/backfill/dispatch.cpp) against a fake OpenAI-compatible server
// (tests/unit/support/http_server.hpp): answers, retries, timeouts, the bounds on parallel requests
// and on threads, outputs that cannot be written, servers that are not there or not server_user's.
// Stopping, windows and kill -9: dispatch_stop_test.cpp.
#include "tarmac/backfill/dispatch.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <set>

#include "dispatch_support.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::backfill {
namespace {

using namespace test_support;

TEST(Dispatch, SendsEveryRequestAndWritesEachAnswerOnce) {
  BatchFixture f(12);
  FakeLlm fake([](int, const std::string& request) {
    EXPECT_NE(request.find("POST /v1/chat/completions HTTP/1.1"), std::string::npos) << request;
    EXPECT_NE(request.find("Content-Type: application/json"), std::string::npos);
    return FakeLlm::Reply{"200 OK", completion(7)};
  });
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok()) << d.error().message;
  auto started = (*d)->start(batch_of(f, 3), server_at(fake), f.open_output());
  ASSERT_TRUE(started.ok()) << started.error().message;
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  EXPECT_EQ(fake.requests(), 12);
  auto db = f.open_db();
  auto progress = db.progress(f.id());
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->done, 12);
  EXPECT_EQ(progress->completion_tokens, 12 * 7);  // from each answer's usage
  EXPECT_EQ(progress->prompt_tokens, 12 * 3);
  const auto lines = output_lines(f);
  EXPECT_EQ(lines[0]["response"]["status_code"], 200);
  EXPECT_TRUE(lines[0]["error"].is_null());
  EXPECT_FALSE((*d)->holds(f.id())) << "a batch that ended is let go, its output closed";
}

// The most requests in flight at once while a batch of `n` with --parallel `parallel` is sent to a
// server allowing `max_parallel`, each answer taking 15 ms.
int most_in_flight(int n, unsigned parallel, unsigned max_parallel) {
  BatchFixture f(static_cast<std::size_t>(n));
  FakeLlm fake([](int, const std::string&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    return FakeLlm::Reply{"200 OK", completion(1)};
  });
  auto d = Dispatcher::open(quick(f));
  EXPECT_TRUE(d.ok());
  EXPECT_TRUE((*d)->start(batch_of(f, parallel), server_at(fake, max_parallel), f.open_output()).ok());
  EXPECT_TRUE(wait_done(f));
  expect_exactly_once(f);
  return fake.max_in_flight();
}

TEST(Dispatch, NeverHasMoreInFlightThanTheServerAllows) {
  EXPECT_EQ(most_in_flight(24, 8, 3), 3) << "--parallel 8, bounded by the server's max_parallel 3";
  EXPECT_EQ(most_in_flight(12, 2, 8), 2) << "bounded by the batch's --parallel 2";
}

// A server that answers each request's first try with `status`, and the tries after it with an
// answer of `tokens` completion tokens.
FakeLlm::Handler first_try_answers(const std::string& status, int tokens) {
  struct Seen {
    std::mutex m;
    std::set<std::string> ids;
  };
  auto seen = std::make_shared<Seen>();
  return [seen, status, tokens](int, const std::string& request) {
    std::lock_guard lock(seen->m);
    if (seen->ids.insert(custom_id_of(request)).second) return FakeLlm::Reply{status, "{}"};
    return FakeLlm::Reply{"200 OK", completion(tokens)};
  };
}

TEST(Dispatch, AServerErrorIsSentAgainAndTheAnswerAfterItKept) {
  BatchFixture f(6);
  FakeLlm fake(first_try_answers("500 Internal Server Error", 2));
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 2), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  EXPECT_EQ(fake.requests(), 12) << "each request: a 500, then the answer";
  for (const auto& line : output_lines(f)) {
    EXPECT_EQ(line["response"]["status_code"], 200) << line;
    EXPECT_TRUE(line["error"].is_null());
  }
}

// The "backfill" events in the fixture's store (record_stint), their details parsed.
std::vector<json> backfill_events(const BatchFixture& f) {
  auto db = f.open_db();
  auto s = db.database().prepare("SELECT detail FROM event WHERE kind = 'backfill' ORDER BY ts_ms");
  EXPECT_TRUE(s.ok());
  std::vector<json> out;
  for (;;) {
    auto row = s->step();
    if (!row.ok() || !*row) break;
    out.push_back(json::parse(s->text(0)));
  }
  return out;
}

TEST(Dispatch, CountsItsWorkForMetricsAndRecordsEachStintInTheStore) {
  BatchFixture f(6);
  std::mutex m;
  std::set<std::string> failed_once;
  std::atomic<bool> hang{false};
  FakeLlm fake([&](int, const std::string& request) {
    std::lock_guard lock(m);
    if (failed_once.insert(custom_id_of(request)).second) return FakeLlm::Reply{"500 Internal Server Error", "{}"};
    return FakeLlm::Reply{"200 OK", completion(2), hang.load() && failed_once.size() > 4};
  });
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  // The first stint: the fifth request and after hang, and stop() ends it with 4 answered.
  hang = true;
  ASSERT_TRUE((*d)->start(batch_of(f, 1), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(FakeLlm::wait_for([&] { return fake.hanging() == 1; }));
  EXPECT_EQ((*d)->counters().batches_sending, 1);
  EXPECT_EQ((*d)->counters().in_flight, 1);
  EXPECT_EQ((*d)->stop(f.id()), 1);
  auto c = (*d)->counters();
  EXPECT_EQ(c.done, 4);
  EXPECT_EQ(c.interrupted, 1);
  EXPECT_EQ(c.in_flight, 0);
  EXPECT_EQ(c.batches_sending, 0) << "stopped";
  auto events = backfill_events(f);
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0]["why"], "stopped");
  EXPECT_EQ(events[0]["done"], 4);
  EXPECT_EQ(events[0]["completion_tokens"], 8);
  EXPECT_EQ(events[0]["prompt_tokens"], 12);
  // The second: the rest, once each.
  hang = false;
  ASSERT_TRUE((*d)->go(f.id()).ok());
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  c = (*d)->counters();
  EXPECT_EQ(c.done, 6);
  EXPECT_EQ(c.failed, 0);
  EXPECT_EQ(c.retried, 6) << "each request failed once with a 500";
  EXPECT_EQ(c.completion_tokens, 12);
  EXPECT_EQ(c.prompt_tokens, 18);
  events = backfill_events(f);
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[1]["why"], "done");
  EXPECT_EQ(events[1]["done"], 2);
  EXPECT_EQ(events[1]["batch"], f.id());
  EXPECT_GE(events[1]["busy_ms"].get<long long>(), 0);
  // When it ran: the two stints, moments apart, are one span, from the first request to the end.
  auto db = f.open_db();
  const auto batch = db.batch(f.id());
  ASSERT_TRUE(batch.ok() && *batch);
  ASSERT_EQ((*batch)->windows.size(), 1U) << spans_text((*batch)->windows);
  EXPECT_GE((*batch)->windows[0].start_ms, events[0]["since_unix_ms"].get<long long>());
  EXPECT_GE((*batch)->windows[0].end_ms, events[1]["since_unix_ms"].get<long long>());
}

TEST(Dispatch, OneServersMaxParallelBoundsAllItsBatchesTogether) {
  BatchFixture a(12);
  BatchFixture b(12, &a);
  FakeLlm fake([](int, const std::string&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    return FakeLlm::Reply{"200 OK", completion(1)};
  });
  auto d = Dispatcher::open(quick(a));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(a, 4), server_at(fake, 2), a.open_output()).ok());
  ASSERT_TRUE((*d)->start(batch_of(b, 4), server_at(fake, 2), b.open_output()).ok());
  ASSERT_TRUE(wait_done(a));
  ASSERT_TRUE(wait_done(b));
  expect_exactly_once(a);
  expect_exactly_once(b);
  EXPECT_EQ(fake.max_in_flight(), 2) << "max_parallel 2 for both batches together, not 2 each";
}

TEST(Dispatch, AnOutputWhoseWritesHangHoldsOnlyItsOwnBatch) {
  BatchFixture a(3);
  BatchFixture b(3, &a);
  struct stat st {};
  ASSERT_EQ(::stat(a.output_path().c_str(), &st), 0);
  const ino_t hanging_ino = st.st_ino;
  // a's output is on a hung NFS server: its fdatasync does not return until the test says so.
  HungSync a_output([&](int, int fd) {
    struct stat s {};
    return ::fstat(fd, &s) == 0 && s.st_ino == hanging_ino;
  });
  auto options = quick(a);
  options.io.sync = a_output.sync();
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1)}; });
  auto d = Dispatcher::open(options);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(a, 1), server_at(fake), a.open_output()).ok());
  ASSERT_TRUE(FakeLlm::wait_for([&] { return a_output.hung() >= 1; }));
  const long long t0 = util::monotonic_ms();
  ASSERT_TRUE((*d)->start(batch_of(b, 1), server_at(fake), b.open_output()).ok());
  EXPECT_LT(util::monotonic_ms() - t0, 2000) << "starting another batch does not wait on a's output";
  (*d)->note(a.id(), "noted while its output hangs");  // the scheduler's tick: must not wait either
  EXPECT_EQ(a.open_db().batch(a.id())->value().reason, "noted while its output hangs");
  ASSERT_TRUE(wait_done(b)) << "b is written while a's write hangs";
  expect_exactly_once(b);
  a_output.release();
  ASSERT_TRUE(wait_done(a));
  expect_exactly_once(a);
}

TEST(Dispatch, WhileTheOutputCannotBeWrittenTheSendersWaitInsteadOfKeepingEveryAnswer) {
  BatchFixture f(20);
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1)}; });
  DispatchOptions o = quick(f);
  std::atomic<bool> full{true};
  std::atomic<int> failed_writes{0};
  o.io.pwrite = [&](int fd, const void* data, std::size_t n, off_t at) -> ssize_t {
    if (full) {
      ++failed_writes;
      errno = ENOSPC;
      return -1;
    }
    return ::pwrite(fd, data, n, at);
  };
  auto d = Dispatcher::open(o);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 2), server_at(fake), f.open_output()).ok());
  // The writer has tried its answer again and again (backoff 5-20 ms) while the senders waited.
  ASSERT_TRUE(FakeLlm::wait_for([&] { return failed_writes.load() >= 12; }));
  EXPECT_LE(fake.requests(), 5) << "one being written, one queued per sender, one held per sender";
  full = false;
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  EXPECT_EQ(fake.requests(), 20);
}

TEST(Dispatch, TooManyRequestsIsSentAgain) {
  BatchFixture f(3);
  FakeLlm fake(first_try_answers("429 Too Many Requests", 1));
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 1), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(wait_done(f));
  for (const auto& line : output_lines(f)) EXPECT_EQ(line["response"]["status_code"], 200) << line;
  EXPECT_EQ(fake.requests(), 6);
}

TEST(Dispatch, ItsThreadsAreBoundedAndABatchBeyondThemWaitsWithAReason) {
  BatchFixture a(6);
  BatchFixture b(2, &a);
  std::atomic<bool> hang{true};
  FakeLlm fake([&](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1), hang.load()}; });
  auto options = quick(a);
  options.max_threads = 3;
  auto d = Dispatcher::open(options);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(a, 4), server_at(fake, 8), a.open_output()).ok());
  ASSERT_TRUE(FakeLlm::wait_for([&] { return fake.hanging() == 2; })) << "2 senders and the writer";
  auto second = (*d)->start(batch_of(b, 1), server_at(fake, 8), b.open_output());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find("as many backfill threads as it may (3)"), std::string::npos)
      << second.error().message;
  EXPECT_FALSE((*d)->holds(b.id())) << "its output is not kept";
  hang = false;
  EXPECT_EQ((*d)->stop(a.id()), 2);
  ASSERT_TRUE((*d)->go(a.id()).ok());
  ASSERT_TRUE(wait_done(a));
  EXPECT_TRUE(FakeLlm::wait_for([&] { return !(*d)->holds(a.id()); }));
  ASSERT_TRUE((*d)->start(batch_of(b, 1), server_at(fake, 8), b.open_output()).ok()) << "the threads are back";
  ASSERT_TRUE(wait_done(b));
  expect_exactly_once(b);
}

TEST(Dispatch, NothingIsSentToAServerWhoseListenerIsNotServerUsers) {
  if (::getuid() != 0) GTEST_SKIP() << "names root as the fake's owner and another account as the expected one";
  BatchFixture f(2);
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1)}; });
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  auto server = server_at(fake, 4, 1);
  server.server_user = "nobody";  // the fake is root's: as if a user had taken the port
  ASSERT_TRUE((*d)->start(batch_of(f, 2), server, f.open_output()).ok());
  ASSERT_TRUE(FakeLlm::wait_for([&] { return reason_of(f).find("not the server's") != std::string::npos; }))
      << reason_of(f);
  EXPECT_EQ(fake.requests(), 0) << "no prompt reached the impostor";
  EXPECT_EQ(f.output(), "") << "and no error is written for it: the requests wait for the real server";
  // A sender may be between two tries (a connection being checked) when it stops: put back, not sent.
  EXPECT_LE((*d)->stop(f.id()), 2);
  EXPECT_EQ(fake.requests(), 0);
  EXPECT_EQ(f.output(), "");

  BatchFixture g(2);
  auto d2 = Dispatcher::open(quick(g));
  ASSERT_TRUE(d2.ok());
  server.server_user = "root";
  ASSERT_TRUE((*d2)->start(batch_of(g, 2), server, g.open_output()).ok());
  ASSERT_TRUE(wait_done(g));
  EXPECT_EQ(fake.requests(), 2) << "the server's own account: sent";
  for (const auto& line : output_lines(g)) EXPECT_TRUE(line["error"].is_null()) << line;

  // A dispatcher of its own: d2's threads may still be ending, and a start past the thread limit
  // fails for that reason first (seen once under a loaded ctest -j3).
  BatchFixture h(2);
  auto d3 = Dispatcher::open(quick(h));
  ASSERT_TRUE(d3.ok());
  server.server_user = "no-such-user-x";
  auto unknown = (*d3)->start(batch_of(h, 2), server, h.open_output());
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("no-such-user-x"), std::string::npos) << unknown.error().message;
}

TEST(Dispatch, AServerErrorThatLastsIsWrittenWithItsErrorAfterTheRetries) {
  BatchFixture f(3);
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"503 Service Unavailable", R"({"error":"busy"})"}; });
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 1), server_at(fake, 4, 2), f.open_output()).ok());
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  EXPECT_EQ(fake.requests(), 9) << "each request sent once and retried twice";
  for (const auto& line : output_lines(f)) {
    EXPECT_EQ(line["response"]["status_code"], 503);
    EXPECT_EQ(line["response"]["body"]["error"], "busy");
    EXPECT_EQ(line["error"]["code"], "http_503");
  }
  auto db = f.open_db();
  EXPECT_EQ(db.progress(f.id())->failed, 3);
}

TEST(Dispatch, AClientErrorIsWrittenAtOnceWithItsBody) {
  BatchFixture f(2);
  FakeLlm fake([](int, const std::string&) {
    return FakeLlm::Reply{"400 Bad Request", R"({"error":{"message":"context too long"}})"};
  });
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 1), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(wait_done(f));
  EXPECT_EQ(fake.requests(), 2) << "a 4xx is the request's own fault: never sent again";
  const auto lines = output_lines(f);
  EXPECT_EQ(lines[0]["response"]["body"]["error"]["message"], "context too long");
  EXPECT_EQ(lines[0]["error"]["code"], "http_400");
}

TEST(Dispatch, AnAnswerThatCannotBeWrittenIsKeptAndWrittenLaterNotAskedForAgain) {
  BatchFixture f(5);
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1)}; });
  DispatchOptions o = quick(f);
  std::atomic<int> writes{0};
  o.io.pwrite = [&](int fd, const void* data, std::size_t n, off_t at) -> ssize_t {
    if (++writes <= 4) {  // the disk is full for the first four writes
      errno = ENOSPC;
      return -1;
    }
    return ::pwrite(fd, data, n, at);
  };
  auto d = Dispatcher::open(o);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->start(batch_of(f, 2), server_at(fake), f.open_output()).ok());
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  EXPECT_EQ(fake.requests(), 5) << "each answer was kept while the disk was full";
}

TEST(Dispatch, AServerThatHangsIsCutAtTheTimeoutRetriedThenWrittenAsATimeout) {
  BatchFixture f(1);
  FakeLlm fake([](int, const std::string&) { return FakeLlm::Reply{"200 OK", "", true}; });
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  ServerConfig s = server_at(fake, 4, 1);
  s.timeout_ms = 300;
  const long long t0 = util::monotonic_ms();
  ASSERT_TRUE((*d)->start(batch_of(f, 1), s, f.open_output()).ok());
  ASSERT_TRUE(wait_done(f));
  EXPECT_LT(util::monotonic_ms() - t0, 3000);
  expect_exactly_once(f);
  EXPECT_EQ(fake.requests(), 2);
  EXPECT_TRUE(FakeLlm::wait_for([&] { return fake.closed_by_client() == 2; }))
      << "each timed-out request's connection is closed: the server stops generating";
  const auto lines = output_lines(f);
  EXPECT_TRUE(lines[0]["response"].is_null());
  EXPECT_EQ(lines[0]["error"]["code"], "timeout");
}

TEST(Dispatch, ABatchWaitsForAServerThatIsNotThereAndSpendsNoRetryOnIt) {
  BatchFixture f(3);
  unsigned port = 0;
  std::string url;
  {
    FakeLlm gone([](int, const std::string&) { return FakeLlm::Reply{}; });
    url = gone.url();
    port = static_cast<unsigned>(std::stoul(url.substr(url.rfind(':') + 1)));
  }
  auto d = Dispatcher::open(quick(f));
  ASSERT_TRUE(d.ok());
  ServerConfig s;
  s.url = url;
  s.retries = 0;  // a retry spent on a server that is not there would write an error at once
  ASSERT_TRUE((*d)->start(batch_of(f, 1), s, f.open_output()).ok());
  ASSERT_TRUE(FakeLlm::wait_for([&] { return reason_of(f).starts_with("waiting for server fake"); })) << reason_of(f);
  EXPECT_EQ(f.output(), "") << "nothing is written while no server is there";
  // The server comes (back) on its port: the batch goes on by itself, each request answered once.
  FakeLlm back([](int, const std::string&) { return FakeLlm::Reply{"200 OK", completion(1)}; }, port);
  ASSERT_TRUE(wait_done(f));
  expect_exactly_once(f);
  for (const auto& line : output_lines(f)) EXPECT_TRUE(line["error"].is_null()) << line;
  EXPECT_EQ(back.requests(), 3);
}

}  // namespace
}  // namespace tarmac::backfill
