// `tarmac sim ...`: runs a command against the NVML simulator. The simulator is a separate
// program (sim/, never linked into tarmac); this finds its launcher and hands it the arguments.
#pragma once

#include <string>
#include <vector>

namespace tarmac::cli {

// Where the simulator launcher is: $TARMAC_SIM_LAUNCHER, else beside the tarmac binary
// (<dir>/sim/tarmac-sim in a build tree, <prefix>/lib/tarmac/tarmac-sim when installed).
[[nodiscard]] std::string find_sim_launcher();

// Replaces this process with the launcher given `args` (what followed `sim`); returns an exit
// code only when that fails.
[[nodiscard]] int exec_sim(const std::vector<std::string>& args);

}  // namespace tarmac::cli
