// The registry of live GPU processes: a dead pid disappears at once, a reused pid is not
// mistaken for the process that registered.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include "proc_info.hpp"
#include "registry.hpp"
#include "test_support.hpp"

namespace tarmac::sim::test {
namespace {

TEST(Registry, ALiveProcessIsListedAndADeadOneDisappears) {
  TempDir dir;
  Sleeper child;
  LiveProcess p;
  p.pid = child.pid();
  p.gpus = {0, 2};
  p.memory_mib = 1234;
  p.sm_util = 40;
  ASSERT_TRUE(register_process(dir.path(), p).ok());
  auto live = read_live_processes(dir.path());
  ASSERT_EQ(live.size(), 1U);
  EXPECT_EQ(live[0].pid, child.pid());
  EXPECT_EQ(live[0].gpus, (std::vector<unsigned>{0, 2}));
  EXPECT_EQ(live[0].memory_mib, 1234U);
  EXPECT_EQ(live[0].sm_util, 40U);
  EXPECT_FALSE(live[0].scenario_process.has_value());

  child.kill_and_reap();
  std::vector<pid_t> stale;
  EXPECT_TRUE(read_live_processes(dir.path(), &stale).empty());
  EXPECT_EQ(stale, std::vector<pid_t>{p.pid});
}

TEST(Registry, AZombieCountsAsGone) {
  TempDir dir;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_TRUE(eventually([&] {
    auto stat = read_proc_stat(child);
    return stat && stat->state == 'Z';
  }));
  LiveProcess p;
  p.pid = child;
  p.gpus = {0};
  ASSERT_TRUE(register_process(dir.path(), p).ok());
  EXPECT_TRUE(read_live_processes(dir.path()).empty());
  ::waitpid(child, nullptr, 0);
}

TEST(Registry, AReusedPidIsNotTheRegisteredProcess) {
  TempDir dir;
  LiveProcess p;
  p.pid = ::getpid();  // alive, but started at another time than recorded
  p.starttime = read_proc_stat(::getpid())->starttime + 1;
  p.gpus = {0};
  ASSERT_TRUE(register_process(dir.path(), p).ok());
  EXPECT_TRUE(read_live_processes(dir.path()).empty());
  p.starttime = 0;  // now read from /proc: the real one
  ASSERT_TRUE(register_process(dir.path(), p).ok());
  EXPECT_EQ(read_live_processes(dir.path()).size(), 1U);
  unregister_process(dir.path(), p.pid);
  EXPECT_TRUE(read_live_processes(dir.path()).empty());
}

}  // namespace
}  // namespace tarmac::sim::test
