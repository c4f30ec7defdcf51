// How long starting a process blocks its caller when the caller looks like the agent: a heap of
// range(0) MiB, touched, and a few idle threads. util::start_process (clone with CLONE_VM |
// CLONE_VFORK) against what the scheduler used before: posix_spawn (the job wrapper) and fork +
// execve (a job, the alert command). The time is the caller's, from the call until it may go on
// (for fork: until fork returns).
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tarmac/util/process.hpp"

extern char** environ;

namespace {

// A heap and threads as the agent has them, for the benchmarks of one size.
class AgentLike {
 public:
  explicit AgentLike(std::size_t heap_mib) : heap_(heap_mib << 20) {
    std::memset(heap_.data(), 1, heap_.size());  // touched: its pages are mapped
    for (int i = 0; i < 4; ++i) {
      threads_.emplace_back([this] {
        while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      });
    }
  }
  AgentLike(const AgentLike&) = delete;
  AgentLike& operator=(const AgentLike&) = delete;
  ~AgentLike() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::vector<char> heap_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
};

char* const kArgv[] = {const_cast<char*>("true"), nullptr};

void reap(pid_t pid) {
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
}

// The time is the caller's blocked time; the counter to_end_us adds the wait until /bin/true has
// ended and been reaped (comparable between fork, which returns before the exec, and the others).
template <typename Start>
void measure(benchmark::State& state, Start start) {
  const AgentLike agent(static_cast<std::size_t>(state.range(0)));
  double to_end_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = start();
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    if (pid <= 0) state.SkipWithError("cannot start /bin/true");
    reap(pid);
    to_end_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  state.counters["to_end_us"] = benchmark::Counter(to_end_s * 1e6 / static_cast<double>(state.iterations()));
}

void BM_StartProcess(benchmark::State& state) {
  tarmac::util::ProcessSpec spec;
  spec.path = "/bin/true";
  spec.argv = {"true"};
  spec.env = tarmac::util::own_environment();
  spec.fds = {{0, tarmac::util::kDevNull}, {1, 1}, {2, 2}};
  spec.session = tarmac::util::Session::NewSession;
  measure(state, [&] {
    auto child = tarmac::util::start_process(spec);
    return child.ok() ? child->pid : -1;
  });
}

void BM_PosixSpawn(benchmark::State& state) {
  measure(state, [] {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    sigset_t all;
    sigfillset(&all);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = -1;
    const int e = ::posix_spawn(&pid, "/bin/true", &actions, &attr, kArgv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    return e == 0 ? pid : -1;
  });
}

void BM_ForkExec(benchmark::State& state) {
  measure(state, [] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::execve("/bin/true", kArgv, environ);
      ::_exit(127);
    }
    return pid;
  });
}

}  // namespace

BENCHMARK(BM_StartProcess)->Arg(16)->Arg(2048)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PosixSpawn)->Arg(16)->Arg(2048)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ForkExec)->Arg(16)->Arg(2048)->UseManualTime()->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
