// Submitted batches read and stored off the scheduler's thread (intake.hpp): users taken in turn,
// one submission of a user at a time (the next waits for the last one's Finish, run here as the
// scheduler's thread runs it), a refusal with its line and nothing stored, a batch stored in steps
// and hidden until its Finish makes it queued, and one left half stored removed when the agent
// starts again.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "service_support.hpp"
#include "tarmac/backfill/intake.hpp"

namespace tarmac::backfill {
namespace {

using test_support::request_lines;
using test_support::sealed_input;
using test_support::submitter_uid;

class IntakeTest : public test_support::ServiceFixture {
 protected:
  // The Finishes posted so far, in order, each with the batch's name; run by run_finish().
  struct Posted {
    std::string name;
    sched::Finish finish;
  };

  void start_intake(std::size_t chunk_requests = 1000, std::size_t max_per_user = 4) {
    IntakeOptions options{dir_ + "/tarmac.db", limits_, quota_, {}};
    options.chunk_requests = chunk_requests;
    options.max_per_user = max_per_user;
    options.max_total = 3;
    auto intake = Intake::open(std::move(options), [this](Intaken in) {
      // As Service::stored does: the batch becomes queued (or nothing, for a refusal).
      auto db = BatchDb::open(dir_ + "/tarmac.db");
      nlohmann::json out{{"name", in.batch.name}, {"refused", bool(in.refusal)}, {"line", in.line}};
      if (in.refusal) out["error"] = in.refusal->message;
      if (!in.refusal) {
        out["hidden_while_loading"] = !db->batch(in.batch.id)->has_value();
        out["rows"] = db->rows(in.batch.id)->size();
        out["loaded"] = db->loaded(in.batch.id).value();
      }
      return out;
    });
    ASSERT_TRUE(intake.ok()) << intake.error().message;
    intake_ = std::move(*intake);
  }

  void add(uid_t uid, const std::string& name, const std::string& input) {
    Submission s;
    s.uid = uid;
    s.batch.name = name;
    s.batch.model = "m";
    s.batch.server = "local";
    s.input = sealed_input(input);
    s.output = output(name + ".jsonl", uid);
    ASSERT_EQ(::fstat(s.output.get(), &s.output_stat), 0);
    s.answer = [this, name](sched::Finish finish) {
      std::lock_guard lock(mutex_);
      posted_.push_back({name, std::move(finish)});
      cv_.notify_all();
    };
    intake_->add(std::move(s));
  }

  // Whether `n` Finishes have been posted within `ms`.
  bool posted(std::size_t n, int ms = 20000) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return posted_.size() >= n; });
  }
  std::vector<std::string> names() {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& p : posted_) out.push_back(p.name);
    return out;
  }
  nlohmann::json run_finish(std::size_t i) {
    sched::Finish finish;
    {
      std::lock_guard lock(mutex_);
      finish = posted_.at(i).finish;
    }
    return finish();
  }

  void TearDown() override {
    intake_.reset();
    ServiceFixture::TearDown();
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Posted> posted_;
  std::unique_ptr<Intake> intake_;
};

TEST_F(IntakeTest, UsersAreTakenInTurnAndAUsersNextWaitsForItsLastOnesFinish) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to give a second account its files";
  start_intake();
  const uid_t amy = submitter_uid();
  const uid_t root = 0;
  add(amy, "amy-1", request_lines(2));
  add(amy, "amy-2", request_lines(2));
  add(root, "root-1", request_lines(2));
  ASSERT_TRUE(posted(2));
  EXPECT_EQ(names(), (std::vector<std::string>{"amy-1", "root-1"}));
  EXPECT_FALSE(posted(3, 300)) << "amy's second is taken up before her first has been answered";
  EXPECT_EQ(intake_->pending(), 3U);
  EXPECT_EQ(run_finish(1).value("loaded", false), true);
  EXPECT_FALSE(posted(3, 300)) << "root's answer does not release amy's turn";
  const auto first = run_finish(0);
  EXPECT_TRUE(first.value("loaded", false)) << first;
  EXPECT_TRUE(first.value("hidden_while_loading", false)) << first;
  ASSERT_TRUE(posted(3));
  EXPECT_EQ(names().back(), "amy-2");
  EXPECT_EQ(run_finish(2).value("loaded", false), true);
  EXPECT_EQ(intake_->pending(), 0U);
}

TEST_F(IntakeTest, ARefusalNamesItsLineAndStoresNothingAndABatchIsStoredInSteps) {
  start_intake(3);
  const uid_t uid = submitter_uid();
  add(uid, "bad", request_lines(2) + "{\"custom_id\": \n" + request_lines(1, "x"));
  ASSERT_TRUE(posted(1));
  const auto refused = run_finish(0);
  EXPECT_TRUE(refused.value("refused", false)) << refused;
  EXPECT_EQ(refused.value("line", 0), 3) << refused;
  auto db = BatchDb::open(dir_ + "/tarmac.db");
  EXPECT_EQ(db->holding(std::nullopt)->batches, 0) << "nothing stored, not even while loading";

  add(uid, "ten", request_lines(10));  // four steps of at most 3 requests
  ASSERT_TRUE(posted(2));
  const auto stored = run_finish(1);
  EXPECT_FALSE(stored.value("refused", true)) << stored;
  EXPECT_EQ(stored.value("rows", 0), 10) << stored;
  EXPECT_TRUE(stored.value("loaded", false)) << stored;
}

TEST_F(IntakeTest, AUserMayHaveAFewBatchesBeingReadAndEveryoneAFewMore) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to give a second account its files";
  start_intake(1000, 2);
  const uid_t uid = submitter_uid();
  EXPECT_TRUE(intake_->room_for(uid).ok());
  add(uid, "a", request_lines(1));
  add(uid, "b", request_lines(1));
  auto full = intake_->room_for(uid);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.error().message.find("2 batches being read"), std::string::npos) << full.error().message;
  EXPECT_EQ(*full.error().cause_as<std::string>(), "busy");
  add(0, "root", request_lines(1));  // root is held only by the total
  auto all = intake_->room_for(0);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.error().message.find("reading 3 batches"), std::string::npos) << all.error().message;
  ASSERT_TRUE(posted(1));
  (void)run_finish(0);  // an answer frees a place
  EXPECT_TRUE(intake_->room_for(0).ok());
}

TEST_F(IntakeTest, ABatchLeftHalfStoredIsRemovedWhenTheServiceOpens) {
  {
    auto db = BatchDb::open(dir_ + "/tarmac.db");
    ASSERT_TRUE(db.ok());
    Batch b;
    b.uid = submitter_uid();
    b.user = "amy";
    b.model = "m";
    std::vector<BatchRequest> requests{{"a", Endpoint::Completions, "{}", 1}, {"b", Endpoint::Completions, "{}", 2}};
    ASSERT_TRUE(db->begin_loading(b, requests).ok());
    ASSERT_TRUE(db->load(b.id, requests, 0, 1).ok());
    EXPECT_EQ(db->holding(std::nullopt)->batches, 1);
  }
  open_service();  // as the agent does when it starts again
  auto db = BatchDb::open(dir_ + "/tarmac.db");
  EXPECT_EQ(db->holding(std::nullopt)->batches, 0);
  EXPECT_EQ(db->drop_loading(std::nullopt).value(), 0);
}

}  // namespace
}  // namespace tarmac::backfill
