// What one user may hold of the agent through batches (quota.hpp, docs/backfill.md "Limits"), asked
// of the Service as the socket would: unfinished batches per user (each holds a descriptor),
// one batch per output file, the bodies kept in the store per user and in all, and the input
// handed over per minute.
#include <gtest/gtest.h>

#include "service_support.hpp"
#include "tarmac/store/sqlite.hpp"

namespace tarmac::backfill {
namespace {

using test_support::ServiceFixture;
using test_support::submitter_uid;

class ServiceQuota : public ServiceFixture {};

TEST_F(ServiceQuota, AUsersUnfinishedBatchesAreCappedBeforeTheInputIsRead) {
  quota_.batches_per_user = 2;
  open_service();
  const uid_t uid = submitter_uid();
  ASSERT_TRUE(submit_new(uid, "a.jsonl").value("ok", false));
  ASSERT_TRUE(submit_new(uid, "b.jsonl").value("ok", false));
  // The third is refused for the cap, not for its input: an input the agent would refuse (not a
  // sealed memfd) shows the cap was checked before the input was looked at.
  auto third = submit(uid, test_support::sealed_input(test_support::request_lines(1), 0), output("c.jsonl", uid),
                      "c.jsonl");
  EXPECT_FALSE(third.value("ok", true));
  EXPECT_NE(words(third).find("2 unfinished batches"), std::string::npos) << third;
  // Cancelling one makes room.
  EXPECT_TRUE(ask(uid, {}, {{"op", "backfill_cancel"}, {"id", 1}}).value("ok", false));
  EXPECT_TRUE(submit_new(uid, "d.jsonl").value("ok", false));
  if (uid != 0) EXPECT_TRUE(submit_new(0, "root.jsonl").value("ok", false)) << "root is not capped";
}

TEST_F(ServiceQuota, AnOutputFileBelongsToOneUnfinishedBatchAtATime) {
  const uid_t uid = submitter_uid();
  util::Fd out = output("shared.jsonl", uid);
  util::Fd again(::dup(out.get()));
  ASSERT_TRUE(submit(uid, test_support::sealed_input(test_support::request_lines(1)), std::move(out),
                     "shared.jsonl")
                  .value("ok", false));
  auto second = submit(uid, test_support::sealed_input(test_support::request_lines(1)), std::move(again),
                       "shared.jsonl");
  EXPECT_FALSE(second.value("ok", true));
  EXPECT_NE(words(second).find("already the output of batch 1"), std::string::npos) << second;
}

TEST_F(ServiceQuota, TheBodiesAUserKeepsAreCappedAndDroppedWhenTheBatchEnds) {
  quota_.body_bytes_per_user = 3000;
  open_service();
  const uid_t uid = submitter_uid();
  ASSERT_TRUE(submit_new(uid, "a.jsonl", 4, 400).value("ok", false));  // about 1900 bytes of bodies
  auto second = submit_new(uid, "b.jsonl", 4, 400);
  EXPECT_FALSE(second.value("ok", true));
  EXPECT_NE(words(second).find("one user may keep in the agent's store"), std::string::npos) << second;
  // Cancelled, the first batch's bodies leave the store and its room is free again.
  ASSERT_TRUE(ask(uid, {}, {{"op", "backfill_cancel"}, {"id", 1}}).value("ok", false));
  auto db = store::Database::open(dir_ + "/tarmac.db", store::Database::Mode::ReadOnly);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(db->scalar("SELECT count(*) FROM backfill_request WHERE batch = 1 AND body != ''")->value_or(-1), 0);
  EXPECT_TRUE(submit_new(uid, "c.jsonl", 4, 400).value("ok", false));
}

TEST_F(ServiceQuota, TheBodiesOfAllUsersTogetherAreCappedForRootToo) {
  quota_.body_bytes_total = 3000;
  open_service();
  ASSERT_TRUE(submit_new(submitter_uid(), "a.jsonl", 4, 400).value("ok", false));
  auto root = submit_new(0, "b.jsonl", 4, 400);
  EXPECT_FALSE(root.value("ok", true));
  EXPECT_NE(words(root).find("all users may keep"), std::string::npos) << root;
}

TEST_F(ServiceQuota, TheInputAUserHandsOverIsLimitedPerMinute) {
  quota_.input_bytes_per_minute = 1000;
  open_service();
  const uid_t uid = submitter_uid();
  ASSERT_TRUE(submit_new(uid, "a.jsonl", 5).value("ok", false));  // about 600 bytes
  auto second = submit_new(uid, "b.jsonl", 5);
  EXPECT_FALSE(second.value("ok", true));
  EXPECT_NE(words(second).find("try again in"), std::string::npos) << second;
  if (uid != 0) EXPECT_TRUE(submit_new(0, "root.jsonl", 5).value("ok", false)) << "root is not limited";
}

TEST(InputRate, RefillsOverAMinuteAndLetsAnInputLargerThanAMinutePassAlone) {
  InputRate rate(600);
  EXPECT_TRUE(rate.take(5, 600, 0).ok());
  EXPECT_FALSE(rate.take(5, 100, 0).ok());
  EXPECT_TRUE(rate.take(6, 100, 0).ok()) << "each user has a bucket";
  EXPECT_TRUE(rate.take(5, 100, 10000).ok()) << "10 s refill 100 bytes";
  EXPECT_FALSE(rate.take(5, 1000, 30000).ok());
  EXPECT_TRUE(rate.take(5, 1000, 70000).ok()) << "a full bucket lets a larger input pass";
  EXPECT_FALSE(rate.take(5, 1, 70000).ok());
}

}  // namespace
}  // namespace tarmac::backfill
