// Whole surveys (reap/pass.hpp) over a fake /proc: what the machine's other processes can do to
// a pass (a command line whose read blocks) and which unlisted holders it shows.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>

#include "../host/fake_proc.hpp"
#include "../store/temp_dir.hpp"
#include "reap_test_support.hpp"
#include "tarmac/reap/pass.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::reap {
namespace {

using host::test_support::FakeProc;
using host::test_support::stat_line;
using test_support::kMin;
using test_support::kTestDevicePath;

constexpr const char* kUserSlice = "0::/user.slice/user-1000.slice/session-1.scope\n";

// A machine of fake processes under a fake /proc, booted two hours ago, whose GPU 0 ("GPU-f",
// minor 0) lists some of them at 0 % with 4 GiB; the GPU reads their facts through a ProcReader
// on the fake root at each snapshot, as the NVML backend does (host::ProcessCache).
class FakeMachine final : public gpu::Backend {
 public:
  FakeMachine() {
    boot_unix_ = util::wall_ms() / 1000 - 2 * 3600;
    proc_.write("stat", "cpu 1 2 3 4\nbtime " + std::to_string(boot_unix_) + "\n");
    proc_.write("sys/kernel/random/boot_id", "fake-boot\n");
  }

  // A process started a minute after boot with descriptor 0 on each of `files` (by name).
  void add(unsigned pid, unsigned ppid, const std::string& name, std::vector<std::string> files,
           const std::string& cgroup = kUserSlice) {
    const std::string dir = std::to_string(pid);
    proc_.write(dir + "/stat", stat_line(pid, name, 'S', ppid, 60ULL * static_cast<unsigned long long>(sysconf(_SC_CLK_TCK))));
    proc_.write(dir + "/status", "Name:\t" + name + "\nUid:\t1000\t1000\t1000\t1000\n");
    proc_.write(dir + "/cmdline", "/usr/bin/" + name + std::string(1, '\0'));
    proc_.write(dir + "/environ", std::string("HOME=/home/alice") + '\0');
    proc_.write(dir + "/cgroup", cgroup);
    std::filesystem::create_directories(std::filesystem::path(proc_.root()) / dir / "fd");
    for (std::size_t fd = 0; fd < files.size(); ++fd) {
      std::filesystem::create_symlink(files[fd], std::filesystem::path(proc_.root()) / dir / "fd" / std::to_string(fd));
    }
  }
  void list(unsigned pid) { listed_.push_back(pid); }

  [[nodiscard]] const FakeProc& proc() const { return proc_; }
  [[nodiscard]] host::ProcReader reader() const { return host::ProcReader(proc_.root(), kTestDevicePath); }
  [[nodiscard]] long long start_unix() const { return boot_unix_ + 60; }

  Result<gpu::Snapshot> snapshot(const gpu::SnapshotOptions&) override {
    const auto proc = reader();
    gpu::Device d;
    d.id.index = 0;
    d.id.uuid = "GPU-f";
    d.id.minor_number = 0;
    d.modes.mig_mode_current = false;
    for (const unsigned pid : listed_) {
      gpu::GpuProcess p;
      p.pid = pid;
      p.used_mem_bytes = 4 * util::kGiB;
      p.sm_util_pct = 0;
      p.mem_util_pct = 0;
      p.host = proc.read(pid);
      d.processes.push_back(p);
    }
    gpu::Snapshot s;
    s.devices.push_back(std::move(d));
    return s;
  }

 private:
  FakeProc proc_;
  long long boot_unix_ = 0;
  std::vector<unsigned> listed_;
};

// A store that recorded `pids` on GPU-f at 0 % for the last 20 minutes.
void record_idle(const std::string& path, const std::vector<unsigned>& pids, long long start_unix) {
  const long long now = util::wall_ms();
  store::RecorderOptions options;
  options.path = path;
  store::Recorder recorder(options);
  recorder.add(store::GpuInfo{0, "GPU-f", "H100", "00000000:07:00.0", 81559}, now);
  recorder.update(store::ActivitySpan{0, gpu::Activity::Holding, now - 20 * kMin, now - 1000});
  for (const unsigned pid : pids) {
    store::ProcessSpan span;
    span.gpu = 0;
    span.pid = pid;
    span.first_ms = now - 20 * kMin;
    span.last_ms = now - 1000;
    span.start_unix = start_unix;
    span.listed_after_start = true;  // the agent saw the listing begin
    recorder.update(span);
    recorder.add(store::ProcessSample{now - 20 * kMin, 0, pid, 4096, 0, 0, 0});
  }
  ASSERT_TRUE(recorder.flush().ok);
}

GatherOptions from_store(const std::string& db) {
  GatherOptions options;
  options.store_path = db;
  options.idle_for_ms = 10 * kMin;
  options.device_file_override = test_support::test_device_file();
  return options;
}

const Row* row_of(const Pass& pass, unsigned pid) {
  for (const auto& row : pass.rows) {
    if (row.evidence.process.pid == pid) return &row;
  }
  return nullptr;
}

// A user keeps their process's memory map locked (a thread stuck in a page fault on a FUSE
// mapping they serve), so that reading its /proc/PID/cmdline blocks: a FIFO nobody writes here.
// The pass (as root) must still end, and that process must not be a candidate: its command line
// may be on an allow-list. The old code read cmdline directly and never returned.
TEST(Survey, ACommandLineWhoseReadBlocksEndsThePassAndRefusesTheProcess) {
  store::test_support::TempDir dir;
  FakeMachine machine;
  machine.add(500, 1, "python3", {kTestDevicePath});
  machine.add(501, 1, "python3", {kTestDevicePath});
  ASSERT_TRUE(machine.proc().make_fifo("501/cmdline"));
  machine.list(500);
  machine.list(501);
  const std::string db = dir.path() + "/tarmac.db";
  record_idle(db, {500, 501}, machine.start_unix());
  const util::SystemClock clock;
  const auto proc = machine.reader();
  auto pass = std::async(std::launch::async, [&] {
    return survey(machine, proc, from_store(db), ReaperConfig{}, Caller{0, getpid(), {}, false}, clock);
  });
  // An event, not a timing: the pass ends (its reads are bounded) or it hangs (they are not).
  const bool ended = pass.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  // Lets the stuck reads go: the pass's own when it hangs (as often as it reads the file again),
  // else the helper's that it gave up on.
  while (pass.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    (void)machine.proc().release_fifo("501/cmdline", std::chrono::milliseconds(100));
  }
  const auto got = pass.get();
  ASSERT_TRUE(ended) << "the pass waited on a blocked read of /proc/501/cmdline";
  ASSERT_TRUE(machine.proc().release_fifo("501/cmdline"));
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_EQ(got->source, EvidenceSource::Store) << got->store_note;
  const Row* fine = row_of(*got, 500);
  const Row* blocked = row_of(*got, 501);
  ASSERT_TRUE(fine && blocked);
  EXPECT_EQ(fine->decision.reason, Reason::Candidate) << fine->decision.detail;
  EXPECT_EQ(blocked->decision.reason, Reason::Protected) << blocked->decision.detail;
  EXPECT_NE(blocked->decision.detail.find("501/cmdline"), std::string::npos) << blocked->decision.detail;
  EXPECT_EQ(got->candidates(), 1U);
}

// Its TARMAC_JOB_ID cannot be read (its environ blocks): it may name a live lease's job, so the
// job is unknown, never "none"; a lease its parent owns still says which job it is in.
TEST(Survey, AJobIdThatCannotBeReadIsUnknownNotNone) {
  FakeMachine machine;
  machine.add(700, 1, "launcher", {});
  machine.add(701, 700, "python3", {kTestDevicePath});
  machine.add(702, 1, "python3", {kTestDevicePath});
  for (const char* file : {"701/environ", "702/environ"}) ASSERT_TRUE(machine.proc().make_fifo(file));
  host::BoundedReader reads({20, 4});
  const host::ProcReader proc(machine.proc().root(), kTestDevicePath, reads);
  const std::vector<JobLease> leases{{"job-7", 700}};
  const auto in_job = tarmac_job_of(proc, 701, leases);
  ASSERT_TRUE(in_job.ok()) << in_job.error().message;
  EXPECT_EQ(*in_job, "job-7");
  const auto unknown = tarmac_job_of(proc, 702, leases);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("702/environ"), std::string::npos) << unknown.error().message;
  // Without leases there is no job to be in: nothing is read.
  EXPECT_TRUE(tarmac_job_of(proc, 702, {}).ok());
  for (const char* file : {"701/environ", "702/environ"}) ASSERT_TRUE(machine.proc().release_fifo(file));
}

// Hidden holders: unlisted processes with the GPU's files open, shown with the listed process
// they belong to (a descendant, or a process of the same container), never an unrelated one or
// one that holds only another GPU's file.
TEST(Survey, HiddenHoldersAreDescendantsAndContainerMatesOfTheGpusOwn) {
  store::test_support::TempDir dir;
  FakeMachine machine;
  const std::string docker = "0::/system.slice/docker-" + host::test_support::kContainerId + ".scope\n";
  machine.add(600, 1, "python3", {kTestDevicePath, "/dev/nvidia0"});
  machine.add(601, 600, "pt_worker", {"/dev/nvidia0", "/dev/nvidiactl"});  // its child
  machine.add(602, 601, "pt_worker", {"/dev/nvidiactl"});                  // its grandchild, the shared file alone
  machine.add(603, 600, "other_gpu", {"/dev/nvidia1"});                    // its child, another GPU's file
  machine.add(604, 1, "unrelated", {"/dev/nvidia0"});
  machine.add(610, 1, "python3", {kTestDevicePath, "/dev/nvidia0"}, docker);
  machine.add(611, 1, "sidecar", {"/dev/nvidia0"}, docker);  // same container, not a descendant
  machine.add(612, 1, "sidecar", {"/dev/nvidia0"}, "0::/system.slice/docker-" + std::string(64, 'a') + ".scope\n");
  machine.list(600);
  machine.list(610);
  const std::string db = dir.path() + "/tarmac.db";
  record_idle(db, {600, 610}, machine.start_unix());
  const util::SystemClock clock;
  const auto got = survey(machine, machine.reader(), from_store(db), ReaperConfig{}, Caller{0, getpid(), {}, false}, clock);
  ASSERT_TRUE(got.ok()) << got.error().message;
  auto shown = [&](unsigned pid) {
    std::vector<std::pair<unsigned, HiddenHolder::Relation>> out;
    for (const auto& h : row_of(*got, pid)->evidence.hidden) out.emplace_back(h.pid, h.relation);
    return out;
  };
  using R = HiddenHolder::Relation;
  EXPECT_EQ(shown(600), (std::vector<std::pair<unsigned, R>>{{601, R::Descendant}, {602, R::Descendant}}));
  EXPECT_EQ(shown(610), (std::vector<std::pair<unsigned, R>>{{611, R::SameContainer}}));
  const auto& child = row_of(*got, 600)->evidence.hidden.at(0);
  EXPECT_EQ(child.name, "pt_worker");
  EXPECT_EQ(child.uid, 1000U);
  EXPECT_EQ(child.devices, (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidiactl"}));
  EXPECT_EQ(row_of(*got, 600)->evidence.children, (std::vector<unsigned>{601, 603}));
}

}  // namespace
}  // namespace tarmac::reap
