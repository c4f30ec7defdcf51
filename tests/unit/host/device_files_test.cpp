#include "tarmac/host/device_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "fake_proc.hpp"
#include "tarmac/host/proc_reader.hpp"

namespace tarmac::host {
namespace {

using test_support::FakeProc;
using test_support::stat_line;

// root/<pid>/fd/<fd> as a symlink to `target`, as the kernel shows an open file.
void open_file(const FakeProc& proc, unsigned pid, int fd, const std::string& target) {
  const auto dir = std::filesystem::path(proc.root()) / std::to_string(pid) / "fd";
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink(target, dir / std::to_string(fd));
}

TEST(DeviceFiles, FindsEveryProcessWithANvidiaFileOpen) {
  FakeProc proc;
  proc.write("self/stat", stat_line(1, "self", 'S', 0, 1));
  open_file(proc, 100, 3, "/dev/nvidiactl");
  open_file(proc, 100, 4, "/dev/nvidia0");
  open_file(proc, 100, 5, "/dev/nvidia0");  // the same file twice is listed once
  open_file(proc, 100, 6, "/home/alice/data.bin");
  open_file(proc, 101, 3, "/dev/nvidia-uvm");  // a worker with only the shared files
  open_file(proc, 102, 1, "/dev/null");        // nothing of NVIDIA's
  open_file(proc, 103, 9, "socket:[12345]");
  const auto holders = device_file_holders(proc.root());
  ASSERT_EQ(holders.size(), 2U);
  EXPECT_EQ(holders[0].pid, 100U);
  EXPECT_EQ(holders[0].devices, (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidiactl"}));
  EXPECT_EQ(holders[1].pid, 101U);
  EXPECT_EQ(holders[1].devices, (std::vector<std::string>{"/dev/nvidia-uvm"}));
}

TEST(DeviceFiles, AMissingRootIsNobody) { EXPECT_TRUE(device_file_holders("/nonexistent-proc-root").empty()); }

TEST(DeviceFiles, GpuMinor) {
  EXPECT_EQ(gpu_minor_of("/dev/nvidia3"), 3U);
  EXPECT_EQ(gpu_minor_of("/dev/nvidia12"), 12U);
  EXPECT_FALSE(gpu_minor_of("/dev/nvidiactl"));
  EXPECT_FALSE(gpu_minor_of("/dev/nvidia-uvm"));
  EXPECT_FALSE(gpu_minor_of("/dev/nvidia"));
  EXPECT_FALSE(gpu_minor_of("/dev/nvidia0x"));
  EXPECT_FALSE(gpu_minor_of("/dev/sda"));
}

TEST(Identity, PidStartTimeAndBoot) {
  FakeProc proc;
  proc.write("stat", "btime 1700000000\n");
  proc.write("sys/kernel/random/boot_id", "7ea22386-558b-41b0-a17e-40e55d81ed12\n");
  proc.write("200/stat", stat_line(200, "python3", 'S', 1, 4242));
  const ProcReader reader(proc.root());
  const auto id = reader.identity(200);
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, (ProcessIdentity{200, 4242, "7ea22386-558b-41b0-a17e-40e55d81ed12"}));
  EXPECT_FALSE(reader.identity(201));
  proc.write("200/stat", stat_line(200, "python3", 'S', 1, 4243));  // the pid reused
  EXPECT_NE(*reader.identity(200), *id);
}

TEST(Identity, TheRealProcessHasOne) {
  const ProcReader reader;
  const auto id = reader.identity(static_cast<unsigned>(getpid()));
  ASSERT_TRUE(id);
  EXPECT_FALSE(id->boot_id.empty());
  EXPECT_TRUE(reader.in_host_pid_namespace().has_value());
}

TEST(Identity, HostPidNamespace) {
  FakeProc proc;
  proc.write("self/status", "Name:\ttarmac\nNSpid:\t4242\n");
  EXPECT_EQ(ProcReader(proc.root()).in_host_pid_namespace(), true);
  proc.write("self/status", "Name:\ttarmac\nNSpid:\t4242\t7\n");  // in a container's namespace
  EXPECT_EQ(ProcReader(proc.root()).in_host_pid_namespace(), false);
  proc.write("self/status", "Name:\ttarmac\n");  // a kernel that does not say
  EXPECT_FALSE(ProcReader(proc.root()).in_host_pid_namespace().has_value());
}

}  // namespace
}  // namespace tarmac::host

namespace tarmac::host {
namespace {

// C1 of issue 15's review: whether a process has a device open is fstat of its descriptors, by
// device number (a GPU's file is 195:minor; the tests use /dev/null and /dev/zero, which exist).
TEST(HoldsDevice, ByTheDeviceNumberOfAnOpenDescriptor) {
  test_support::FakeProc proc;
  open_file(proc, 100, 0, "/dev/null");
  const auto null_device = *char_device_of("/dev/null");
  const auto zero_device = *char_device_of("/dev/zero");
  EXPECT_EQ(holds_device(proc.root(), 100, null_device, {}, "/dev/null"), Holding::Holds);
  EXPECT_EQ(holds_device(proc.root(), 100, zero_device, {}, "/dev/null"), Holding::NotHeld);
  EXPECT_EQ(holds_device(proc.root(), 101, null_device, {}, "/dev/null"), Holding::Unknown) << "no fd directory: not proven";
  EXPECT_EQ(holds_device(proc.root(), 100, null_device), Holding::NotHeld) << "/dev/null is no NVIDIA file: not stat'ed";
  EXPECT_FALSE(char_device_of("/tmp"));
}

// N3 of the second review: a descriptor under /dev/shm (where any user can mount FUSE and never
// answer) is never stat'ed. The file there is a link to the very device asked about, so a stat
// would be seen: it would answer Holds.
TEST(HoldsDevice, ADescriptorUnderDevShmIsNeverStated) {
  char name[] = "/dev/shm/tarmac-holds-XXXXXX";
  const int made = ::mkstemp(name);
  if (made < 0) GTEST_SKIP() << "/dev/shm is not writable here";
  ::close(made);
  ::unlink(name);
  ASSERT_EQ(::symlink("/dev/null", name), 0);
  test_support::FakeProc proc;
  open_file(proc, 100, 0, name);
  const auto null_device = *char_device_of("/dev/null");
  const Holding seen = holds_device(proc.root(), 100, null_device, {}, "/dev/null");
  ::unlink(name);
  EXPECT_EQ(seen, Holding::NotHeld);
}

TEST(HoldsDevice, OnlyNvidiasOwnNamesAreStatable) {
  for (const char* yes : {"/dev/nvidia0", "/dev/nvidia15", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) {
    EXPECT_TRUE(statable_device_link(yes)) << yes;
  }
  for (const char* no : {"/dev/shm/x", "/dev/nvidia0/../shm/x", "/dev/nvidia-uvm/../shm/x", "/dev/nvidia-caps/nvidia-cap1",
                         "/dev/null", "/tmp/dev/nvidia0", "/dev/nvidiactl2", "socket:[1]", ""}) {
    EXPECT_FALSE(statable_device_link(no)) << no;
  }
  EXPECT_TRUE(statable_device_link("/dev/null", "/dev/null"));
  EXPECT_FALSE(statable_device_link("/dev/zero", "/dev/null"));
}

TEST(HoldsDevice, ABoundReachedFirstIsUnknownNeverNotHeld) {
  test_support::FakeProc proc;
  for (int fd = 0; fd < 10; ++fd) open_file(proc, 100, fd, "/dev/zero");
  const auto null_device = *char_device_of("/dev/null");
  EXPECT_EQ(holds_device(proc.root(), 100, null_device, {}, "/dev/zero"), Holding::NotHeld);
  EXPECT_EQ(holds_device(proc.root(), 100, null_device, FdScanBounds{5, 1000}, "/dev/zero"), Holding::Unknown);
  EXPECT_EQ(holds_device(proc.root(), 100, null_device, FdScanBounds{100, -1}, "/dev/zero"), Holding::Unknown) << "out of time";
}

// The reader's own descriptors, before, while and after one is open: /dev/full, which nothing
// else in this test has open (checked first, so the test cannot pass on a descriptor it did not open).
TEST(HoldsDevice, AReadersOwnDescriptors) {
  const ProcReader proc("/proc", "/dev/full");
  const auto self = static_cast<unsigned>(getpid());
  const auto full_device = *char_device_of("/dev/full");
  ASSERT_EQ(proc.holds_device(self, full_device), Holding::NotHeld);
  const int fd = ::open("/dev/full", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(proc.holds_device(self, full_device), Holding::Holds);
  EXPECT_EQ(ProcReader().holds_device(self, full_device), Holding::NotHeld) << "without the test path: never stat'ed";
  ::close(fd);
  EXPECT_EQ(proc.holds_device(self, full_device), Holding::NotHeld);
  EXPECT_EQ(proc.live_threads(self).value_or(0) >= 1, true);
}

}  // namespace
}  // namespace tarmac::host
