// What every subcommand gets: the global options, and helpers to open the GPU backend and print.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "tarmac/config/config.hpp"
#include "tarmac/gpu/backend.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::cli {

struct GlobalOptions {
  std::string nvml_lib;  // --nvml-lib (else $TARMAC_NVML_LIB, else the loader's search path)
  bool json = false;     // --json
  bool no_color = false; // --no-color (NO_COLOR in the environment does the same)
  std::string config;    // --config
};

// Whether to colour output written to `stream`: a terminal, and neither --no-color nor NO_COLOR.
[[nodiscard]] bool use_color(const GlobalOptions& options, std::FILE* stream);

// Opens the NVML backend; on failure prints the error to stderr ("tarmac: ...").
[[nodiscard]] Result<std::unique_ptr<gpu::Backend>> open_backend(const GlobalOptions& options);

// Which NVML this process reads: the library (--nvml-lib, $TARMAC_NVML_LIB, else the driver's,
// made absolute) and the simulation ($TARMAC_SIM_STATE). A command takes an agent's live view only
// when the agent reads the same NVML: `tarmac sim -- tarmac status` on a machine whose agent reads
// the real GPUs must show the simulated ones.
[[nodiscard]] std::string nvml_source(const GlobalOptions& options);

// Loads the configuration (--config, else the default files); prints each warning to stderr
// ("tarmac: warning: file:line: ..."), and on failure the error.
[[nodiscard]] Result<config::Loaded> load_config(const GlobalOptions& options);

// Prints "tarmac: <message>" to stderr, each line of the message escaped (util::terminal_lines).
void print_error(const Error& error);

}  // namespace tarmac::cli
