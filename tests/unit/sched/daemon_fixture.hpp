// The agent's scheduler in-process for unit tests (daemon_*_test.cpp): its socket, store, lock
// directory and job files in a temporary directory, a monotonic clock the test moves, fake GPUs, a
// stand-in for the job wrapper that ends when the test says so, and requests from another user.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "tarmac/sched/daemon.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::sched::testing {

using nlohmann::json;

// Polls `done` every 10 ms for up to 20 s (a bound that only catches hangs).
template <typename F>
bool eventually(F done) {
  using namespace std::chrono_literals;
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

// `count` idle GPUs of 80 GiB, GPU-test-0, GPU-test-1, ..., with no processes.
class FakeGpus final : public gpu::Backend {
 public:
  explicit FakeGpus(unsigned count) : count_(count) {}
  static std::string uuid(unsigned index) { return "GPU-test-" + std::to_string(index); }
  Result<gpu::Snapshot> snapshot(const gpu::SnapshotOptions&) override {
    gpu::Snapshot s;
    for (unsigned i = 0; i < count_; ++i) {
      gpu::Device d;
      d.id.index = i;
      d.id.uuid = uuid(i);
      d.id.mem_total_bytes = 80 * util::kGiB;
      d.sample.mem_used_bytes = 0;
      d.sample.mem_free_bytes = 80 * util::kGiB;
      d.sample.util_gpu_pct = 0;
      s.devices.push_back(d);
    }
    return s;
  }

 private:
  unsigned count_;
};

// A stand-in for `tarmac job-shim` (argv: job-shim SPEC): it holds the job's lock (descriptor 3) and
// writes "pid starttime" into it as the real wrapper does, says "hello" on its stdout, writes
// ID.run once it is ready for SIGTERM (wrapper_ready), and ends when the test writes ID.go: "exit CODE" writes ID.exit as the wrapper does,
// "vanish" ends without it. SIGTERM ends it as a job the wrapper stopped (143), unless the test
// wrote ID.hold (a job slow to yield: then only ID.go or SIGKILL ends it).
inline constexpr const char* kFakeWrapper = R"sh(#!/bin/sh
base=${2%.json}
trap '[ -e "$base.hold" ] || { echo "143 $(date +%s%3N)" > "$base.exit"; exit 0; }' TERM
start=$(cut -d' ' -f22 /proc/$$/stat)
echo "$$ $start" >&3
echo hello
echo "$$ $start" > "$base.run"
while [ ! -e "$base.go" ]; do
  [ -d "${base%/*}" ] || exit 0  # the test is over
  sleep 0.01
done
what=$(cat "$base.go")
case "$what" in
  exit*) echo "${what#exit } $(date +%s%3N)" > "$base.exit" ;;
esac
)sh";

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tarmac-daemon-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);  // another user's requests reach the socket
    options_.socket_path = dir_ + "/agent.sock";
    options_.lock_dir = dir_ + "/locks";
    options_.state_dir = dir_ + "/state";
    options_.db_path = dir_ + "/state/tarmac.db";
    options_.shim_exe = dir_ + "/fake-wrapper";
    std::ofstream(options_.shim_exe) << kFakeWrapper;
    ::chmod(options_.shim_exe.c_str(), 0755);
    options_.open_backend = [] { return Result<std::unique_ptr<gpu::Backend>>(std::make_unique<FakeGpus>(2)); };
    options_.monotonic_ms = [this] {
      const auto real = std::chrono::steady_clock::now() - started_;
      return now_.load() + (clock_runs_ ? std::chrono::duration_cast<std::chrono::milliseconds>(real).count() : 0);
    };
    options_.notify = [this](const LeaseNotice& n) {
      std::lock_guard lock(mutex_);
      notices_.push_back(n);
    };
  }
  void TearDown() override {
    daemon_.reset();
    std::filesystem::remove_all(dir_);  // the fake wrappers a test left running see it go, and end
  }

  // Starts the daemon with options_ (again, after stop(), on the same store and files).
  void start() {
    std::filesystem::create_directories(options_.state_dir);
    auto d = Daemon::start(options_);
    ASSERT_TRUE(d.ok()) << d.error().message;
    daemon_ = std::move(*d);
  }
  // Stops the daemon, as a crash would: running jobs keep running.
  void stop() { daemon_.reset(); }

  // A request's answer line on a new connection; an error when there is none within the bound.
  Result<std::string> ask_line(const std::string& request, const std::vector<int>& fds = {}) {
    TARMAC_TRY_ASSIGN(auto c, Connection::connect(options_.socket_path));
    TARMAC_TRY(c.send_line(request, fds));
    return c.read_line(20000);
  }
  // A request's answer ({"ok": false, "error": ...} when none came).
  json ask(const json& request) {
    auto line = ask_line(request.dump());
    if (!line.ok()) return json{{"ok", false}, {"code", "none"}, {"error", line.error().message}};
    return json::parse(*line, nullptr, false);
  }
  // The answer to `request` from a user other than root (nobody when the test runs as root, which
  // may do anything; else the test's own user, who is not root).
  json ask_as_user(const json& request) {
    if (::geteuid() != 0) return ask(request);
    json out;
    std::thread([&] {
      // Raw system calls change this thread's credentials alone; SO_PEERCRED gives the agent these.
      if (::syscall(SYS_setgroups, 0, nullptr) != 0 || ::syscall(SYS_setresgid, kNobody, kNobody, kNobody) != 0 ||
          ::syscall(SYS_setresuid, kNobody, kNobody, kNobody) != 0) {
        out = json{{"ok", false}, {"code", "none"}, {"error", "cannot become nobody"}};
        return;
      }
      out = ask(request);
    }).join();
    return out;
  }
  // The uid of ask_as_user's requests, and a uid that is neither it nor root's requests'.
  static uid_t user_uid() { return ::geteuid() == 0 ? kNobody : ::geteuid(); }
  static uid_t other_uid() { return ::geteuid() == 0 ? 0 : ::geteuid() + 1; }

  // Job or lease `id` as `jobs --all` shows it (null when it is not listed).
  json job(long long id) {
    const json answer = ask(json{{"op", "jobs"}, {"all", true}});
    for (const auto& j : answer.value("jobs", json::array())) {
      if (j.value("id", 0LL) == id) return j;
    }
    return nullptr;
  }
  std::string state_of(long long id) {
    const json j = job(id);
    return j.is_object() ? j.value("state", "") : "";
  }
  // Waits for job `id` to reach `state`; false when it does not within the bound.
  bool reaches(long long id, const std::string& state) { return eventually([&] { return state_of(id) == state; }); }

  // A detached job of `n` GPUs (plus `extra` fields) queued; its id, 0 when refused.
  long long submit(unsigned n, const json& extra = json::object()) {
    json req = {{"op", "submit"}, {"argv", {"/bin/true"}}, {"n", n}, {"detach", true}, {"cwd", "/"}};
    req.update(extra);
    const json answer = ask(req);
    EXPECT_TRUE(answer.value("ok", false)) << answer.dump();
    return answer.value("job", json::object()).value("id", 0LL);
  }
  // Job `id`'s file `ext` in the agent's job directory.
  std::string job_file(long long id, const std::string& ext) const {
    return options_.state_dir + "/jobs/" + std::to_string(id) + "." + ext;
  }
  // Whether the fake wrapper of job `id` has started (and handles SIGTERM) within the bound.
  bool wrapper_ready(long long id) const {
    return eventually([&] { return std::filesystem::exists(job_file(id, "run")); });
  }
  // Tells the fake wrapper of running job `id` how to end ("exit CODE" or "vanish").
  void end_wrapper(long long id, const std::string& how) {
    std::ofstream(job_file(id, "go")) << how;
  }
  std::string lease_file(unsigned gpu) const { return options_.lock_dir + "/gpu-" + FakeGpus::uuid(gpu) + ".lease"; }

  std::vector<LeaseNotice> notices() {
    std::lock_guard lock(mutex_);
    return notices_;
  }

  static constexpr uid_t kNobody = 65534;
  std::string dir_;
  DaemonOptions options_;
  // The agent's monotonic clock: now_, which the test moves, plus (while clock_runs_) the real time
  // since the test began, so that the loop's own timers (a pass after a job ends) come due.
  std::atomic<long long> now_{1'000'000};
  bool clock_runs_ = true;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::unique_ptr<Daemon> daemon_;
  std::mutex mutex_;
  std::vector<LeaseNotice> notices_;
};

}  // namespace tarmac::sched::testing
