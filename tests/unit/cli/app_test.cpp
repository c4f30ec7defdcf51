#include "tarmac/cli/app.hpp"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <set>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"

#include "cli_test_support.hpp"

namespace tarmac::cli {
namespace {

// argv as main() gets it, from strings the test keeps alive.
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : args_(std::move(args)) {
    args_.insert(args_.begin(), "tarmac");
    for (auto& a : args_) pointers_.push_back(a.data());
    pointers_.push_back(nullptr);
  }
  [[nodiscard]] int argc() const { return static_cast<int>(args_.size()); }
  [[nodiscard]] char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> pointers_;
};

int sim_word(std::vector<std::string> args) {
  Argv a(std::move(args));
  return detail::find_sim_word(a.argc(), a.argv());
}

testing::Ran run_app_with(std::vector<std::string> args) {
  Argv a(std::move(args));
  return testing::run_captured([&] { return run(a.argc(), a.argv()); });
}

TEST(FindSimWord, OnlyAsTheSubcommand) {
  EXPECT_EQ(sim_word({"sim", "--scenario", "x"}), 1);
  EXPECT_EQ(sim_word({"--json", "--no-color", "sim", "--", "tarmac"}), 3);
  EXPECT_EQ(sim_word({"--config", "sim", "status"}), 0);      // "sim" is --config's value
  EXPECT_EQ(sim_word({"--nvml-lib", "/x.so", "sim"}), 3);
  EXPECT_EQ(sim_word({"status", "sim"}), 0);                  // another subcommand's argument
  EXPECT_EQ(sim_word({"--", "sim"}), 0);
  EXPECT_EQ(sim_word({}), 0);
  EXPECT_EQ(sim_word({"--config"}), 0);                       // a value that is missing
}

// The words each group says it adds are exactly the ones its function adds: a command added to a
// group's function but not to its words could not be run, since only the named group is built.
TEST(CommandGroups, EachAddsTheWordsItNames) {
  std::set<std::string> every;
  for (const auto& group : detail::command_groups()) {
    CLI::App app;
    GlobalOptions global;
    int exit_code = 0;
    group.add(app, global, exit_code);
    std::set<std::string> added;
    for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) added.insert(s->get_name());
    const std::set<std::string> named(group.words.begin(), group.words.end());
    EXPECT_EQ(added, named);
    for (const auto& w : named) EXPECT_TRUE(every.insert(w).second) << w << " is in two groups";
  }
  EXPECT_EQ(every.size(), 27U);
}

// find_command_word skips the value of each global option that takes one: a new one that takes a
// value must be in its list, or `tarmac --new-option status top` would build the wrong command.
TEST(CommandGroups, TheGlobalOptionsWithValuesAreTheOnesThatTakeOne) {
  CLI::App app;
  GlobalOptions global;
  detail::add_global_options(app, global);
  std::set<std::string> taking;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_expected_max() == 0) continue;  // a flag
    for (const auto& name : o->get_lnames()) taking.insert("--" + name);
  }
  const std::set<std::string> listed(detail::kGlobalOptionsWithValues.begin(), detail::kGlobalOptionsWithValues.end());
  EXPECT_EQ(taking, listed);
  EXPECT_FALSE(listed.empty());
}

std::vector<std::string> words_built(std::vector<std::string> args) {
  Argv a(std::move(args));
  std::vector<std::string> out;
  for (const auto* g : detail::groups_for(a.argc(), a.argv())) out.push_back(std::string(g->words.front()));
  return out;
}

TEST(CommandGroups, OnlyTheNamedGroupIsBuilt) {
  const auto all = detail::command_groups().size();
  EXPECT_EQ(words_built({"status", "--direct"}), std::vector<std::string>{"status"});
  EXPECT_EQ(words_built({"--json", "--config", "top", "cancel", "3"}), std::vector<std::string>{"jobs"});
  EXPECT_EQ(words_built({"--nvml-lib", "/x.so", "export", "--help"}), std::vector<std::string>{"history"});
  EXPECT_EQ(words_built({}), std::vector<std::string>{"status"});           // `tarmac` is status
  EXPECT_EQ(words_built({"--json"}), std::vector<std::string>{"status"});
  EXPECT_EQ(words_built({"--help"}).size(), all);                          // the list of every command
  EXPECT_EQ(words_built({"-h", "--", "status"}).size(), all);
  EXPECT_EQ(words_built({"completion", "bash"}).size(), all);              // walks the whole tree
  EXPECT_EQ(words_built({"man"}).size(), all);
  EXPECT_EQ(words_built({"no-such-command"}).size(), all);
  EXPECT_EQ(words_built({"--", "status"}), std::vector<std::string>{"status"});
}

TEST(Run, HelpListsEveryCommandAndASubcommandsHelpWorks) {
  const auto help = run_app_with({"--help"});
  EXPECT_EQ(help.code, kExitOk);
  for (const auto& group : detail::command_groups()) {
    for (const auto word : group.words) {
      if (word == "job-shim") continue;  // hidden: an empty description
      EXPECT_NE(help.out.find(std::string("  ") + std::string(word) + " "), std::string::npos) << word << "\n" << help.out;
    }
  }
  const auto status = run_app_with({"status", "--help"});
  EXPECT_EQ(status.code, kExitOk);
  EXPECT_NE(status.out.find("--direct"), std::string::npos) << status.out;
  const auto bash = run_app_with({"completion", "bash"});
  EXPECT_EQ(bash.code, kExitOk);
  EXPECT_NE(bash.out.find("backfill"), std::string::npos);
}

TEST(Run, VersionAndHelpExitZero) {
  const auto version = run_app_with({"--version"});
  EXPECT_EQ(version.code, kExitOk);
  EXPECT_TRUE(version.out.starts_with("tarmac ")) << version.out;
  EXPECT_EQ(run_app_with({"--help"}).code, kExitOk);
}

TEST(Run, ABadCommandLineIsExitTwo) {
  EXPECT_EQ(run_app_with({"--frobnicate"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"no-such-command"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"status", "--holding-after", "soon"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"watch", "-n", "0"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"export", "--format", "xml"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"history", "--level", "seconds"}).code, kExitUsage);
}

TEST(Run, AConfigurationThatCannotBeReadIsExitTwo) {
  testing::TempDir dir;
  const auto r = run_app_with({"--config", dir / "absent.toml", "status"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("absent.toml"), std::string::npos) << r.err;
  EXPECT_EQ(run_app_with({"--config", dir / "absent.toml"}).code, kExitUsage);  // plain `tarmac` is status
}

TEST(Run, ConfigDefaultsNeedNoFile) {
  const auto r = run_app_with({"config", "--defaults"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(r.out.starts_with("# tarmac configuration: the defaults\n")) << r.out;
}

TEST(Run, SimWithoutItsLauncherIsExitThree) {
  testing::ScopedEnv launcher("TARMAC_SIM_LAUNCHER", "/nonexistent/tarmac-sim");
  const auto r = run_app_with({"sim", "list"});
  EXPECT_EQ(r.code, kExitCouldNotLook);
  EXPECT_NE(r.err.find("/nonexistent/tarmac-sim"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tarmac::cli
