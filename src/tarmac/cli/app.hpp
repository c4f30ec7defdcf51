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

}  // namespace tarmac::cli
