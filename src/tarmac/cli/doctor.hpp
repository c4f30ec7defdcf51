// `tarmac doctor`: samples the GPUs over a window, reads the environment and reports findings
// (docs/doctor.md). Exit 0 healthy, 1 warnings, 2 a critical finding, 3 could not look.
#pragma once

#include <CLI/CLI.hpp>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_doctor_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
