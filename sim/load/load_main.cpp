// tarmac-sim-load: a process that a running simulation shows as a GPU compute process.
//
// Started by hand (or by a scheduler under test) with TARMAC_SIM_STATE set, it appears on the
// GPUs its CUDA_VISIBLE_DEVICES names, using --mem and --util, until it exits. Started by the
// launcher as a scenario process (TARMAC_SIM_SCENARIO_PROCESS set), it only has to exist: argv is
// the scenario's command line and the launcher has registered it.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <string>
#include <thread>

#include "cuda_visible.hpp"
#include "registry.hpp"
#include "simulation.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace {

namespace sim = tarmac::sim;
namespace util = tarmac::util;

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_usr1 = 0;
extern "C" void on_signal(int signo) { g_signal = signo; }
extern "C" void on_usr1(int) { g_usr1 = 1; }

constexpr int kExitUsage = 2;
constexpr int kExitCudaError = 3;  // what a CUDA program dying on a CUDA error would look like

struct Options {
  unsigned long long mem_mib = 1024;
  unsigned util = 50;
  unsigned enc_util = 0;
  double seconds = -1;  // < 0: until signalled
  int exit_code = 0;
  bool ignore_sigterm = false;
  bool context_on_usr1 = false;
  std::string name;
  sim::UtilSample util_sample = sim::UtilSample::Normal;
};

void usage(std::FILE* out) {
  std::fputs(
      "usage: tarmac-sim-load [--mem SIZE] [--util PCT] [--enc-util PCT] [--seconds N] [--exit-code N] [--ignore-sigterm]\n"
      "                       [--context-on-usr1]\n"
      "                       [--name NAME] [--util-sample normal|garbage|unreadable]\n"
      "Appears as a GPU compute process of the running simulation (TARMAC_SIM_STATE) on the GPUs that\n"
      "CUDA_VISIBLE_DEVICES names (CUDA_DEVICE_ORDER honoured; unset: every GPU), until it exits.\n"
      "  --mem SIZE        GPU memory on each GPU: MiB, or 512MiB, 2GiB, 1.5G (default 1024)\n"
      "  --util PCT        SM utilization it adds to each GPU, 0-100 (default 50)\n"
      "  --enc-util PCT    its per-process video encoder utilization, 0-100 (default 0)\n"
      "  --seconds N       exit after N real seconds (default: run until signalled)\n"
      "  --exit-code N     exit status when --seconds ends (default 0)\n"
      "  --ignore-sigterm  ignore SIGTERM (tests of SIGKILL escalation)\n"
      "  --context-on-usr1 create its context (appear on its GPUs) only when it gets SIGUSR1, as a\n"
      "                    program does after its imports: a listing that begins after it started\n"
      "  --name NAME       process name shown in /proc/PID/comm\n"
      "  --util-sample S   what its per-process utilization samples say: normal (default), garbage\n"
      "                    (values above 100), unreadable (the utilization calls fail on its GPUs)\n",
      out);
}

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string_view(argv[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (arg == "--context-on-usr1") {
      o.context_on_usr1 = true;
    } else if (arg == "--ignore-sigterm") {
      o.ignore_sigterm = true;
    } else if (arg == "--mem") {
      auto v = value();
      auto bytes = v ? util::parse_size_bytes(*v) : std::nullopt;
      if (!bytes) return std::nullopt;
      o.mem_mib = *bytes / util::kMiB;
    } else if (arg == "--util") {
      auto v = value();
      auto pct = v ? util::parse_int(*v) : std::nullopt;
      if (!pct || *pct < 0 || *pct > 100) return std::nullopt;
      o.util = static_cast<unsigned>(*pct);
    } else if (arg == "--enc-util") {
      auto v = value();
      auto pct = v ? util::parse_int(*v) : std::nullopt;
      if (!pct || *pct < 0 || *pct > 100) return std::nullopt;
      o.enc_util = static_cast<unsigned>(*pct);
    } else if (arg == "--seconds") {
      auto v = value();
      auto s = v ? util::parse_double(*v) : std::nullopt;
      if (!s || *s < 0) return std::nullopt;
      o.seconds = *s;
    } else if (arg == "--exit-code") {
      auto v = value();
      auto n = v ? util::parse_int(*v) : std::nullopt;
      if (!n || *n < 0 || *n > 255) return std::nullopt;
      o.exit_code = static_cast<int>(*n);
    } else if (arg == "--util-sample") {
      auto v = value();
      if (v == "normal") {
        o.util_sample = sim::UtilSample::Normal;
      } else if (v == "garbage") {
        o.util_sample = sim::UtilSample::Garbage;
      } else if (v == "unreadable") {
        o.util_sample = sim::UtilSample::Unreadable;
      } else {
        return std::nullopt;
      }
    } else if (arg == "--name") {
      auto v = value();
      if (!v || v->empty()) return std::nullopt;
      o.name = *v;
    } else {
      return std::nullopt;
    }
  }
  return o;
}

void set_name(const char* name) {
  if (name != nullptr && *name != '\0') prctl(PR_SET_NAME, name, 0, 0, 0);
}

// A scenario process: the launcher registered it; it lives until the launcher stops it.
int run_scenario_process() {
  set_name(std::getenv("TARMAC_SIM_PROCESS_NAME"));
  for (;;) pause();
}

std::optional<std::string_view> env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::nullopt : std::optional<std::string_view>(v);
}

int run_load(const Options& o) {
  const char* state = std::getenv("TARMAC_SIM_STATE");
  if (state == nullptr || *state == '\0') {
    std::fputs("tarmac-sim-load: not under a simulation: TARMAC_SIM_STATE is not set (run it from a command "
               "started by tarmac-sim)\n",
               stderr);
    return kExitUsage;
  }
  auto simulation = sim::Simulation::from_state_dir(state);
  if (!simulation) {
    std::fprintf(stderr, "tarmac-sim-load: %s\n", simulation.error().message.c_str());
    return kExitUsage;
  }
  sim::Simulation& s = **simulation;
  const auto order = sim::parse_device_order(env("CUDA_DEVICE_ORDER"));
  const std::vector<sim::VisibleDevice> devices =
      sim::visible_devices(s.scenario(), env("CUDA_VISIBLE_DEVICES"), order);
  std::vector<unsigned> gpus;
  for (const sim::VisibleDevice& d : devices) gpus.push_back(d.gpu);
  // A MIG device is the only device its process sees (visible_devices).
  const std::optional<unsigned> mig = devices.size() == 1 ? devices[0].mig : std::nullopt;
  if (gpus.empty()) {
    std::fputs("tarmac-sim-load: CUDA error: no CUDA-capable device is detected\n", stderr);
    return kExitCudaError;
  }
  const double t = s.now();
  for (unsigned g : gpus) {
    const sim::DeviceView view = s.device(g, t);
    const unsigned long long free_bytes = mig ? view.mig.at(*mig).free_bytes : view.free_bytes;
    if (o.mem_mib * util::kMiB > free_bytes) {
      std::fprintf(stderr, "tarmac-sim-load: CUDA error: out of memory: tried to allocate %llu MiB on GPU %u "
                   "(%llu MiB free)\n", o.mem_mib, g, free_bytes / util::kMiB);
      return kExitCudaError;
    }
  }
  set_name(o.name.c_str());

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  if (o.context_on_usr1) {
    // Caught from here on (SigCgt in /proc/PID/status says so to whoever sends it).
    struct sigaction usr1 {};
    usr1.sa_handler = on_usr1;
    sigemptyset(&usr1.sa_mask);
    sigaction(SIGUSR1, &usr1, nullptr);
  }
  if (o.ignore_sigterm) {
    signal(SIGTERM, SIG_IGN);
  } else {
    sigaction(SIGTERM, &sa, nullptr);
  }

  sim::LiveProcess me;
  me.pid = getpid();
  me.gpus = gpus;
  me.mig_device = mig;
  me.memory_mib = o.mem_mib;
  me.sm_util = o.util;
  me.mem_util = o.util / 2;
  me.enc_util = o.enc_util;
  me.util_sample = o.util_sample;
  const auto procs = sim::StateDir(state).procs();
  if (o.context_on_usr1) {
    while (g_usr1 == 0 && g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (g_signal != 0) return 128 + g_signal;
  }
  if (auto r = sim::register_process(procs, me); !r) {
    std::fprintf(stderr, "tarmac-sim-load: %s\n", r.error().message.c_str());
    return kExitUsage;
  }
  const auto start = std::chrono::steady_clock::now();
  while (g_signal == 0) {
    if (o.seconds >= 0 && std::chrono::steady_clock::now() - start >= std::chrono::duration<double>(o.seconds)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  sim::unregister_process(procs, me.pid);
  if (g_signal != 0) {
    // Die of the signal, as a CUDA program would, so that the parent sees WIFSIGNALED.
    signal(g_signal, SIG_DFL);
    raise(g_signal);
  }
  return o.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TARMAC_SIM_SCENARIO_PROCESS") != nullptr) return run_scenario_process();
  const auto options = parse(argc, argv);
  if (!options) {
    usage(stderr);
    return kExitUsage;
  }
  return run_load(*options);
}
