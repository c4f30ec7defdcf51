// CLI11's App, declared only: a header that names a command's `add_*` function does not make every
// file that includes it parse CLI11 (about 7 CPU seconds per compilation) or construct its
// validators at start-up. The files that build commands include <CLI/CLI.hpp> themselves.
#pragma once

namespace CLI {
class App;
}  // namespace CLI
