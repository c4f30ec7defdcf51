#include "test_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "clock.hpp"
#include "faults.hpp"
#include "scenario_parser.hpp"
#include "state_dir.hpp"

namespace tarmac::sim::test {

Scenario mixed_models() {
  auto s = load_scenario_file(test_data("mixed-models.toml").string());
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : Scenario{};
}

fs::path sim_library() { return TARMAC_TEST_SIM_LIBRARY; }
fs::path old_sim_library() { return TARMAC_TEST_OLD_SIM_LIBRARY; }
fs::path launcher() { return TARMAC_TEST_LAUNCHER; }
fs::path load_program() { return TARMAC_TEST_LOAD_PROGRAM; }
fs::path bundled_scenario(const std::string& name) { return fs::path(TARMAC_TEST_SCENARIO_DIR) / (name + ".toml"); }
fs::path test_data(const std::string& name) { return fs::path(TARMAC_TEST_DATA_DIR) / name; }

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "tarmac-sim-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void make_state_dir(const fs::path& dir, const fs::path& scenario_file, double speed,
                    const std::vector<std::string>& runtime_faults) {
  const StateDir state(dir);
  if (!state.create()) throw std::runtime_error("cannot create the state directory");
  write_text(state.scenario(), read_text(scenario_file));
  const long long now = realtime_ns();
  if (!write_clock_file(state.clock(), ClockSpec{now, speed, now})) throw std::runtime_error("clock");
  std::string faults;
  for (const std::string& f : runtime_faults) faults += f + "\n";
  write_text(state.faults(), faults);
}

Sleeper::Sleeper() {
  pid_ = ::fork();
  if (pid_ == 0) {
    for (;;) ::pause();
  }
}

Sleeper::~Sleeper() { kill_and_reap(); }

void Sleeper::kill_and_reap() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

namespace {

[[noreturn]] void exec_child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                             int out_fd) {
  ::dup2(out_fd, 1);
  ::dup2(out_fd, 2);
  for (const auto& [key, value] : env) {
    if (value.empty()) {
      ::unsetenv(key.c_str());
    } else {
      ::setenv(key.c_str(), value.c_str(), 1);
    }
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  ::_exit(127);
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, int timeout_ms) {
  TempDir tmp;
  const fs::path log = tmp.path() / "out";
  const pid_t pid = spawn(argv, env, log);
  RunResult result;
  const auto status = wait_exit(pid, timeout_ms);
  if (!status) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    result.status = -1;
  } else {
    result.status = *status;
  }
  result.out = read_text(log);
  return result;
}

pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, const fs::path& log) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(argv, env, fd);
  ::close(fd);
  return pid;
}

std::optional<int> wait_exit(pid_t pid, int timeout_ms) {
  std::optional<int> result;
  eventually(
      [&] {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) != pid) return false;
        result = decode(status);
        return true;
      },
      timeout_ms);
  return result;
}

NvmlLibrary::NvmlLibrary(const fs::path& file) {
  handle_ = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) throw std::runtime_error(std::string("dlopen: ") + dlerror());
}

NvmlLibrary::~NvmlLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

}  // namespace tarmac::sim::test
