#include "tarmac/cli/context.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // posix_openpt, grantpt, unlockpt, ptsname
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cli_test_support.hpp"

namespace tarmac::cli {
namespace {

using testing::ConfigFixture;
using testing::ScopedEnv;

// A pseudo-terminal's two ends, closed at the end of the test.
class PseudoTerminal {
 public:
  PseudoTerminal() {
    master_ = ::posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || ::grantpt(master_) != 0 || ::unlockpt(master_) != 0) return;
    const int slave = ::open(::ptsname(master_), O_RDWR | O_NOCTTY);
    if (slave >= 0) terminal_ = ::fdopen(slave, "w");
  }
  ~PseudoTerminal() {
    if (terminal_ != nullptr) std::fclose(terminal_);
    if (master_ >= 0) ::close(master_);
  }
  PseudoTerminal(const PseudoTerminal&) = delete;
  PseudoTerminal& operator=(const PseudoTerminal&) = delete;
  [[nodiscard]] std::FILE* stream() const { return terminal_; }

 private:
  int master_ = -1;
  std::FILE* terminal_ = nullptr;
};

TEST(UseColor, OnlyOnATerminalAndNeverWhenAskedNotTo) {
  ScopedEnv no_color("NO_COLOR", std::nullopt);
  ScopedEnv term("TERM", "xterm-256color");
  PseudoTerminal pty;
  ASSERT_NE(pty.stream(), nullptr) << "no pseudo-terminal";
  GlobalOptions options;
  EXPECT_TRUE(use_color(options, pty.stream()));
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  EXPECT_FALSE(use_color(options, file));
  std::fclose(file);
  options.no_color = true;
  EXPECT_FALSE(use_color(options, pty.stream()));
}

TEST(UseColor, NoColorAndDumbTerminalsTurnItOff) {
  PseudoTerminal pty;
  ASSERT_NE(pty.stream(), nullptr) << "no pseudo-terminal";
  const GlobalOptions options;
  {
    ScopedEnv no_color("NO_COLOR", "1");
    ScopedEnv term("TERM", "xterm");
    EXPECT_FALSE(use_color(options, pty.stream()));
  }
  {
    ScopedEnv no_color("NO_COLOR", "");  // set but empty: as if unset (no-color.org)
    ScopedEnv term("TERM", "dumb");
    EXPECT_FALSE(use_color(options, pty.stream()));
  }
  {
    ScopedEnv no_color("NO_COLOR", "");
    ScopedEnv term("TERM", "xterm");
    EXPECT_TRUE(use_color(options, pty.stream()));
  }
}

TEST(LoadConfig, WarningsGoToStderrAndTheValuesAreKept) {
  ConfigFixture fixture("[activity]\nbusy_util_pct = 45\nmystery = 1\n");
  const auto [loaded, err] = testing::load_printing(fixture.global);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->config.activity.busy_util_pct, 45U);
  EXPECT_EQ(err, "tarmac: warning: " + fixture.global.config + ":3: unknown key 'activity.mystery' (ignored)\n");
}

// A key's name is the file's text: a quoted TOML key may hold any character. The warning that
// names it reached the terminal raw.
TEST(LoadConfig, AHostileKeyNameInAWarningIsShownEscaped) {
  ConfigFixture fixture("[activity]\n\"\\u001b]0;owned\\u0007\" = 1\n");
  const auto [loaded, err] = testing::load_printing(fixture.global);
  ASSERT_TRUE(loaded.ok());
  EXPECT_FALSE(testing::has_raw_control(err)) << err;
  EXPECT_NE(err.find("unknown key 'activity.\\x1b]0;owned\\x07' (ignored)"), std::string::npos) << err;
}

TEST(LoadConfig, AnErrorIsPrintedAndReturned) {
  ConfigFixture fixture("[activity]\nbusy_util_pct = \"\\u001b[2J\"\n");
  const auto [loaded, err] = testing::load_printing(fixture.global);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(err.starts_with("tarmac: " + fixture.global.config + ":2:")) << err;
  EXPECT_FALSE(testing::has_raw_control(err)) << err;
  GlobalOptions missing;
  missing.config = fixture.dir() / "absent.toml";
  const auto absent = testing::load_printing(missing);
  EXPECT_FALSE(absent.loaded.ok());
  EXPECT_NE(absent.err.find("absent.toml"), std::string::npos) << absent.err;
}

TEST(PrintError, EachLineEscapedLineBreaksKept) {
  ::testing::internal::CaptureStderr();
  print_error(make_error(Error::Code::Invalid, "no 1 free GPU: 0 free of 1\n  GPU 0: leased: by m\x1b]0;x\x07"));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "tarmac: no 1 free GPU: 0 free of 1\n  GPU 0: leased: by m\\x1b]0;x\\x07\n");
}

TEST(OpenBackend, ALibraryThatIsNotThereIsAnErrorOnStderr) {
  GlobalOptions options;
  options.nvml_lib = "/nonexistent/libnvidia-ml.so.1";
  ::testing::internal::CaptureStderr();
  const auto backend = open_backend(options);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(backend.ok());
  EXPECT_TRUE(err.starts_with("tarmac: ")) << err;
}

}  // namespace
}  // namespace tarmac::cli
