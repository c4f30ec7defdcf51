#include "tarmac/host/proc_parse.hpp"

#include <gtest/gtest.h>

#include <string>

#include "fake_proc.hpp"

namespace tarmac::host {
namespace {

using namespace std::string_literals;

std::string stat_line(const std::string& comm, char state, unsigned ppid, unsigned long long starttime) {
  return test_support::stat_line(4242, comm, state, ppid, starttime);
}

TEST(ParseStat, PlainLine) {
  const auto stat = parse_stat(stat_line("python3", 'S', 1, 987654));
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->comm, "python3");
  EXPECT_EQ(stat->state, 'S');
  EXPECT_EQ(stat->ppid, 1U);
  EXPECT_EQ(stat->starttime_ticks, 987654ULL);
}

TEST(ParseStat, CpuTimesAndResidentSize) {
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  // cutime cstime priority nice threads itrealvalue starttime vsize rss
  const auto stat = parse_stat("77 (x) R 1 77 77 0 -1 0 0 0 0 0 1234 56 0 0 20 0 1 0 999 1000000 4321 18446744073709551615");
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->utime_ticks, 1234ULL);
  EXPECT_EQ(stat->stime_ticks, 56ULL);
  EXPECT_EQ(stat->starttime_ticks, 999ULL);
  EXPECT_EQ(stat->rss_pages, 4321ULL);
  // A line cut after the start time still names the process; its size is unknown (0).
  const auto short_line = parse_stat("77 (x) R 1 77 77 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 999");
  ASSERT_TRUE(short_line);
  EXPECT_EQ(short_line->rss_pages, 0ULL);
}

TEST(ParseStat, CommWithSpacesAndParentheses) {
  // A process can name itself anything: fields must be read after the last ')'.
  const auto stat = parse_stat(stat_line("evil) (R 1 2", 'D', 77, 5));
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->comm, "evil) (R 1 2");
  EXPECT_EQ(stat->state, 'D');
  EXPECT_EQ(stat->ppid, 77U);
  EXPECT_EQ(stat->starttime_ticks, 5ULL);
}

TEST(ParseStat, KernelThreadHasParentZeroOrTwo) {
  const auto stat = parse_stat(stat_line("kworker/0:1H", 'I', 2, 100));
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->comm, "kworker/0:1H");
  EXPECT_EQ(stat->state, 'I');
  EXPECT_EQ(stat->ppid, 2U);
}

TEST(ParseStat, RejectsBrokenLines) {
  EXPECT_FALSE(parse_stat(""));
  EXPECT_FALSE(parse_stat("4242 python S 1"));
  EXPECT_FALSE(parse_stat("4242 (python) S 1 2 3"));  // truncated before starttime
  EXPECT_FALSE(parse_stat("4242 (x) S - 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5\n"));  // ppid "-"
  EXPECT_FALSE(parse_stat("4242 (python) SS 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5\n"));
}

TEST(JoinCmdline, JoinsArgumentsWithSpaces) {
  EXPECT_EQ(join_cmdline("python\0train.py\0--lr\0003e-4\0"s), "python train.py --lr 3e-4");
}

TEST(JoinCmdline, KernelThreadIsEmpty) { EXPECT_EQ(join_cmdline(""), ""); }

TEST(JoinCmdline, SetproctitlePaddingAndMissingTerminator) {
  EXPECT_EQ(join_cmdline("postgres: writer\0\0\0\0"s), "postgres: writer");
  EXPECT_EQ(join_cmdline("ray::Worker"), "ray::Worker");
}

TEST(JoinCmdline, EmptyArgumentInTheMiddleIsKept) { EXPECT_EQ(join_cmdline("a\0\0b\0"s), "a  b"); }

TEST(FindEnvironValue, FindsExactKey) {
  const std::string env = "HOME=/home/ada\0SLURM_JOB_ID_X=1\0SLURM_JOB_ID=4711\0PATH=/bin\0"s;
  EXPECT_EQ(find_environ_value(env, "SLURM_JOB_ID"), "4711");
  EXPECT_EQ(find_environ_value(env, "PATH"), "/bin");
  EXPECT_EQ(find_environ_value(env, "HOME"), "/home/ada");
}

TEST(FindEnvironValue, MissingKeyOrPrefixOnly) {
  const std::string env = "SLURM_JOB_IDX=1\0SLURM=2\0"s;
  EXPECT_FALSE(find_environ_value(env, "SLURM_JOB_ID"));
  EXPECT_FALSE(find_environ_value("", "SLURM_JOB_ID"));
}

TEST(FindEnvironValue, ValueMayContainEqualsAndBeEmpty) {
  const std::string env = "A=x=y\0B=\0"s;
  EXPECT_EQ(find_environ_value(env, "A"), "x=y");
  EXPECT_EQ(find_environ_value(env, "B"), "");
}

TEST(FindEnvironValue, FirstOccurrenceWinsAsGetenv) {
  EXPECT_EQ(find_environ_value("K=1\0K=2\0"s, "K"), "1");
}

TEST(ParseStatusUid, TakesTheEffectiveUid) {
  const std::string status = "Name:\tsudo\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t9\nPid:\t9\nPPid:\t1\n"
                             "TracerPid:\t0\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n";
  EXPECT_EQ(parse_status_uid(status), 0U);
}

TEST(ParseStatusUid, MissingOrBroken) {
  EXPECT_FALSE(parse_status_uid("Name:\tx\nGid:\t1\t1\t1\t1\n"));
  EXPECT_FALSE(parse_status_uid("Uid:\t1000\n"));
  EXPECT_FALSE(parse_status_uid("Uid:\tx\ty\tz\tw\n"));
  EXPECT_EQ(parse_status_uid("Uid:\t4294967294\t4294967294\t0\t0\n"), 4294967294U);
}

TEST(ParseBootTime, ReadsBtime) {
  const std::string stat = "cpu  1 2 3 4 5 6 7 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\nintr 1 2\nctxt 99\n"
                           "btime 1700000000\nprocesses 1234\nprocs_running 2\n";
  EXPECT_EQ(parse_boot_time(stat), 1700000000LL);
  EXPECT_FALSE(parse_boot_time("cpu 1 2 3\n"));
  EXPECT_FALSE(parse_boot_time("btimex 5\n"));
}

}  // namespace
}  // namespace tarmac::host

namespace tarmac::host {
namespace {

TEST(ProcParse, TtyNames) {
  EXPECT_FALSE(tty_name(0));
  EXPECT_EQ(tty_name((136 << 8) | 3), "pts/3");
  EXPECT_EQ(tty_name((137 << 8) | 1), "pts/257");
  EXPECT_EQ(tty_name((4 << 8) | 2), "tty2");
  EXPECT_EQ(tty_name((4 << 8) | 64), "tty(4:64)");
}

TEST(ProcParse, StatCarriesTheTerminal) {
  const std::string line = "42 (bash) S 1 42 42 34816 42 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0";
  const auto stat = parse_stat(line);
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->tty_nr, 34816);
  EXPECT_EQ(tty_name(stat->tty_nr), "pts/0");
}

TEST(ProcParse, NspidDepthAndDigits) {
  EXPECT_EQ(parse_nspid_depth("NSpid:\t12\n"), 1U);
  EXPECT_EQ(parse_nspid_depth("Pid:\t12\nNSpid:\t12\t1\n"), 2U);
  EXPECT_FALSE(parse_nspid_depth("Pid:\t12\n"));
  EXPECT_EQ(pid_of_proc_entry("4242"), 4242U);
  EXPECT_FALSE(pid_of_proc_entry("self"));
  EXPECT_FALSE(pid_of_proc_entry("99999999999"));
  EXPECT_FALSE(parse_digits("12a", 4));
  EXPECT_FALSE(parse_digits("", 4));
}

}  // namespace
}  // namespace tarmac::host
