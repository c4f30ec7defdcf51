#include "tarmac/cli/shim_command.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace tarmac::cli {
namespace {

using nlohmann::json;

// A spec as the agent writes it (sched/daemon_jobs.cpp).
json agent_spec() {
  return json::parse(R"({"id": 17, "path": "/usr/bin/python3", "argv": ["python3", "train.py"],
    "env": ["CUDA_VISIBLE_DEVICES=0", "TARMAC_JOB_ID=17"], "cwd": "/home/alice", "uid": 1000, "gid": 1000,
    "groups": [1000, 27], "user": "alice", "time_ms": 7200000, "grace_ms": 5000,
    "jobs_dir": "/var/lib/tarmac/jobs"})");
}

std::string spec_error(const json& spec) {
  const auto r = detail::parse_shim_spec(spec, true);
  return r.ok() ? std::string() : r.error().message;
}

TEST(ShimSpec, WhatTheAgentWrites) {
  const auto job = detail::parse_shim_spec(agent_spec(), true);
  ASSERT_TRUE(job.ok()) << job.error().message;
  EXPECT_EQ(job->id, 17);
  EXPECT_EQ(job->jobs_dir, "/var/lib/tarmac/jobs");
  EXPECT_EQ(job->what.path, "/usr/bin/python3");
  EXPECT_EQ(job->what.argv, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(job->what.env.size(), 2U);
  EXPECT_EQ(job->what.cwd, "/home/alice");
  ASSERT_TRUE(job->what.user.has_value());
  EXPECT_EQ(job->what.user->uid, 1000U);
  EXPECT_EQ(job->what.user->gid, 1000U);
  EXPECT_EQ(job->what.user->groups, (std::vector<gid_t>{1000, 27}));
  EXPECT_EQ(job->limits.time_ms, 7200000);
  EXPECT_EQ(job->limits.grace_ms, 5000);
}

TEST(ShimSpec, OnlyRootSwitchesUserAndRootJobsStayRoot) {
  EXPECT_EQ(detail::parse_shim_spec(agent_spec(), false)->what.user.has_value(), false);
  auto spec = agent_spec();
  spec["uid"] = 0;
  EXPECT_EQ(detail::parse_shim_spec(spec, true)->what.user.has_value(), false);
}

TEST(ShimSpec, OptionalFieldsTakeTheirDefaults) {
  const auto job = detail::parse_shim_spec(json{{"id", 3}, {"jobs_dir", "/j"}, {"time_ms", nullptr}}, true);
  ASSERT_TRUE(job.ok()) << job.error().message;
  EXPECT_EQ(job->limits.time_ms, std::nullopt);
  EXPECT_EQ(job->limits.grace_ms, 10000);
  EXPECT_TRUE(job->what.argv.empty());
  EXPECT_EQ(job->what.user.has_value(), false);
}

// A damaged spec used to throw (nlohmann's type_error: the wrapper died as an "internal error"
// without recording an exit) or, without an id and a directory, wrote "/0.run" and "/0.exit".
TEST(ShimSpec, ADamagedSpecIsRefusedSayingWhy) {
  EXPECT_EQ(spec_error(json()), "not a JSON object");
  EXPECT_EQ(spec_error(json::array()), "not a JSON object");
  auto spec = agent_spec();
  spec.erase("id");
  EXPECT_EQ(spec_error(spec), "no job id");
  spec = agent_spec();
  spec["id"] = -4;
  EXPECT_EQ(spec_error(spec), "no job id");
  spec = agent_spec();
  spec.erase("jobs_dir");
  EXPECT_EQ(spec_error(spec), "no absolute jobs_dir");
  spec = agent_spec();
  spec["jobs_dir"] = "jobs";
  EXPECT_EQ(spec_error(spec), "no absolute jobs_dir");
  spec = agent_spec();
  spec["argv"] = json::array({"python3", 7});
  EXPECT_EQ(spec_error(spec), "argv and env must be lists of strings");
  spec = agent_spec();
  spec["env"] = "PATH=/bin";
  EXPECT_EQ(spec_error(spec), "argv and env must be lists of strings");
  spec = agent_spec();
  spec["uid"] = "alice";
  EXPECT_EQ(spec_error(spec), "uid and gid must be ids");
  spec = agent_spec();
  spec["gid"] = -1;
  EXPECT_EQ(spec_error(spec), "uid and gid must be ids");
  spec = agent_spec();
  spec["uid"] = 4294967295LL;  // (uid_t)-1: "no change" to setresuid, never a user
  EXPECT_EQ(spec_error(spec), "uid and gid must be ids");
  spec = agent_spec();
  spec["grace_ms"] = "5s";  // of another type: the default, not a throw
  EXPECT_EQ(detail::parse_shim_spec(spec, true)->limits.grace_ms, 10000);
}

}  // namespace
}  // namespace tarmac::cli
