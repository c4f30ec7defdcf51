#include "tarmac/cli/context.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>

#include "tarmac/util/escape.hpp"

namespace tarmac::cli {

bool use_color(const GlobalOptions& options, std::FILE* stream) {
  if (options.no_color) return false;
  if (const char* no_color = std::getenv("NO_COLOR"); no_color != nullptr && *no_color != '\0') return false;
  if (const char* term = std::getenv("TERM"); term != nullptr && std::string_view(term) == "dumb") return false;
  return isatty(fileno(stream)) != 0;
}

Result<std::unique_ptr<gpu::Backend>> open_backend(const GlobalOptions& options) {
  auto backend = gpu::open_nvml_backend(options.nvml_lib);
  if (!backend.ok()) print_error(backend.error());
  return backend;
}

std::string nvml_source(const GlobalOptions& options) {
  std::string library = options.nvml_lib;
  if (library.empty()) {
    const char* env = std::getenv("TARMAC_NVML_LIB");
    library = env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
  }
  if (library.find('/') != std::string::npos) {
    std::error_code ec;
    const auto absolute = std::filesystem::weakly_canonical(library, ec);
    if (!ec) library = absolute.string();
  }
  const char* sim = std::getenv("TARMAC_SIM_STATE");
  return library + "\n" + (sim != nullptr ? sim : "");
}

Result<config::Loaded> load_config(const GlobalOptions& options) {
  auto loaded = config::load(options.config.empty() ? std::nullopt : std::optional<std::string>(options.config));
  if (!loaded.ok()) {
    print_error(loaded.error());
    return loaded;
  }
  // A warning quotes the file (an unknown key's name): shown escaped, as the file is anybody's text.
  for (const auto& w : loaded->warnings) fmt::print(stderr, "tarmac: warning: {}\n", util::terminal_text(w));
  return loaded;
}

// Messages quote paths, flags' values and what other programs answered: each line is escaped.
void print_error(const Error& error) { fmt::print(stderr, "tarmac: {}\n", util::terminal_lines(error.message)); }

}  // namespace tarmac::cli
