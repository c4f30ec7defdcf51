// One pass of the agent's reaper, decision only (reap::survey: gather + decide, no kill), over
// 8 GPUs with 64 listed processes, each with two children that hold the device files (DataLoader
// workers), among 300 unrelated processes, with the evidence from an agent store that recorded
// idle_for (10 min) and more of history: the CPU time (getrusage, this thread's and the
// process's) of one pass against the budget of 20 ms (issue 15, "Performance"), and the
// policy's step on top. The GPUs are a fake backend and /proc a fake tree (as the unit tests do).
//
//   build/bench/reap_bench [--benchmark_repetitions=5]
//
// Counters: cpu_ms (per pass, getrusage RUSAGE_SELF user+system), budget_ratio (cpu_ms / 20).
#include <benchmark/benchmark.h>

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "tarmac/reap/pass.hpp"
#include "tarmac/reap/policy.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/units.hpp"

namespace {

using namespace tarmac;

constexpr unsigned kGpus = 8;
constexpr unsigned kHoldersPerGpu = 8;
constexpr unsigned kChildrenEach = 2;
constexpr unsigned kOthers = 300;
constexpr long long kMin = 60 * 1000;
constexpr long long kBootUnix = 1'700'000'000;
constexpr long long kTicks = 100;  // USER_HZ
constexpr double kBudgetMs = 20.0;

double cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3) +
         (static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3);
}

unsigned holder_pid(unsigned gpu, unsigned i) { return 10'000 + gpu * kHoldersPerGpu + i; }
unsigned child_pid(unsigned holder, unsigned c) { return 20'000 + (holder - 10'000) * kChildrenEach + c; }
bool busy(unsigned i) { return i % 2 == 1; }  // half the holders work, half are zombies

// A fake /proc: root/stat (btime), and per process stat, status, cmdline, comm, cgroup, environ
// and fd/ (links to /dev/nvidiaN for the holders and their children).
class FakeProc {
 public:
  explicit FakeProc(std::filesystem::path root) : root_(std::move(root)) {
    std::filesystem::create_directories(root_ / "sys/kernel/random");
    std::ofstream(root_ / "stat") << "cpu 1 2 3 4\nbtime " << kBootUnix << "\n";
    std::ofstream(root_ / "sys/kernel/random/boot_id") << "0b1d5a8e-bench\n";
    std::ofstream(root_ / "uptime") << "100000.00 1.00\n";
  }
  void add(unsigned pid, unsigned ppid, const std::string& name, std::optional<unsigned> minor) {
    const auto dir = root_ / std::to_string(pid);
    std::filesystem::create_directories(dir / "fd");
    // Started an hour after boot: old enough for reaper.min_age.
    std::ofstream(dir / "stat") << pid << " (" << name << ") S " << ppid << " " << pid << " " << pid
                                << " 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 " << 3600 * kTicks << " 0 0\n";
    std::ofstream(dir / "status") << "Name:\t" << name << "\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t" << pid << "\n";
    std::ofstream(dir / "cmdline") << "/usr/bin/python3" << '\0' << "-m" << '\0' << name << '\0';
    std::ofstream(dir / "comm") << name << "\n";
    std::ofstream(dir / "cgroup") << "0::/user.slice/user-1000.slice/session-" << pid << ".scope\n";
    std::ofstream(dir / "environ") << "HOME=/home/alice" << '\0';
    if (minor) {
      std::filesystem::create_symlink("/dev/nvidia" + std::to_string(*minor), dir / "fd" / "3");
      std::filesystem::create_symlink("/dev/nvidiactl", dir / "fd" / "4");
      // The device file reap checks a holder has open (no GPU node here: /dev/zero stands for it,
      // as in the tests; GatherOptions::device_file_override).
      std::filesystem::create_symlink("/dev/zero", dir / "fd" / "5");
    }
    std::filesystem::create_symlink("/dev/null", dir / "fd" / "0");
  }
  [[nodiscard]] std::string root() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

// 8 GPUs, each with its holders; every snapshot the same.
class EightGpus final : public gpu::Backend {
 public:
  explicit EightGpus(const host::ProcReader& proc) {
    for (unsigned g = 0; g < kGpus; ++g) {
      gpu::Device d;
      d.id.index = g;
      d.id.uuid = "GPU-bench-" + std::to_string(g);
      d.id.minor_number = g;
      d.sample.util_gpu_pct = 50;
      for (unsigned i = 0; i < kHoldersPerGpu; ++i) {
        gpu::GpuProcess p;
        p.pid = holder_pid(g, i);
        p.used_mem_bytes = 4 * util::kGiB;
        p.sm_util_pct = busy(i) ? 90U : 0U;
        p.host = proc.read(p.pid);
        d.processes.push_back(p);
      }
      snapshot_.devices.push_back(d);
    }
  }
  Result<gpu::Snapshot> snapshot(const gpu::SnapshotOptions&) override { return snapshot_; }

 private:
  gpu::Snapshot snapshot_;
};

// The agent's store with 22 minutes of history: a row when a value changed, so a zombie has one
// and a worker one per 5 s process sample.
void record_store(const std::string& path, const host::ProcReader& proc) {
  const long long now = util::wall_ms();
  store::RecorderOptions options;
  options.path = path;
  store::Recorder recorder(options);
  for (unsigned g = 0; g < kGpus; ++g) {
    recorder.add(store::GpuInfo{g, "GPU-bench-" + std::to_string(g), "H100", "00000000:07:00.0", 81559}, now);
    recorder.update(store::ActivitySpan{g, gpu::Activity::Busy, now - 22 * kMin, now - 1000});
    for (unsigned i = 0; i < kHoldersPerGpu; ++i) {
      const unsigned pid = holder_pid(g, i);
      store::ProcessSpan span;
      span.gpu = g;
      span.pid = pid;
      span.first_ms = now - 22 * kMin;
      span.last_ms = now - 1000;
      span.start_unix = proc.read(pid).start_time_unix;
      span.listed_after_start = true;  // the agent saw each listing begin (docs/reap.md, "Safety checks")
      span.user = "alice";
      recorder.update(span);
      if (busy(i)) {
        for (long long t = now - 20 * kMin; t < now; t += 5000) {
          recorder.add(store::ProcessSample{t, g, pid, 4096, 80 + (t / 5000) % 20, 30});
        }
      } else {
        recorder.add(store::ProcessSample{now - 20 * kMin, g, pid, 4096, 0, 0});
      }
    }
  }
  if (!recorder.flush().ok) std::abort();
}

struct World {
  std::filesystem::path dir;
  std::unique_ptr<host::ProcReader> proc;
  std::unique_ptr<EightGpus> gpus;
  reap::GatherOptions gather;
  reap::ReaperConfig rules;
  reap::Caller caller;

  World() {
    dir = std::filesystem::temp_directory_path() / ("tarmac-reap-bench-" + std::to_string(getpid()));
    FakeProc fake(dir / "proc");
    for (unsigned g = 0; g < kGpus; ++g) {
      for (unsigned i = 0; i < kHoldersPerGpu; ++i) {
        const unsigned pid = holder_pid(g, i);
        fake.add(pid, 1, busy(i) ? "train" : "ipykernel_launcher", g);
        for (unsigned c = 0; c < kChildrenEach; ++c) fake.add(child_pid(pid, c), pid, "pt_data_worker", g);
      }
    }
    for (unsigned i = 0; i < kOthers; ++i) fake.add(30'000 + i, 1, "sshd", std::nullopt);
    proc = std::make_unique<host::ProcReader>(fake.root(), "/dev/zero");  // the one statable path besides NVIDIA's
    gpus = std::make_unique<EightGpus>(*proc);
    gather.store_path = (dir / "tarmac.db").string();
    gather.idle_for_ms = rules.idle_for_ms;
    gather.device_file_override = host::char_device_of("/dev/zero");
    record_store(*gather.store_path, *proc);
    caller.uid = 0;
    caller.pid = 1;
  }
  ~World() { std::filesystem::remove_all(dir); }
};

World& world() {
  static World w;
  return w;
}

// The survey alone: what every reaper.interval costs the agent.
void BM_ReapSurvey(benchmark::State& state) {
  World& w = world();
  const util::SystemClock clock;
  double cpu = 0;
  for (auto _ : state) {
    const double before = cpu_ms();
    auto pass = reap::survey(*w.gpus, *w.proc, w.gather, w.rules, w.caller, clock);
    cpu += cpu_ms() - before;
    if (!pass.ok() || pass->rows.size() != kGpus * kHoldersPerGpu || pass->source != reap::EvidenceSource::Store) {
      state.SkipWithError(("the survey did not read the store's evidence for 64 processes: " +
                           (pass.ok() ? pass->store_note + " rows " + std::to_string(pass->rows.size())
                                      : pass.error().message)).c_str());
      return;
    }
    benchmark::DoNotOptimize(pass);
  }
  const double per_pass = cpu / static_cast<double>(state.iterations());
  state.counters["cpu_ms"] = per_pass;
  state.counters["budget_ratio"] = per_pass / kBudgetMs;
}
BENCHMARK(BM_ReapSurvey)->Unit(benchmark::kMillisecond)->UseRealTime();

// The survey and the policy's step: one whole agent pass when nothing is to be ended.
void BM_ReapPassWithPolicy(benchmark::State& state) {
  World& w = world();
  const util::SystemClock clock;
  reap::Policy policy(w.rules);
  double cpu = 0;
  std::size_t candidates = 0;
  for (auto _ : state) {
    const double before = cpu_ms();
    auto pass = reap::survey(*w.gpus, *w.proc, w.gather, w.rules, w.caller, clock);
    const auto plan = policy.step(*pass, reap::Killing::Off);
    cpu += cpu_ms() - before;
    candidates = pass->candidates();
    benchmark::DoNotOptimize(plan);
  }
  const double per_pass = cpu / static_cast<double>(state.iterations());
  state.counters["cpu_ms"] = per_pass;
  state.counters["budget_ratio"] = per_pass / kBudgetMs;
  state.counters["candidates"] = static_cast<double>(candidates);
}
BENCHMARK(BM_ReapPassWithPolicy)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
