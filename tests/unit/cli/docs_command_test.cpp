#include "tarmac/cli/docs_command.hpp"

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

namespace tarmac::cli {
namespace {

// A command line with what the generators must carry through: nesting, values, flags, short
// names, a positional, a hidden command, and help text that roff and the shells would misread.
struct Fixture {
  CLI::App app{"tarmac: the test's"};
  std::string value;
  bool flag = false;
  Fixture() {
    app.add_flag("--json", flag, "JSON");
    auto* pick = app.add_subcommand("pick", "Pick GPUs: it's \"best\"\n.second line");
    pick->add_option("-n,--gpus", value, "How many\\GPUs");
    pick->add_flag("--dry", flag, ".starts with a dot");
    auto* config = app.add_subcommand("config", "Configuration");
    config->add_subcommand("web-config", "TLS: cert and key")->add_option("file", value, "Where");
    app.add_subcommand("job-shim", "")->group("");
  }
};

TEST(Docs, RoffTextIsReadLiterally) {
  EXPECT_EQ(detail::roff_text("a\\b"), "a\\eb");
  EXPECT_EQ(detail::roff_text(".TH x\n'y\nz.w"), "\\&.TH x\n\\&'y\nz.w");
}

TEST(Docs, TheManualPageHasASectionPerVisibleCommandWithItsOptions) {
  Fixture f;
  const std::string page = detail::man_page(f.app, "9.9");
  EXPECT_NE(page.find(".TH TARMAC 1 \"\" \"tarmac 9.9\""), std::string::npos) << page;
  EXPECT_NE(page.find(".SH NAME\ntarmac \\- the test's\n"), std::string::npos) << page;
  for (const char* section : {".SS \"tarmac pick\"", ".SS \"tarmac config\"", ".SS \"tarmac config web-config\""}) {
    EXPECT_NE(page.find(section), std::string::npos) << section;
  }
  EXPECT_EQ(page.find("job-shim"), std::string::npos) << "hidden stays hidden";
  EXPECT_NE(page.find("\\fB\\-\\-gpus\\fR, \\fB\\-n\\fR \\fIVALUE\\fR\nHow many\\eGPUs\n"), std::string::npos) << page;
  EXPECT_NE(page.find("\\fB\\-\\-dry\\fR\n\\&.starts with a dot\n"), std::string::npos) << page;
  EXPECT_NE(page.find("\\fIfile\\fR\nWhere\n"), std::string::npos) << page;
  EXPECT_NE(page.find("\n\\&.second line\n"), std::string::npos) << "a description's own line cannot become a request";
}

TEST(Docs, CompletionsNameEveryVisibleCommandAndOption) {
  Fixture f;
  const std::string bash = detail::bash_completion(f.app);
  EXPECT_NE(bash.find("'') echo 'pick config --help -h --json' ;;"), std::string::npos) << bash;
  EXPECT_NE(bash.find("'config') echo 'web-config --help -h' ;;"), std::string::npos) << bash;
  EXPECT_NE(bash.find("--gpus|-n) skip=1"), std::string::npos) << "an option's value is no command: " << bash;
  EXPECT_EQ(bash.find("job-shim"), std::string::npos);
  const std::string zsh = detail::zsh_completion(f.app);
  EXPECT_NE(zsh.find("'pick:Pick GPUs: it'\\''s \"best\"'"), std::string::npos) << zsh;
  const std::string fish = detail::fish_completion(f.app);
  EXPECT_NE(fish.find("complete -c tarmac -n '__fish_use_subcommand' -a 'pick' -d 'Pick GPUs: it\\'s \"best\"'"),
            std::string::npos)
      << fish;
  EXPECT_NE(fish.find("-l 'gpus' -s 'n' -r -d 'How many\\\\GPUs'"), std::string::npos) << fish;
}

}  // namespace
}  // namespace tarmac::cli
