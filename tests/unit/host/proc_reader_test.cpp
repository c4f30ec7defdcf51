#include "tarmac/host/proc_reader.hpp"
#include "tarmac/host/process_cache.hpp"

#include <errno.h>  // program_invocation_short_name
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <string>

#include "fake_proc.hpp"
#include "tarmac/host/bounded_read.hpp"

namespace tarmac::host {
namespace {

using namespace std::string_literals;
using test_support::FakeProc;
using test_support::kContainerId;
using test_support::stat_line;

constexpr unsigned kNoSuchUid = 3999999;  // far above any uid a test machine hands out
constexpr long long kBtime = 1700000000;

// A tree with a containerised trainer (100), its workers (102 -> 103), a Slurm task (101),
// a kernel thread (2) and a process whose files all vanished but stat (105).
void write_tree(const FakeProc& proc) {
  const long hz = sysconf(_SC_CLK_TCK);
  proc.write("stat", "cpu  1 2 3 4 5 6 7 0 0 0\nintr 1\nctxt 9\nbtime " + std::to_string(kBtime) + "\nprocesses 9\n");
  proc.write("self/stat", stat_line(1, "not a pid", 'S', 0, 0));  // non-numeric entries are skipped
  proc.write("1/stat", stat_line(1, "systemd", 'S', 0, 1));
  proc.write("2/stat", stat_line(2, "kthreadd", 'S', 0, 1));
  proc.write("2/cmdline", "");
  proc.write("100/stat", stat_line(100, "evil) (name", 'R', 1, static_cast<unsigned long long>(100 * hz)));
  proc.write("100/cmdline", "python\0train.py\0--epochs\0003\0"s);
  proc.write("100/status", "Name:\tevil) (name\nState:\tR (running)\nUid:\t0\t" + std::to_string(kNoSuchUid) +
                               "\t0\t0\nGid:\t0\t0\t0\t0\n");
  proc.write("100/cgroup", "0::/system.slice/docker-" + kContainerId + ".scope\n");
  proc.write("100/environ", "HOME=/root\0SLURM_JOB_ID=777\0"s);
  proc.write("101/stat", stat_line(101, "task", 'S', 1, 5));
  proc.write("101/status", "Uid:\t0\t0\t0\t0\n");
  proc.write("101/cgroup", "0::/system.slice/slurmstepd.scope/job_12345/step_0/user/task_0\n");
  proc.write("101/environ", "SLURM_JOB_ID=999\0"s);
  proc.write("102/stat", stat_line(102, "worker", 'S', 100, 5));
  proc.write("102/environ", "SLURM_JOBID=31\0"s);
  proc.write("103/stat", stat_line(103, "worker", 'Z', 102, 5));
  proc.write("104/stat", stat_line(104, "other", 'S', 1, 5));
  proc.write("105/stat", stat_line(105, "gone", 'S', 1, 5));
}

TEST(ProcReaderFake, ReadsEveryPiece) {
  FakeProc proc;
  write_tree(proc);
  const ProcessInfo info = ProcReader(proc.root()).read(100);
  EXPECT_EQ(info.pid, 100U);
  EXPECT_EQ(info.visibility, PidVisibility::Visible);
  EXPECT_EQ(info.name, "evil) (name");
  EXPECT_EQ(info.state, 'R');
  EXPECT_EQ(info.parent_pid, 1U);
  EXPECT_EQ(info.start_time_unix, kBtime + 100);
  EXPECT_EQ(info.command_line, "python train.py --epochs 3");
  EXPECT_EQ(info.uid, kNoSuchUid);  // the effective uid, not the real one (0)
  EXPECT_EQ(info.user, std::to_string(kNoSuchUid));  // no passwd entry: the number as text
  ASSERT_TRUE(info.container);
  EXPECT_EQ(info.container->runtime, "docker");
  EXPECT_EQ(info.container->id, kContainerId);
  EXPECT_EQ(info.slurm_job_id, "777");  // from environ, as the cgroup names no job
}

TEST(ProcReaderFake, UidWithAPasswdEntryShowsTheName) {
  FakeProc proc;
  write_tree(proc);
  EXPECT_EQ(ProcReader(proc.root()).read(101).user, "root");
}

TEST(ProcReaderFake, SlurmJobFromCgroupBeatsEnviron) {
  FakeProc proc;
  write_tree(proc);
  const ProcessInfo info = ProcReader(proc.root()).read(101);
  EXPECT_EQ(info.slurm_job_id, "12345");
  EXPECT_FALSE(info.container);
}

TEST(ProcReaderFake, OldSlurmJobidSpellingInEnviron) {
  FakeProc proc;
  write_tree(proc);
  EXPECT_EQ(ProcReader(proc.root()).read(102).slurm_job_id, "31");
}

// A hostile user's process whose memory map stays locked: its cmdline read blocks (a FIFO here).
// The read is given up at the deadline, and what cmdline and environ would have said is unknown,
// not absent: `unread` says so, and environ is not read at all (it would block as well).
TEST(ProcReaderFake, ACommandLineThatBlocksIsUnknownNotAbsent) {
  FakeProc proc;
  write_tree(proc);
  ASSERT_TRUE(proc.make_fifo("100/cmdline"));
  BoundedReader reads({20, 2});
  const ProcessInfo info = ProcReader(proc.root(), "", reads).read(100);
  ASSERT_TRUE(info.unread);
  EXPECT_NE(info.unread->find("100/cmdline"), std::string::npos) << *info.unread;
  EXPECT_FALSE(info.command_line);
  EXPECT_EQ(info.name, "evil) (name");  // stat and status do not take the lock: still read
  EXPECT_EQ(info.uid, kNoSuchUid);
  EXPECT_FALSE(info.slurm_job_id);  // environ (SLURM_JOB_ID=777) was not read
  EXPECT_EQ(reads.stuck(), 1U);
  ASSERT_TRUE(proc.release_fifo("100/cmdline"));
}

TEST(ProcReaderFake, AnEnvironmentThatBlocksIsAnErrorNotNone) {
  FakeProc proc;
  write_tree(proc);
  ASSERT_TRUE(proc.make_fifo("100/environ"));
  BoundedReader reads({20, 2});
  const ProcReader reader(proc.root(), "", reads);
  const auto value = reader.environ_value(100, "TARMAC_JOB_ID");
  ASSERT_FALSE(value.ok());
  EXPECT_NE(value.error().message.find("100/environ"), std::string::npos) << value.error().message;
  // Its command line was read; the Slurm job (environ's) is unknown: a second read of the stuck
  // file is refused at once.
  const ProcessInfo info = reader.read(100);
  EXPECT_EQ(info.command_line, "python train.py --epochs 3");
  ASSERT_TRUE(info.unread);
  EXPECT_FALSE(info.slurm_job_id);
  // A process without the file: no value, and known to have none.
  const auto none = reader.environ_value(104, "TARMAC_JOB_ID");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  ASSERT_TRUE(proc.release_fifo("100/environ"));
}

TEST(ProcReaderFake, KernelThreadHasEmptyCommandLine) {
  FakeProc proc;
  write_tree(proc);
  EXPECT_EQ(ProcReader(proc.root()).read(2).command_line, "");
}

TEST(ProcReaderFake, UnreadablePiecesStayEmpty) {
  FakeProc proc;
  write_tree(proc);
  const ProcessInfo info = ProcReader(proc.root()).read(105);
  EXPECT_EQ(info.visibility, PidVisibility::Visible);
  EXPECT_EQ(info.name, "gone");
  EXPECT_FALSE(info.user);
  EXPECT_FALSE(info.uid);
  EXPECT_FALSE(info.command_line);
  EXPECT_FALSE(info.container);
  EXPECT_FALSE(info.slurm_job_id);
}

TEST(ProcReaderFake, NoBootTimeMeansNoStartTime) {
  FakeProc proc;
  proc.write("7/stat", stat_line(7, "x", 'S', 1, 5));
  const ProcessInfo info = ProcReader(proc.root()).read(7);
  EXPECT_EQ(info.name, "x");
  EXPECT_FALSE(info.start_time_unix);
}

TEST(ProcReaderFake, AbsentPidIsNotInNamespace) {
  FakeProc proc;
  write_tree(proc);
  const ProcessInfo info = ProcReader(proc.root()).read(4242);
  EXPECT_EQ(info.pid, 4242U);
  EXPECT_EQ(info.visibility, PidVisibility::NotInNamespace);
  EXPECT_FALSE(info.name);
  EXPECT_FALSE(info.user);
}

TEST(ProcReaderFake, ChildrenAndDescendants) {
  FakeProc proc;
  write_tree(proc);
  const ProcReader reader(proc.root());
  EXPECT_EQ(reader.children(100), (std::vector<unsigned>{102}));
  EXPECT_EQ(reader.descendants(100), (std::vector<unsigned>{102, 103}));
  EXPECT_EQ(reader.children(1), (std::vector<unsigned>{100, 101, 104, 105}));
  EXPECT_EQ(reader.descendants(1), (std::vector<unsigned>{100, 101, 104, 105, 102, 103}));
  EXPECT_TRUE(reader.children(103).empty());
  EXPECT_TRUE(reader.descendants(4242).empty());
}

TEST(ProcReaderFake, CycleInTreeTerminates) {
  FakeProc proc;
  proc.write("10/stat", stat_line(10, "a", 'S', 11, 1));
  proc.write("11/stat", stat_line(11, "b", 'S', 10, 1));
  EXPECT_EQ(ProcReader(proc.root()).descendants(10), (std::vector<unsigned>{11}));
}

TEST(ProcReaderFake, MissingRoot) {
  const ProcReader reader("/nonexistent/tarmac/proc");
  EXPECT_EQ(reader.read(1).visibility, PidVisibility::NotInNamespace);
  EXPECT_TRUE(reader.children(1).empty());
}

TEST(ProcReaderReal, OwnProcess) {
  const unsigned self = static_cast<unsigned>(getpid());
  const ProcessInfo info = ProcReader().read(self);
  EXPECT_EQ(info.visibility, PidVisibility::Visible);
  EXPECT_EQ(info.uid, static_cast<unsigned>(geteuid()));
  const passwd* pw = getpwuid(geteuid());
  EXPECT_EQ(info.user, pw != nullptr ? std::string(pw->pw_name) : std::to_string(geteuid()));
  EXPECT_EQ(info.name, std::string(program_invocation_short_name).substr(0, 15));
  ASSERT_TRUE(info.command_line);
  EXPECT_NE(info.command_line->find(program_invocation_short_name), std::string::npos) << *info.command_line;
  ASSERT_TRUE(info.state);
  EXPECT_TRUE(*info.state == 'R' || *info.state == 'S') << *info.state;
  EXPECT_EQ(info.parent_pid, static_cast<unsigned>(getppid()));
  ASSERT_TRUE(info.start_time_unix);
  const long long now = std::time(nullptr);
  EXPECT_LE(*info.start_time_unix, now + 1);
  EXPECT_GT(*info.start_time_unix, now - 86400);
}

TEST(ProcReaderReal, PidBeyondPidMaxIsNotInNamespace) {
  // PID_MAX_LIMIT is 4194304 on 64-bit Linux, so no process can have this PID.
  const ProcessInfo info = ProcReader().read(4194304);
  EXPECT_EQ(info.visibility, PidVisibility::NotInNamespace);
  EXPECT_FALSE(info.command_line);
}

TEST(ProcReaderReal, ForkedChildIsFound) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  const ProcReader reader;
  const unsigned self = static_cast<unsigned>(getpid());
  const auto kids = reader.children(self);
  const auto all = reader.descendants(self);
  const ProcessInfo info = reader.read(static_cast<unsigned>(child));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_NE(std::find(kids.begin(), kids.end(), static_cast<unsigned>(child)), kids.end());
  EXPECT_NE(std::find(all.begin(), all.end(), static_cast<unsigned>(child)), all.end());
  EXPECT_EQ(info.parent_pid, self);
}

}  // namespace
}  // namespace tarmac::host

namespace tarmac::host {
namespace {

TEST(ProcessCache, ReusesFactsForTheSameProcessAndRereadsAReusedPid) {
  FakeProc proc;
  proc.write("stat", "btime 1700000000\n");
  proc.write("300/stat", stat_line(300, "python", 'R', 1, 500));
  proc.write("300/cmdline", std::string("python\0train.py\0", 16));
  ProcessCache cache(proc.root());
  EXPECT_EQ(cache.lookup(300).command_line, "python train.py");
  // Same start time: the command line is not read again, the state is.
  proc.write("300/cmdline", std::string("changed\0", 8));
  proc.write("300/stat", stat_line(300, "python", 'S', 1, 500));
  const ProcessInfo same = cache.lookup(300);
  EXPECT_EQ(same.command_line, "python train.py");
  EXPECT_EQ(same.state, 'S');
  // A new process under the same PID (another start time) is read afresh.
  proc.write("300/stat", stat_line(300, "bash", 'S', 1, 900));
  EXPECT_EQ(cache.lookup(300).command_line, "changed");
  // PIDs not looked up in a round are forgotten.
  cache.end_round();
  EXPECT_EQ(cache.size(), 1U);
  cache.end_round();
  EXPECT_EQ(cache.size(), 0U);
  // A process that vanished is reported as not visible.
  std::filesystem::remove_all(std::filesystem::path(proc.root()) / "300");
  EXPECT_EQ(cache.lookup(300).visibility, PidVisibility::NotInNamespace);
}

TEST(ProcessCache, EachLookupCarriesWhatItsStatReadSaid) {
  FakeProc proc;
  proc.write("stat", "btime 1700000000\n");
  proc.write("302/stat", "302 (python) R 1 302 302 0 -1 0 0 0 0 0 100 20 0 0 20 0 1 0 500 1000000 77");
  ProcessCache cache(proc.root());
  const ProcessInfo first = cache.lookup(302);
  EXPECT_EQ(first.start_ticks, 500ULL);
  EXPECT_EQ(first.cpu_ticks, 120ULL);
  EXPECT_EQ(first.rss_pages, 77ULL);
  // Cached facts, fresh times.
  proc.write("302/stat", "302 (python) S 1 302 302 0 -1 0 0 0 0 0 300 30 0 0 20 0 1 0 500 1000000 99");
  const ProcessInfo later = cache.lookup(302);
  EXPECT_EQ(later.cpu_ticks, 330ULL);
  EXPECT_EQ(later.rss_pages, 99ULL);
  EXPECT_EQ(later.state, 'S');
}

// A command line that could not be read in time is not kept as the process's: the next lookup
// reads it (refused at once while the earlier read is stuck, read once that one ended).
TEST(ProcessCache, FactsThatCouldNotBeReadAreReadAgain) {
  FakeProc proc;
  proc.write("stat", "btime 1700000000\n");
  proc.write("301/stat", stat_line(301, "python", 'R', 1, 500));
  ASSERT_TRUE(proc.make_fifo("301/cmdline"));
  ProcessCache cache(proc.root());
  EXPECT_TRUE(cache.lookup(301).unread);
  EXPECT_EQ(cache.size(), 0U);
  EXPECT_TRUE(cache.lookup(301).unread);
  ASSERT_TRUE(proc.release_fifo("301/cmdline"));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (BoundedReader::shared().stuck() != 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  std::filesystem::remove(std::filesystem::path(proc.root()) / "301/cmdline");
  proc.write("301/cmdline", std::string("python\0serve.py\0", 16));
  const ProcessInfo read = cache.lookup(301);
  EXPECT_FALSE(read.unread);
  EXPECT_EQ(read.command_line, "python serve.py");
  EXPECT_EQ(cache.size(), 1U);
}

}  // namespace
}  // namespace tarmac::host
