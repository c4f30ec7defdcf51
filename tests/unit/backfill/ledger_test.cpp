// The output kept in step with the store (src/tarmac/backfill/ledger.cpp): every custom_id exactly
// once across kill -9 at each step, torn and garbled lines, lines cut from the output, a full disk
// and a failed commit.
#include "tarmac/backfill/ledger.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "ledger_support.hpp"

namespace tarmac::backfill {
namespace {

using json = nlohmann::json;
using test_support::BatchFixture;
using test_support::drain;
using test_support::expect_exactly_once;
using test_support::expect_nothing_past;
using test_support::fake_answer;
using test_support::output_ids;

TEST(Ledger, WritesEachAnswerInTheOpenAIBatchOutputFormat) {
  BatchFixture f(4);
  auto db = f.open_db();
  Ledger ledger(db, f.id(), f.open_output());
  ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
  drain(db, ledger, f.id());
  expect_exactly_once(f);
  const std::string out = f.output();
  const auto first = json::parse(out.substr(0, out.find('\n')));
  EXPECT_EQ(first["id"], output_line_id(f.id(), 0));
  EXPECT_EQ(first["custom_id"], "req-0");
  EXPECT_EQ(first["response"]["status_code"], 200);
  EXPECT_EQ(first["response"]["body"]["usage"]["completion_tokens"], 7);  // the body as JSON, not a string
  EXPECT_TRUE(first["error"].is_null());
  std::vector<json> lines;
  for (std::size_t from = 0; from < out.size(); from = out.find('\n', from) + 1) {
    lines.push_back(json::parse(out.substr(from, out.find('\n', from) - from)));
  }
  ASSERT_EQ(lines.size(), 4U);
  EXPECT_EQ(lines[3]["custom_id"], "req-3");
  EXPECT_EQ(lines[3]["response"]["status_code"], 500);
  EXPECT_EQ(lines[3]["error"]["code"], "http_500");
  auto progress = db.progress(f.id());
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->done, 3);
  EXPECT_EQ(progress->failed, 1);  // req-3: the 500
  EXPECT_EQ(progress->completion_tokens, 21);
}

TEST(Ledger, AFailedRequestCarriesItsErrorAndAnAnswerThatIsNotJsonIsKeptAsAString) {
  Answer a;
  a.index = 2;
  a.custom_id = "x";
  a.status = 502;
  a.body = "<html>bad gateway</html>";
  a.error_code = "http_502";
  a.error_message = "the server answered 502";
  const auto line = json::parse(output_line(9, a));
  EXPECT_EQ(line["id"], "batch_req_9_2");
  EXPECT_EQ(line["response"]["body"], "<html>bad gateway</html>");
  EXPECT_EQ(line["error"]["code"], "http_502");
  Answer timeout;
  timeout.custom_id = "y";
  timeout.error_code = "timeout";
  timeout.error_message = "no answer within 60s";
  EXPECT_TRUE(json::parse(output_line(9, timeout))["response"].is_null());
  // A body nested too deep to write back out safely is kept as text.
  a.body = std::string(1000, '[') + std::string(1000, ']');
  EXPECT_TRUE(json::parse(output_line(9, a))["response"]["body"].is_string());
}

// kill -9 of a child process at `step` of its `crash_at`-th answer; then recovery in this process
// finishes the batch. Returns how many lines recovery adopted. kill -9 leaves the page cache as it
// was, so Written and Synced are the same experiment here: these test the order of the steps and
// recovery, not durability across a power loss (nothing here can cut the power).
long long crash_and_recover(const BatchFixture& f, LedgerStep step, long long crash_at) {
  const pid_t child = ::fork();
  if (child == 0) {
    auto db = f.open_db();
    long long answers = 0;
    Ledger ledger(db, f.id(), f.open_output(), {}, [&](LedgerStep at, long long) {
      if (at == step && answers++ == crash_at) ::raise(SIGKILL);
    });
    if (!ledger.reconcile(Ledger::InFlight::BackToPending).ok()) ::_exit(3);
    drain(db, ledger, f.id());
    ::_exit(0);
  }
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child was to be killed";
  const auto before = output_ids(f.output());
  const std::set<std::string> answered(before.begin(), before.end());
  auto db = f.open_db();
  Ledger ledger(db, f.id(), f.open_output());
  auto r = ledger.reconcile(Ledger::InFlight::BackToPending);
  EXPECT_TRUE(r.ok()) << r.error().message;
  // A request whose line is in the output is never sent again.
  for (const auto& id : drain(db, ledger, f.id())) EXPECT_EQ(answered.count(id), 0U) << id << " was sent again";
  expect_exactly_once(f);
  return r.ok() ? r->adopted : -1;
}

TEST(Ledger, KillNineAfterTheWriteBeforeTheSyncLosesNothingAndSendsNothingTwice) {
  for (long long at : {0LL, 4LL, 9LL}) {
    BatchFixture f(10);
    EXPECT_EQ(crash_and_recover(f, LedgerStep::Written, at), 1) << at;  // the line outlives the process: adopted
  }
}

TEST(Ledger, KillNineBetweenTheSyncAndTheCommitAdoptsTheLine) {
  for (long long at : {0LL, 5LL, 9LL}) {
    BatchFixture f(10);
    EXPECT_EQ(crash_and_recover(f, LedgerStep::Synced, at), 1) << at;
  }
}

TEST(Ledger, KillNineAfterTheCommitNeedsNothingAdopted) {
  for (long long at : {0LL, 9LL}) {
    BatchFixture f(10);
    EXPECT_EQ(crash_and_recover(f, LedgerStep::Committed, at), 0) << at;
  }
}

TEST(Ledger, ATornLastLineIsCutAndItsRequestSentAgain) {
  BatchFixture f(6);
  {
    auto db = f.open_db();
    Ledger ledger(db, f.id(), f.open_output());
    ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
    // req-3 is in flight when the crash comes mid-write of its line: only recovery's putting it
    // back to pending sends it again (a request left in flight is never taken).
    auto taken = db.take_pending(f.id(), 4, 1);
    ASSERT_TRUE(taken.ok());
    ASSERT_EQ(taken->size(), 4U);
    for (std::size_t i = 0; i < 3; ++i) ASSERT_TRUE(ledger.complete(test_support::fake_answer((*taken)[i])).ok());
  }
  const std::string whole = f.output();
  Answer next;
  next.index = 3;
  next.custom_id = "req-3";
  next.status = 200;
  next.body = "{}";
  const std::string torn = output_line(f.id(), next).substr(0, 20);  // the crash came mid-write
  f.write_output(whole + torn);
  auto db = f.open_db();
  Ledger ledger(db, f.id(), f.open_output());
  auto r = ledger.reconcile(Ledger::InFlight::BackToPending);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->cut_bytes, 20);
  EXPECT_EQ(r->adopted, 0);
  EXPECT_EQ(f.output(), whole);
  EXPECT_EQ(drain(db, ledger, f.id()), (std::vector<std::string>{"req-3", "req-4", "req-5"}));
  expect_exactly_once(f);
}

TEST(Ledger, ADuplicateOrForeignLineIsCutWithEverythingAfterIt) {
  BatchFixture f(6);
  std::string whole;
  {
    auto db = f.open_db();
    Ledger ledger(db, f.id(), f.open_output());
    ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
    auto taken = db.take_pending(f.id(), 2, 1);
    ASSERT_TRUE(taken.ok());
    for (const auto& s : *taken) ASSERT_TRUE(ledger.complete(test_support::fake_answer(s)).ok());
    whole = f.output();
  }
  Answer later;
  later.index = 4;
  later.custom_id = "req-4";
  later.status = 200;
  later.body = "{}";
  const std::string duplicate = whole.substr(0, whole.find('\n') + 1);  // req-0 again
  const std::string foreign = R"({"id":"batch_req_999_4","custom_id":"req-4","response":null,"error":null})";
  for (const std::string& bad : {duplicate, foreign + "\n", std::string("not json\n")}) {
    f.write_output(whole + bad + output_line(f.id(), later) + "\n");
    auto db = f.open_db();
    Ledger ledger(db, f.id(), f.open_output());
    auto r = ledger.reconcile(Ledger::InFlight::Keep);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->adopted, 0) << bad;  // req-4's good line came after the bad one: cut too
    EXPECT_EQ(f.output(), whole) << bad;
  }
  auto db = f.open_db();
  Ledger ledger(db, f.id(), f.open_output());
  ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
  drain(db, ledger, f.id());
  expect_exactly_once(f);
}

TEST(Ledger, LinesCutFromTheOutputPutTheirRequestsBackToPending) {
  BatchFixture f(8);
  {
    auto db = f.open_db();
    Ledger ledger(db, f.id(), f.open_output());
    ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
    drain(db, ledger, f.id());
  }
  const std::string whole = f.output();
  // Someone cut the file in the middle of its second-to-last line.
  const auto last = whole.rfind('\n', whole.size() - 2);
  const auto second_last = whole.rfind('\n', last - 1);
  f.write_output(whole.substr(0, second_last + 10));
  auto db = f.open_db();
  Ledger ledger(db, f.id(), f.open_output());
  auto r = ledger.reconcile(Ledger::InFlight::BackToPending);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->lost, 2);
  EXPECT_EQ(r->cut_bytes, 9);
  EXPECT_EQ(f.output(), whole.substr(0, second_last + 1));
  const auto resent = drain(db, ledger, f.id());
  EXPECT_EQ(resent, (std::vector<std::string>{"req-6", "req-7"}));
  expect_exactly_once(f);
}

TEST(Ledger, AFullDiskOnAWriteOrASyncWritesNothingHalfAndLosesNothing) {
  BatchFixture f(12);
  auto db = f.open_db();
  int writes = 0;
  int syncs = 0;
  int refused = 0;
  OutputIo io;
  // The 3rd and 7th writes get half their bytes down, then ENOSPC; the 5th sync fails.
  io.pwrite = [&](int fd, const void* data, std::size_t n, off_t at) -> ssize_t {
    expect_nothing_past(fd, at);  // a half-written or unsynced line was cut before the next write
    if (++writes == 3 || writes == 7) {
      (void)::pwrite(fd, data, n / 2, at);
      ++refused;
      errno = ENOSPC;
      return -1;
    }
    return ::pwrite(fd, data, n, at);
  };
  io.sync = [&](int fd) {
    if (++syncs == 5) {
      ++refused;
      errno = ENOSPC;
      return -1;
    }
    return ::fdatasync(fd);
  };
  Ledger ledger(db, f.id(), f.open_output(), io);
  ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
  const auto sent = drain(db, ledger, f.id());
  EXPECT_EQ(refused, 3);
  EXPECT_EQ(sent.size(), 12U + 3U);  // each refused answer's request was sent again
  expect_exactly_once(f);
}

TEST(Ledger, AFullDiskWhoseCutAlsoFailsIsCleanedBeforeTheNextLine) {
  BatchFixture f(5);
  auto db = f.open_db();
  int writes = 0;
  bool truncate_fails = true;
  OutputIo io;
  io.pwrite = [&](int fd, const void* data, std::size_t n, off_t at) -> ssize_t {
    expect_nothing_past(fd, at);  // the half line the failed cut left was cleaned first
    if (++writes == 2) {
      (void)::pwrite(fd, data, n / 2, at);
      errno = ENOSPC;
      return -1;
    }
    return ::pwrite(fd, data, n, at);
  };
  io.truncate = [&](int fd, off_t size) {
    if (truncate_fails) {
      truncate_fails = false;
      errno = EIO;
      return -1;
    }
    return ::ftruncate(fd, size);
  };
  Ledger ledger(db, f.id(), f.open_output(), io);
  ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
  drain(db, ledger, f.id());
  expect_exactly_once(f);
}

TEST(Ledger, AnOutputItsOwnerTruncatesIsReconciledBeforeTheNextLineNotWrittenPastAHole) {
  BatchFixture f(4);
  auto db = f.open_db();
  Ledger ledger(db, f.id(), f.open_output());
  ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
  auto first = db.take_pending(f.id(), 2, 5000);
  ASSERT_TRUE(first.ok());
  for (const auto& s : *first) ASSERT_TRUE(ledger.complete(fake_answer(s)).ok());
  // The owner empties the file while the agent holds it: the next line must not land at the old
  // end, after a hole of NUL bytes, with the store counting the two lines gone as written.
  ASSERT_EQ(::truncate(f.output_path().c_str(), 0), 0);
  const auto sent = drain(db, ledger, f.id());
  EXPECT_EQ(sent, (std::vector<std::string>{"req-2", "req-3", "req-0", "req-1"}));  // the two lost, sent again
  EXPECT_EQ(f.output().find('\0'), std::string::npos);
  expect_exactly_once(f);
}

TEST(Ledger, OAppendSetOnTheOutputIsClearedBeforeTheNextLine) {
  BatchFixture f(3);
  auto db = f.open_db();
  Ledger ledger(db, f.id(), f.open_output());
  ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
  auto taken = db.take_pending(f.id(), 3, 5000);
  ASSERT_TRUE(taken.ok());
  ASSERT_TRUE(ledger.complete(fake_answer((*taken)[0])).ok());
  // Whoever shares the description sets O_APPEND: pwrite would then ignore the ledger's offset.
  ASSERT_EQ(::fcntl(ledger.fd(), F_SETFL, O_APPEND), 0);
  ASSERT_TRUE(ledger.complete(fake_answer((*taken)[1])).ok());
  EXPECT_EQ(::fcntl(ledger.fd(), F_GETFL) & O_APPEND, 0);
  ASSERT_TRUE(ledger.complete(fake_answer((*taken)[2])).ok());
  expect_exactly_once(f);
}

TEST(Ledger, ACommitThatFailsAfterTheLineIsWrittenIsAdoptedNotWrittenTwice) {
  BatchFixture f(6);
  auto db = f.open_db();
  // A trigger that fails the batch's update while fail_commit has a row: the store refuses the
  // commit after the line is fsynced, as a full disk would.
  ASSERT_TRUE(db.database()
                  .exec("CREATE TABLE fail_commit(x INTEGER);"
                        "CREATE TRIGGER fail_output BEFORE UPDATE OF output_bytes ON backfill_batch "
                        "WHEN (SELECT count(*) FROM fail_commit) > 0 BEGIN SELECT RAISE(ABORT, 'injected'); END;")
                  .ok());
  Ledger ledger(db, f.id(), f.open_output(), {}, [&](LedgerStep step, long long index) {
    if (step == LedgerStep::Synced && index == 2) (void)db.database().exec("INSERT INTO fail_commit VALUES(1)");
  });
  ASSERT_TRUE(ledger.reconcile(Ledger::InFlight::BackToPending).ok());
  auto taken = db.take_pending(f.id(), 6, 1);
  ASSERT_TRUE(taken.ok());
  std::vector<Ledger::Completion> outcomes;
  for (const auto& s : *taken) {
    auto c = ledger.complete(test_support::fake_answer(s));
    ASSERT_TRUE(c.ok()) << c.error().message;
    outcomes.push_back(*c);
    if (s.row.index == 2) ASSERT_TRUE(db.database().exec("DELETE FROM fail_commit").ok());
  }
  EXPECT_EQ(outcomes[2], Ledger::Completion::Written);
  EXPECT_EQ(outcomes[3], Ledger::Completion::Recorded);  // after adopting req-2's line
  // An answer that comes twice (a retry raced its first answer) writes nothing.
  Sendable again{RequestRow{}, ""};
  again.row.index = 2;
  again.row.custom_id = "req-2";
  auto twice = ledger.complete(test_support::fake_answer(again));
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(*twice, Ledger::Completion::AlreadyAnswered);
  expect_exactly_once(f);
}

}  // namespace
}  // namespace tarmac::backfill
