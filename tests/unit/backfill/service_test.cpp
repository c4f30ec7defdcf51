// Which server a submission is sent to (src/tarmac/backfill/service.cpp, pick_server), and a
// batch's status (batch_json).
#include <gtest/gtest.h>

#include "service_support.hpp"
#include "tarmac/backfill/service.hpp"

namespace tarmac::backfill {
namespace {

// The ETA: what is left at the rate so far; none while the batch waits for its window (the rest
// goes once it opens, maybe hours away), and none once it has ended.
TEST(BatchJson, TheEtaIsTheRestAtTheRateSoFarAndNoneWhileWaitingForTheWindow) {
  Batch b;
  b.state = BatchState::Running;
  b.reason = "sending to server llama";
  Progress p;
  p.done = 10;
  p.pending = 30;
  p.first_started_ms = 1'000'000;
  const long long now = 1'000'000 + 20'000;  // 10 answered in 20 s: 30 more take 60 s
  EXPECT_EQ(batch_json(b, p, now)["eta_s"], 60);
  b.reason = std::string(kWaitingForWindow) + " 22:00-06:00 (local time)";
  EXPECT_TRUE(batch_json(b, p, now)["eta_s"].is_null());
  b.reason = "sending to server llama";
  b.state = BatchState::Cancelled;
  EXPECT_TRUE(batch_json(b, p, now)["eta_s"].is_null());
}

TEST(PickServer, TheOnlyServerIsTheDefaultAndANamedOneMustBeConfigured) {
  BackfillConfig none;
  auto nothing = pick_server(none, "");
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.error().message.find("[backfill.server.NAME]"), std::string::npos) << nothing.error().message;

  BackfillConfig one;
  one.servers["night"].url = "http://127.0.0.1:11434";
  EXPECT_EQ(pick_server(one, "").value(), "night");
  EXPECT_EQ(pick_server(one, "night").value(), "night");
  auto unknown = pick_server(one, "day");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("no server 'day' is configured (configured: night)"), std::string::npos)
      << unknown.error().message;

  BackfillConfig two = one;
  two.servers["day"].url = "http://127.0.0.1:8080";
  auto which = pick_server(two, "");
  ASSERT_FALSE(which.ok());
  EXPECT_NE(which.error().message.find("name the server with --server (configured: day, night)"), std::string::npos)
      << which.error().message;
  EXPECT_EQ(pick_server(two, "day").value(), "day");
}

class ServiceModels : public test_support::ServiceFixture {};

TEST_F(ServiceModels, ABatchMayNameOnlyAModelItsServerLists) {
  models_ = {"/models/a.gguf", "m"};
  open_service();
  const uid_t uid = test_support::submitter_uid();
  EXPECT_TRUE(submit_new(uid, "ok.jsonl").value("ok", false)) << "the fixture submits --model m";
  auto refused = ask(uid,
                     [&] {
                       std::vector<util::Fd> fds;
                       fds.push_back(test_support::sealed_input(test_support::request_lines(1)));
                       fds.push_back(output("no.jsonl", uid));
                       return fds;
                     }(),
                     {{"op", "backfill_submit"}, {"model", "/home/eve/evil.gguf"}, {"output_path", dir_ + "/no.jsonl"},
                      {"window", test_support::kClosedWindow}});
  EXPECT_FALSE(refused.value("ok", true));
  EXPECT_NE(words(refused).find("server local serves only the models /models/a.gguf, m"), std::string::npos)
      << refused;
}

}  // namespace
}  // namespace tarmac::backfill
