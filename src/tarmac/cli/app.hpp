// The command-line entry point: parses arguments and runs a subcommand. Every exception stops
// here and becomes a message and an exit code.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "tarmac/cli/cli_fwd.hpp"

namespace tarmac::cli {

struct GlobalOptions;

// Exit codes shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitProblems = 1;     // the command ran and found problems (warnings)
inline constexpr int kExitUsage = 2;        // bad command line or input, nothing changed
inline constexpr int kExitCouldNotLook = 3; // no driver library, NVML error

[[nodiscard]] int run(int argc, char** argv);

// The commit the binary was built from ("5aee180abcde", "+dirty" when the tree had changes,
// "unknown" outside git): `tarmac --version` names it (cmake/git_version.cmake).
[[nodiscard]] const char* git_commit();

namespace detail {

// `tarmac [global options] sim ARGS...` hands ARGS untouched to the simulator launcher, so that
// the command it runs keeps every flag (CLI11 would try to parse them). The index of "sim" in
// argv when it is the subcommand, else 0.
[[nodiscard]] int find_sim_word(int argc, char** argv);

// The options every command takes (--nvml-lib, --json, --no-color, --config), on the root.
void add_global_options(CLI::App& app, GlobalOptions& global);

// Those of them that take a value (the next argument, unless written --config=FILE): a test checks
// the list against add_global_options.
inline constexpr std::array<std::string_view, 2> kGlobalOptionsWithValues{"--nvml-lib", "--config"};

// The index in argv of the word that names the subcommand: the first argument that is neither an
// option nor a global option's value (kGlobalOptionsWithValues); 0 when there is none before "--".
[[nodiscard]] int find_command_word(int argc, char** argv);

// The top-level words one part of tarmac adds to the command line, and the function that adds
// them. Only the part a command line names is built: building every command's options and
// validators took about a millisecond and a half of each `tarmac status` (issue 20). `needs_all`:
// the part reads the whole command tree (completion, man), so every part is built with it.
struct CommandGroup {
  std::vector<std::string_view> words;
  void (*add)(CLI::App& app, const GlobalOptions& global, int& exit_code);
  bool needs_all = false;
};

// Every part, in the order `tarmac --help` lists them.
[[nodiscard]] const std::vector<CommandGroup>& command_groups();

// The groups a command line needs: the one its subcommand word names; every group for a word
// tarmac does not know (CLI11's error then lists none missing), for --help without a subcommand,
// and for a group that needs_all; only status's when there is no subcommand word (`tarmac` is
// `tarmac status`).
[[nodiscard]] std::vector<const CommandGroup*> groups_for(int argc, char** argv);

}  // namespace detail

}  // namespace tarmac::cli
