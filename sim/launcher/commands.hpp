// tarmac-sim's subcommands. Each takes the arguments after its name and returns the exit status.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tarmac::sim::launcher {

using Args = std::vector<std::string>;

// Exit status for the launcher's own failures (as env(1) and timeout(1) use 125), so that
// they cannot be mistaken for the command's exit status.
inline constexpr int kExitLauncherError = 125;
inline constexpr int kExitUsage = 2;

int run_command(const Args& args);     // run --scenario X [...] -- CMD...
int list_command(const Args& args);    // list
int fault_command(const Args& args);   // fault --state DIR SPEC...
int check_command(const Args& args);   // check FILE|NAME...
int status_command(const Args& args);  // status --state DIR

// The directory of the running executable (bundled scenarios, libraries and the load program
// are found relative to it).
[[nodiscard]] std::filesystem::path exe_dir();

}  // namespace tarmac::sim::launcher
