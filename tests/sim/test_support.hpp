// Helpers for the simulator's tests: temporary state directories, the built programs, child
// processes and the simulated library opened with dlopen.
#pragma once

#include <dlfcn.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "scenario.hpp"
#include "tarmac/nvml/nvml_api.hpp"

namespace tarmac::sim::test {

namespace fs = std::filesystem;

inline constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

// Paths compiled in by tests/sim/CMakeLists.txt.
[[nodiscard]] fs::path sim_library();
[[nodiscard]] fs::path old_sim_library();
[[nodiscard]] fs::path launcher();
[[nodiscard]] fs::path load_program();
[[nodiscard]] fs::path bundled_scenario(const std::string& name);
[[nodiscard]] fs::path test_data(const std::string& name);

// A fresh directory, removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// tests/sim/data/mixed-models.toml, parsed (a failed test and an empty scenario if it does not).
// NVML order: 0 = RTX A6000 (8.6), 1 = H100 (9.0), 2 = A100 (8.0).
[[nodiscard]] Scenario mixed_models();

void write_text(const fs::path& file, const std::string& text);
[[nodiscard]] std::string read_text(const fs::path& file);

// Lays out a state directory (as the launcher would, without starting anything).
void make_state_dir(const fs::path& dir, const fs::path& scenario_file, double speed = 1.0,
                    const std::vector<std::string>& runtime_faults = {});

// A child that sleeps until killed; killed and reaped when it goes out of scope.
class Sleeper {
 public:
  Sleeper();
  ~Sleeper();
  Sleeper(const Sleeper&) = delete;
  Sleeper& operator=(const Sleeper&) = delete;
  [[nodiscard]] pid_t pid() const { return pid_; }
  void kill_and_reap();

 private:
  pid_t pid_ = -1;
};

struct RunResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out;  // stdout and stderr together
};

// Runs a program to completion with extra environment variables (an empty value unsets).
RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
              int timeout_ms = 20000);

// Starts a program in the background; stdout+stderr go to `log`.
pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const fs::path& log);
// Waits for a background child; nullopt when it is still running after timeout_ms.
std::optional<int> wait_exit(pid_t pid, int timeout_ms);

// Polls `done` every 10 ms for up to timeout_ms: for what another process does "soon".
template <typename Pred>
bool eventually(Pred&& done, int timeout_ms = 3000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The simulated libnvidia-ml.so.1 opened with dlopen (RTLD_LOCAL, closed at the end).
class NvmlLibrary {
 public:
  explicit NvmlLibrary(const fs::path& file = sim_library());
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;
  [[nodiscard]] void* symbol(const char* name) const { return dlsym(handle_, name); }
  template <typename Fn>
  Fn get(const char* name) const {
    return reinterpret_cast<Fn>(symbol(name));
  }

 private:
  void* handle_ = nullptr;
};

// Calls an NVML function of `lib` by name with its table signature: NVML(lib, nvmlInit_v2)().
#define NVML(lib, name) ((lib).get<tarmac::nvml::PFN_##name>(#name))

}  // namespace tarmac::sim::test
