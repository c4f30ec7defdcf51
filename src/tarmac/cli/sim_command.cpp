#include "tarmac/cli/sim_command.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "tarmac/cli/app.hpp"

namespace tarmac::cli {

namespace fs = std::filesystem;

std::string find_sim_launcher() {
  if (const char* env = std::getenv("TARMAC_SIM_LAUNCHER"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "tarmac-sim";
  const fs::path dir = self.parent_path();
  for (const fs::path& candidate : {dir / "sim" / "tarmac-sim", dir / ".." / "lib" / "tarmac" / "tarmac-sim"}) {
    if (fs::exists(candidate, ec)) return candidate.lexically_normal().string();
  }
  return "tarmac-sim";  // last resort: the search path
}

int exec_sim(const std::vector<std::string>& args) {
  const std::string launcher = find_sim_launcher();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(launcher.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(launcher.c_str(), argv.data());
  fmt::print(stderr,
             "tarmac: cannot start the NVML simulator launcher {}: {}\n"
             "It is built with tarmac (build/sim/tarmac-sim); set TARMAC_SIM_LAUNCHER to its path.\n",
             launcher, std::strerror(errno));
  return kExitCouldNotLook;
}

}  // namespace tarmac::cli
