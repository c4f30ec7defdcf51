// When a batch ran (batch.hpp Span): spans joined across a short gap, bounded in number, kept in the
// store as JSON that a damaged column cannot break, and written in local time. And the store's
// batches (batch_db.hpp): one stored in steps (loading), and what is read without its bodies.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <filesystem>
#include <optional>
#include <string>

#include "tarmac/backfill/batch.hpp"
#include "tarmac/backfill/batch_db.hpp"

namespace tarmac::backfill {
namespace {

constexpr long long kMin = 60 * 1000;

TEST(Spans, AStintSoonAfterTheLastExtendsItAndALaterOneStartsAnother) {
  std::vector<Span> spans;
  add_span(spans, {100 * kMin, 130 * kMin});
  add_span(spans, {135 * kMin, 200 * kMin});  // a yield of 5 minutes: the same night's work
  ASSERT_EQ(spans.size(), 1U);
  EXPECT_EQ(spans[0], (Span{100 * kMin, 200 * kMin}));
  add_span(spans, {200 * kMin + kSpanJoinMs + 1, 300 * kMin});
  ASSERT_EQ(spans.size(), 2U);
  EXPECT_EQ(spans[1].start_ms, 200 * kMin + kSpanJoinMs + 1);
}

TEST(Spans, AnEndBeforeItsStartIsAMomentAndOnlyTheLastOnesAreKept) {
  std::vector<Span> spans;
  add_span(spans, {50, 10});
  ASSERT_EQ(spans.size(), 1U);
  EXPECT_EQ(spans[0], (Span{50, 50}));
  for (long long i = 1; i <= static_cast<long long>(kMaxSpans) + 5; ++i) add_span(spans, {i * 1000 * kMin, i * 1000 * kMin + 1});
  ASSERT_EQ(spans.size(), kMaxSpans);
  EXPECT_EQ(spans.back().start_ms, static_cast<long long>(kMaxSpans + 5) * 1000 * kMin);
}

TEST(Spans, TheStoredTextReadsBackAndADamagedOneReadsAsNone) {
  const std::vector<Span> spans{{1, 2}, {3, 4}};
  EXPECT_EQ(spans_text(spans), "[[1,2],[3,4]]");
  EXPECT_EQ(spans_from(spans_text(spans)), spans);
  EXPECT_TRUE(spans_from("").empty());
  EXPECT_TRUE(spans_from("2026-12-02 00:00-06:00").empty());
  EXPECT_EQ(spans_from(R"([[1,2],"x",[3],[4,"5"],[6,7]])"), (std::vector<Span>{{1, 2}, {6, 7}}));
}

TEST(Spans, LocalTextWritesTheEndsDateOnlyWhenItIsAnotherDay) {
  const char* old = ::getenv("TZ");
  const std::string saved = old ? old : "";
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  const long long dec2 = 1764633600000LL;  // 2025-12-02 00:00 UTC
  EXPECT_EQ(span_local_text({dec2 + 3 * kMin, dec2 + 358 * kMin}), "2025-12-02 00:03-05:58");
  EXPECT_EQ(span_local_text({dec2 - 60 * kMin, dec2 + 60 * kMin}), "2025-12-01 23:00-2025-12-02 01:00");
  if (old) ::setenv("TZ", saved.c_str(), 1); else ::unsetenv("TZ");
  ::tzset();
}

// A store in a directory of its own, removed after the test.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tarmac-backfill-db-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto db = BatchDb::open(dir_ + "/tarmac.db");
    ASSERT_TRUE(db.ok()) << db.error().message;
    db_.emplace(std::move(*db));
  }
  void TearDown() override {
    db_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  std::optional<BatchDb> db_;
};

class SpansInTheStore : public StoreTest {};
class LoadingBatch : public StoreTest {};
class BatchDbReads : public StoreTest {};

TEST_F(SpansInTheStore, TheStoreAddsToABatchsWindowsAndSaveLeavesThemAlone) {
  Batch b;
  b.user = "amy";
  b.model = "m";
  ASSERT_TRUE(db_->create(b, {{"a", Endpoint::Completions, R"({"model":"m","prompt":"x"})", 1}}).ok());
  Batch stale = b;  // a copy read before the span was added: its save must not write it away
  ASSERT_TRUE(db_->add_window(b.id, {10 * kMin, 20 * kMin}).ok());
  ASSERT_TRUE(db_->add_window(b.id, {21 * kMin, 30 * kMin}).ok());
  stale.reason = "cancelled";
  ASSERT_TRUE(db_->save(stale).ok());
  auto back = db_->batch(b.id);
  ASSERT_TRUE(back.ok() && *back);
  EXPECT_EQ((*back)->reason, "cancelled");
  EXPECT_EQ((*back)->windows, (std::vector<Span>{{10 * kMin, 30 * kMin}}));
  EXPECT_TRUE(db_->add_window(b.id + 1, {1, 2}).ok()) << "a batch that is gone: nothing to add to";
}

TEST_F(LoadingBatch, IsStoredInStepsHiddenUntilLoadedCountedByTheQuotasAndDroppedWhenLeftOver) {
  std::vector<BatchRequest> requests;
  for (int i = 0; i < 5; ++i) requests.push_back({"c" + std::to_string(i), Endpoint::Completions, "body", static_cast<std::size_t>(i) + 1});
  Batch b;
  b.uid = 1234;
  b.user = "amy";
  b.model = "m";
  b.output_dev = 7;
  b.output_ino = 8;
  ASSERT_TRUE(db_->begin_loading(b, requests).ok());
  EXPECT_EQ(b.requests, 5);
  EXPECT_EQ(b.body_bytes, 20);
  ASSERT_TRUE(db_->load(b.id, requests, 0, 2).ok());
  ASSERT_TRUE(db_->load(b.id, requests, 2, 99).ok());  // past the end: up to it
  // Neither shown, nor sent, nor resumed while it loads...
  EXPECT_FALSE(db_->batch(b.id)->has_value());
  EXPECT_TRUE(db_->batches(BatchDb::Which::All)->empty());
  EXPECT_TRUE(db_->batches(BatchDb::Which::Unfinished)->empty());
  // ...but what it holds counts, and its output is taken.
  EXPECT_EQ(db_->holding(1234)->batches, 1);
  EXPECT_EQ(db_->holding(std::nullopt)->body_bytes, 20);
  EXPECT_EQ(db_->unfinished_on(7, 8).value(), std::optional<long long>(b.id));
  ASSERT_TRUE(db_->loaded(b.id).value());
  EXPECT_FALSE(db_->loaded(b.id).value()) << "loaded once";
  auto back = db_->batch(b.id);
  ASSERT_TRUE(back.ok() && *back);
  EXPECT_EQ((*back)->state, BatchState::Queued);
  EXPECT_EQ(db_->progress(b.id)->pending, 5);
  EXPECT_EQ(db_->drop_loading(b.id).value(), 0) << "a queued batch is not dropped";

  // What a crash in the middle leaves: removed, rows and all; others are kept.
  Batch half = b;
  ASSERT_TRUE(db_->begin_loading(half, requests).ok());
  ASSERT_TRUE(db_->load(half.id, requests, 0, 3).ok());
  EXPECT_EQ(db_->drop_loading(std::nullopt).value(), 1);
  EXPECT_FALSE(db_->loaded(half.id).value());
  EXPECT_EQ(db_->rows(half.id)->size(), 0U);
  EXPECT_EQ(db_->rows(b.id)->size(), 5U);
  EXPECT_EQ(db_->holding(1234)->batches, 1);
}

TEST_F(BatchDbReads, ProgressAndWhatIsLeftAreReadFromAnIndexNotTheRowsBodies) {
  Batch b;
  b.user = "amy";
  b.model = "m";
  const std::string body(100000, 'b');  // far past a page: read, it would mean its overflow pages
  ASSERT_TRUE(db_->create(b, {{"a", Endpoint::Completions, body, 1}, {"b", Endpoint::Completions, body, 2}}).ok());
  EXPECT_TRUE(db_->unanswered(b.id).value());
  auto taken = db_->take_pending(b.id, 2, 1000);
  ASSERT_TRUE(taken.ok() && taken->size() == 2);
  EXPECT_TRUE(db_->unanswered(b.id).value()) << "in flight is not answered";
  Commit commit;
  commit.answered = {{0, RequestState::Done, 3, 5, 2000, "", 0, 10}, {1, RequestState::Failed, {}, {}, 3000, "no", 10, 10}};
  commit.output_bytes = 20;
  ASSERT_TRUE(db_->commit(b.id, commit).ok());
  EXPECT_FALSE(db_->unanswered(b.id).value());
  auto p = db_->progress(b.id);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((std::vector<long long>{p->done, p->failed, p->pending, p->prompt_tokens, p->completion_tokens,
                                    p->first_started_ms, p->last_ended_ms}),
            (std::vector<long long>{1, 1, 0, 3, 5, 1000, 3000}));
  // The same query as progress(): SQLite answers it from the index alone.
  auto plan = db_->database().prepare("EXPLAIN QUERY PLAN SELECT state, count(*), total(prompt_tokens), "
                                     "total(completion_tokens), min(started_unix_ms), max(ended_unix_ms) FROM "
                                     "backfill_request WHERE batch = 1 GROUP BY state");
  ASSERT_TRUE(plan.ok());
  std::string details;
  for (auto row = plan->step(); row.ok() && *row; row = plan->step()) details += plan->text(3) + "\n";
  EXPECT_NE(details.find("COVERING INDEX backfill_request_progress"), std::string::npos) << details;
}

}  // namespace
}  // namespace tarmac::backfill
