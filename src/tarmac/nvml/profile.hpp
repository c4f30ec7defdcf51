// Where the time of a command goes in the driver: with TARMAC_NVML_PROFILE set, every NVML call is
// timed and, when the process exits, a table of the calls (count, total, slowest) goes to stderr,
// slowest total first. For a driver on which a command is slower than it should be (README,
// docs/ARCHITECTURE.md); off, it costs nothing.
#pragma once

#include <cstdint>
#include <string>

#include "tarmac/nvml/library.hpp"

namespace tarmac::nvml {

// Whether TARMAC_NVML_PROFILE asks for the table.
[[nodiscard]] bool profile_wanted();

// Replaces each entry point of `fn` with one that times the call and then makes it; the first call
// has the table printed at exit.
void profile_calls(Functions& fn);

// Counts `ns` as the library's load (dlopen), which no entry point covers.
void profile_load(std::int64_t ns);

// The table, one line per function called: name, calls, total ms, slowest ms.
[[nodiscard]] std::string profile_table();

}  // namespace tarmac::nvml
