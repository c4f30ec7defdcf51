// The command-line entry point: parses arguments and runs a subcommand. Every exception stops
// here and becomes a message and an exit code.
#pragma once

namespace tarmac::cli {

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

}  // namespace detail

}  // namespace tarmac::cli
