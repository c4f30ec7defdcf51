// `tarmac query` through its public entry (run_query): nvidia-smi's messages and exit codes for
// a bad command line, all decided before NVML is opened.
#include "tarmac/cli/query.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "tarmac/cli/app.hpp"

namespace tarmac::cli {
namespace {

testing::Ran query_with(const std::vector<std::string>& args) {
  GlobalOptions global;
  global.nvml_lib = "/nonexistent/libnvidia-ml.so.1";  // never a real GPU
  return testing::run_captured([&] { return run_query(global, args); });
}

TEST(Query, NeedsExactlyOneQuery) {
  const auto none = query_with({"--format=csv"});
  EXPECT_EQ(none.code, kExitUsage);
  EXPECT_TRUE(none.err.starts_with("tarmac: query needs one of --query-gpu=")) << none.err;
  EXPECT_EQ(query_with({"--query-gpu=index", "--query-compute-apps=pid", "--format=csv"}).code, kExitUsage);
}

TEST(Query, AnUnknownFieldIsNamed) {
  const auto r = query_with({"--query-gpu=index,frobnication", "--format=csv"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_TRUE(r.out.starts_with("Field \"")) << r.out;
  EXPECT_NE(r.out.find("frobnication"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("is not a valid field to query."), std::string::npos) << r.out;
}

TEST(Query, FormatIsRequiredAndChecked) {
  const auto missing = query_with({"--query-gpu=index"});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_TRUE(missing.out.starts_with("\"--format=\" switch is missing.")) << missing.out;
  EXPECT_EQ(query_with({"--query-gpu=index", "--format=xml"}).code, kExitUsage);
}

TEST(Query, OptionsWithoutTheirValueExit255) {
  const auto r = query_with({"--query-gpu=index", "--format"});
  EXPECT_EQ(r.code, 255);
  EXPECT_EQ(r.out, "ERROR: Option --format is missing its value. Please run 'tarmac query --help' for help.\n\n");
  EXPECT_EQ(query_with({"--query-gpu=index", "--format=csv", "-i"}).code, 255);
}

TEST(Query, UnknownOptionsAreNamed) {
  const auto r = query_with({"--query-gpu=index", "--format=csv", "--frobnicate"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_TRUE(r.out.starts_with("ERROR: Option --frobnicate is not recognized.")) << r.out;
}

TEST(Query, LoopsMustBePositive) {
  for (const char* bad : {"-l=0", "-lms=-5", "--loop=x", "--loop-ms=1000000000000"}) {
    const auto r = query_with({"--query-gpu=index", "--format=csv", bad});
    EXPECT_EQ(r.code, kExitUsage) << bad;
    EXPECT_TRUE(r.out.starts_with("Provided [-l(ms) | --loop(-ms)=] value is incorrect.")) << bad << ": " << r.out;
  }
}

TEST(Query, HelpListsTheFields) {
  const auto r = query_with({"--help"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_TRUE(r.out.starts_with("Usage: tarmac query --query-gpu=FIELD")) << r.out;
  EXPECT_NE(r.out.find("\n  utilization.gpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Fields of --query-compute-apps:"), std::string::npos) << r.out;
}

// With the arguments right, a missing library answers as nvidia-smi does: its words, exit 12.
TEST(Query, NoLibraryIsNvidiaSmisMessage) {
  const auto r = query_with({"--query-gpu=index", "--format=csv,noheader"});
  EXPECT_EQ(r.code, 12);
  EXPECT_TRUE(r.out.starts_with("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.")) << r.out;
}

}  // namespace
}  // namespace tarmac::cli
