// `tarmac-sim run`: a simulation around one command (or held open for tests).
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <optional>
#include <thread>

#include "clock.hpp"
#include "commands.hpp"
#include "fault_rule.hpp"
#include "faults.hpp"
#include "registry.hpp"
#include "scenario_parser.hpp"
#include "scenario_paths.hpp"
#include "supervisor.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sim::launcher {

namespace fs = std::filesystem;

namespace {

volatile sig_atomic_t g_signal = 0;
extern "C" void on_launcher_signal(int signo) { g_signal = signo; }

enum class Driver { Current, Old };

struct RunOptions {
  std::string scenario;
  double speed = 1.0;
  Driver driver = Driver::Current;
  std::optional<fs::path> state;
  std::vector<std::string> faults;
  bool hold = false;
  std::vector<std::string> command;
};

int fail(const std::string& message) {
  std::fprintf(stderr, "tarmac-sim: %s\n", message.c_str());
  return kExitLauncherError;
}

std::optional<std::string> parse_options(const Args& args, RunOptions& o) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      o.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    // Options take their value as the next word or after '='.
    std::string name = a;
    std::optional<std::string> inline_value;
    if (const auto eq = a.find('='); a.starts_with("--") && eq != std::string::npos) {
      name = a.substr(0, eq);
      inline_value = a.substr(eq + 1);
    }
    auto value = [&]() -> std::optional<std::string> {
      if (inline_value) return inline_value;
      if (i + 1 < args.size()) return args[++i];
      return std::nullopt;
    };
    if (name == "--hold") {
      o.hold = true;
      continue;
    }
    if (name != "--scenario" && name != "--speed" && name != "--driver" && name != "--state" && name != "--fault") {
      return fmt::format("unknown option '{}' (the command goes after '--')", a);
    }
    const auto v = value();
    if (!v) return fmt::format("{} needs a value", name);
    if (name == "--scenario") {
      o.scenario = *v;
    } else if (name == "--speed") {
      const auto speed = util::parse_double(*v);
      if (!speed || *speed <= 0) return fmt::format("--speed: '{}' is not a positive number", *v);
      o.speed = *speed;
    } else if (name == "--driver") {
      if (*v != "current" && *v != "old") return fmt::format("--driver: '{}' is neither current nor old", *v);
      o.driver = *v == "old" ? Driver::Old : Driver::Current;
    } else if (name == "--state") {
      o.state = fs::path(*v);
    } else {
      o.faults.push_back(*v);
    }
  }
  if (o.scenario.empty()) return std::string("--scenario NAME|FILE is required");
  if (o.command.empty() && !o.hold) return std::string("give a command after '--', or --hold");
  if (!o.command.empty() && o.hold) return std::string("--hold and a command exclude each other");
  return std::nullopt;
}

// The simulated library of the chosen driver: TARMAC_SIM_LIB_DIR, next to this program, or in
// ../lib/tarmac/sim (an installed layout); the old driver lives in old-driver/ below it.
std::optional<fs::path> find_library_dir(Driver driver) {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("TARMAC_SIM_LIB_DIR"); env != nullptr && *env != '\0') candidates.emplace_back(env);
  candidates.push_back(exe_dir());
  candidates.push_back(exe_dir() / ".." / "lib" / "tarmac" / "sim");
  for (fs::path dir : candidates) {
    if (driver == Driver::Old) dir /= "old-driver";
    std::error_code ec;
    if (fs::exists(dir / "libnvidia-ml.so.1", ec)) return fs::weakly_canonical(dir, ec);
  }
  return std::nullopt;
}

std::optional<fs::path> find_load_program() {
  if (const char* env = std::getenv("TARMAC_SIM_LOAD"); env != nullptr && *env != '\0') return fs::path(env);
  std::error_code ec;
  const fs::path p = exe_dir() / "tarmac-sim-load";
  if (fs::exists(p, ec)) return p;
  return std::nullopt;
}

// Empties what a previous simulation left in a reused --state directory.
void clear_state(const StateDir& state) {
  std::error_code ec;
  for (const fs::path& dir : {state.procs(), state.uses(), state.bin()}) fs::remove_all(dir, ec);
  for (const fs::path& file : {state.faults(), state.ready(), state.clock(), state.scenario()}) fs::remove(file, ec);
}

pid_t start_command(const RunOptions& o, const fs::path& lib_dir, const StateDir& state) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  std::string ld = lib_dir.string();
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0') ld += std::string(":") + old;
  ::setenv("LD_LIBRARY_PATH", ld.c_str(), 1);
  ::setenv("TARMAC_NVML_LIB", (lib_dir / "libnvidia-ml.so.1").c_str(), 1);
  ::setenv("TARMAC_SIM_STATE", state.root().c_str(), 1);
  ::unsetenv("TARMAC_SIM_SCENARIO");
  std::vector<char*> argv;
  for (const std::string& s : o.command) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "tarmac-sim: cannot run %s: %s\n", argv[0], std::strerror(errno));
  ::_exit(errno == ENOENT ? 127 : 126);
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitLauncherError;
}

// What to simulate: the scenario, its text (copied into the state directory) and the --fault rules.
struct Simulation {
  std::string text;
  Scenario scenario;
  std::vector<FaultRule> faults;
};

Result<Simulation> load_simulation(const RunOptions& o) {
  TARMAC_TRY_ASSIGN(const fs::path file, resolve_scenario(o.scenario, exe_dir()));
  Simulation sim;
  TARMAC_TRY_ASSIGN(sim.text, read_file(file));
  TARMAC_TRY_ASSIGN(sim.scenario, parse_scenario(sim.text, file.string()));
  for (const std::string& spec : o.faults) {
    TARMAC_TRY_ASSIGN(auto rule, parse_fault_spec(spec, sim.scenario.gpus.size(), 0));
    sim.faults.push_back(std::move(rule));
  }
  return sim;
}

// The state directory: the one asked for, or a private temporary one (removed at the end).
Result<fs::path> state_root(const RunOptions& o) {
  if (o.state) return fs::absolute(*o.state);
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tarmac-sim-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return make_error(Error::Code::Io, fmt::format("mkdtemp: {}", std::strerror(errno)));
  }
  return fs::path(pattern);
}

// An empty state directory with the scenario, the --fault rules and the clock in it.
Result<void> prepare_state(const StateDir& state, const Simulation& sim, const SimClock& clock) {
  clear_state(state);
  TARMAC_TRY(state.create());
  TARMAC_TRY(write_file_atomic(state.scenario(), sim.text));
  for (const FaultRule& rule : sim.faults) TARMAC_TRY(append_runtime_fault(state, rule));
  return write_clock_file(state.clock(), clock.spec());
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// Reaps every child that has exited: the command (its exit status into `status`, and -1 into
// `command`), or a load program the supervisor restarts or forgets.
void reap_children(Supervisor& supervisor, pid_t& command, int& status) {
  for (;;) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid <= 0) return;
    if (pid == command) {
      status = exit_status(st);
      command = -1;
    } else {
      supervisor.on_exit(pid);
    }
  }
}

// Load programs killed with SIGKILL leave their registry file behind: tidy up.
void forget_stale_processes(const StateDir& state) {
  std::vector<pid_t> stale;
  (void)read_live_processes(state.procs(), &stale);
  for (pid_t pid : stale) unregister_process(state.procs(), pid);
}

// Runs the simulation until the command ends (or, with --hold, until a signal); the command's
// exit status.
int supervise(const RunOptions& o, Supervisor& supervisor, const SimClock& clock, const StateDir& state,
              pid_t command) {
  int status = 0;
  bool forwarded = false;
  auto last_gc = std::chrono::steady_clock::now();
  while (true) {
    reap_children(supervisor, command, status);
    if (!o.command.empty() && command < 0) break;  // the command has finished
    if (g_signal != 0) {
      if (o.hold) break;
      // Ctrl-C already reached the command (same process group); other signals are passed on.
      if (!forwarded && g_signal != SIGINT && command > 0) ::kill(command, g_signal);
      forwarded = true;
    }
    if (auto r = supervisor.tick(clock.seconds()); !r) std::fprintf(stderr, "tarmac-sim: %s\n", r.error().message.c_str());
    if (std::chrono::steady_clock::now() - last_gc > std::chrono::seconds(1)) {
      forget_stale_processes(state);
      last_gc = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status;
}

}  // namespace

int run_command(const Args& args) {
  RunOptions o;
  if (auto problem = parse_options(args, o)) {
    std::fprintf(stderr, "tarmac-sim run: %s\n", problem->c_str());
    return kExitUsage;
  }
  auto sim = load_simulation(o);
  if (!sim) return fail(sim.error().message);
  const auto lib_dir = find_library_dir(o.driver);
  if (!lib_dir) return fail("cannot find the simulated libnvidia-ml.so.1 (set TARMAC_SIM_LIB_DIR)");
  const auto load_program = find_load_program();
  if (!load_program) return fail("cannot find tarmac-sim-load next to tarmac-sim (set TARMAC_SIM_LOAD)");

  auto root = state_root(o);
  if (!root) return fail(root.error().message);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } cleanup{o.state ? fs::path() : *root};
  const StateDir state(*root);
  const long long start = realtime_ns();
  const SimClock clock(ClockSpec{start, o.speed, sim->scenario.epoch_ns.value_or(start)});
  if (auto r = prepare_state(state, *sim, clock); !r) return fail(r.error().message);
  install_signal_handlers();

  Supervisor supervisor(sim->scenario, state, *load_program);
  if (auto r = supervisor.tick(clock.seconds()); !r) return fail(r.error().message);
  if (auto r = write_file_atomic(state.ready(), fmt::format("{}\n", ::getpid())); !r) return fail(r.error().message);
  if (o.hold) {
    std::printf("%s\n", root->c_str());  // where tests and tools find the simulation
    std::fflush(stdout);
  }
  const pid_t command = o.command.empty() ? -1 : start_command(o, *lib_dir, state);  // -1: none running
  const int status = supervise(o, supervisor, clock, state, command);
  supervisor.stop_all(2000);
  return o.hold ? 0 : status;
}

}  // namespace tarmac::sim::launcher
