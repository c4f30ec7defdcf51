#include "supervisor.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <thread>

#include "registry.hpp"

namespace tarmac::sim::launcher {

namespace fs = std::filesystem;

namespace {

struct Identity {
  uid_t uid;
  gid_t gid;
  std::string name;
};

// The account to run a scenario process as: its user when we are root and the user exists.
std::optional<Identity> identity_for(const std::string& user) {
  if (user.empty() || ::geteuid() != 0) return std::nullopt;
  const passwd* pw = ::getpwnam(user.c_str());
  if (pw == nullptr) return std::nullopt;
  return Identity{pw->pw_uid, pw->pw_gid, pw->pw_name};
}

[[noreturn]] void child_fail(int report_fd) {
  const int err = errno;
  (void)!::write(report_fd, &err, sizeof err);
  ::_exit(127);
}

// The load program's environment: the launcher's without its TARMAC_SIM_* variables, then which
// simulation and scenario process it is, and the user it runs as.
std::vector<std::string> process_environment(const StateDir& state, unsigned index, const ProcessSpec& spec,
                                             const std::optional<Identity>& who) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    if (kv.starts_with("TARMAC_SIM_")) continue;
    env.emplace_back(kv);
  }
  env.push_back("TARMAC_SIM_STATE=" + state.root().string());
  env.push_back(fmt::format("TARMAC_SIM_SCENARIO_PROCESS={}", index));
  env.push_back("TARMAC_SIM_PROCESS_NAME=" + spec.name);
  if (who) {
    env.push_back("USER=" + who->name);
    env.push_back("LOGNAME=" + who->name);
  }
  return env;
}

// A null-terminated array of pointers into `strings`, for execve (which must not allocate after fork).
std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The registry's entry for scenario process `index`, now running as `pid`.
LiveProcess live_process(pid_t pid, unsigned index, const ProcessSpec& spec) {
  LiveProcess entry;
  entry.pid = pid;
  entry.gpus = spec.gpus;
  entry.memory_mib = spec.memory_mib;
  entry.sm_util = spec.sm_util.value_or(0);
  entry.mem_util = spec.mem_util.value_or(0);
  entry.scenario_process = index;
  entry.type = spec.type;
  return entry;
}

}  // namespace

Supervisor::Supervisor(const Scenario& scenario, StateDir state, fs::path load_program)
    : scenario_(scenario), state_(std::move(state)), load_program_(std::move(load_program)),
      slots_(scenario.processes.size()) {}

Supervisor::~Supervisor() { stop_all(0); }

Result<pid_t> Supervisor::start(unsigned index) {
  const ProcessSpec& spec = scenario_.processes[index];
  // Exec'ing a link named after the process gives it that name (/proc/PID/comm) from the first
  // instant; /proc/PID/exe still shows the load program.
  const fs::path link = state_.bin() / spec.name;
  std::error_code ec;
  if (!fs::is_symlink(link, ec)) fs::create_symlink(load_program_, link, ec);
  if (ec) return make_error(Error::Code::Io, fmt::format("{}: cannot create: {}", link.string(), ec.message()));

  const std::optional<Identity> who = identity_for(spec.user);
  std::vector<std::string> env_strings = process_environment(state_, index, spec, who);
  std::vector<char*> envp = c_strings(env_strings);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv = c_strings(argv_strings);
  const std::string path = link.string();

  // The child reports a failed exec through a close-on-exec pipe: EOF means exec succeeded.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return make_error(Error::Code::Io, "pipe: " + std::string(std::strerror(errno)));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(report[0]);
    ::close(report[1]);
    return make_error(Error::Code::Io, "fork: " + std::string(std::strerror(errno)));
  }
  if (pid == 0) {
    ::close(report[0]);
    ::setpgid(0, 0);  // a Ctrl-C meant for the command does not hit the scenario's processes
    if (const int null = ::open("/dev/null", O_RDWR); null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
      if (null > 2) ::close(null);
    }
    if (who) {
      if (::initgroups(who->name.c_str(), who->gid) != 0 || ::setgid(who->gid) != 0 || ::setuid(who->uid) != 0) {
        child_fail(report[1]);
      }
    }
    // After any change of identity (which clears it): die with the launcher, even on SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(0);
    ::execve(path.c_str(), argv.data(), envp.data());
    child_fail(report[1]);
  }
  ::close(report[1]);
  int child_errno = 0;
  ssize_t n = 0;
  do {
    n = ::read(report[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n > 0) {
    ::waitpid(pid, nullptr, 0);
    return make_error(Error::Code::Io, fmt::format("cannot start scenario process '{}': {}", spec.name,
                                                   std::strerror(child_errno)));
  }
  if (auto r = register_process(state_.procs(), live_process(pid, index, spec)); !r) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return r.take_error();
  }
  return pid;
}

Result<void> Supervisor::tick(double t) {
  for (unsigned i = 0; i < slots_.size(); ++i) {
    if (scenario_.processes[i].host_pid) continue;  // another namespace's process: the library lists it
    Slot& slot = slots_[i];
    const std::optional<long long> due = scenario_.processes[i].window.occurrence(t);
    if (slot.pid && !due && !slot.stopping) {
      ::kill(*slot.pid, SIGTERM);
      slot.stopping = true;
    } else if (!slot.pid && due && slot.occurrence != due) {
      TARMAC_TRY_ASSIGN(const pid_t pid, start(i));
      slot = {pid, due, false};
    }
  }
  return {};
}

bool Supervisor::on_exit(pid_t pid) {
  for (Slot& slot : slots_) {
    if (slot.pid == pid) {
      unregister_process(state_.procs(), pid);
      slot.pid.reset();
      slot.stopping = false;
      return true;
    }
  }
  return false;
}

void Supervisor::stop_all(int grace_ms) {
  bool any = false;
  for (Slot& slot : slots_) {
    if (slot.pid) {
      ::kill(*slot.pid, SIGTERM);
      any = true;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (any) {
    any = false;
    for (Slot& slot : slots_) {
      if (!slot.pid) continue;
      if (::waitpid(*slot.pid, nullptr, WNOHANG) == *slot.pid) {
        on_exit(*slot.pid);
      } else {
        any = true;
      }
    }
    if (!any) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (Slot& slot : slots_) {
        if (!slot.pid) continue;
        ::kill(*slot.pid, SIGKILL);
        ::waitpid(*slot.pid, nullptr, 0);
        on_exit(*slot.pid);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace tarmac::sim::launcher
