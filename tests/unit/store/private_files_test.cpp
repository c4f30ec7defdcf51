// The store holds every job's command line and working directory: it is not world-readable
// (issue 13, item 16).
#include "tarmac/store/private_files.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>

#include "tarmac/store/reader.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/store/schema.hpp"
#include "tarmac/store/sqlite.hpp"
#include "temp_dir.hpp"

namespace tarmac::store {
namespace {

using test_support::TempDir;

mode_t mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 07777;
}

TEST(PrivateStore, ANewStoreItsWalAndShmAndItsDirectoryAreNotWorldReadable) {
  TempDir tmp;
  const std::string dir = tmp / "state";
  const std::string path = database_path(dir);
  Recorder rec({path, {}, 1000});
  GpuSample s;
  s.ts_ms = 1736154000000;
  s.util_pct = 50;
  rec.add(s);
  const FlushStatus st = rec.flush();
  ASSERT_TRUE(st.ok) << st.message;
  EXPECT_EQ(mode_of(dir), 0711U);
  EXPECT_EQ(mode_of(path), 0640U);
  // WAL mode: SQLite gives the -wal and -shm files the database's mode.
  ASSERT_TRUE(std::filesystem::exists(path + "-wal"));
  EXPECT_EQ(mode_of(path + "-wal"), 0640U);
  EXPECT_EQ(mode_of(path + "-shm"), 0640U);
}

TEST(PrivateStore, AStoreFromAnOlderTarmacIsTightenedAndAnotherFileRefused) {
  TempDir tmp;
  const std::string path = database_path(tmp.path());
  for (const char* suffix : {"", "-wal"}) {
    std::ofstream(path + suffix).close();
    ASSERT_EQ(::chmod((path + suffix).c_str(), 0666), 0);
  }
  ASSERT_TRUE(prepare_private_store(path).ok());
  EXPECT_EQ(mode_of(path), 0640U);
  EXPECT_EQ(mode_of(path + "-wal"), 0640U);
  EXPECT_FALSE(std::filesystem::exists(path + "-shm")) << "only the database itself is created";

  // A link where the store should be is not followed (and its target's mode is not changed).
  const std::string target = tmp / "elsewhere";
  std::ofstream(target).close();
  ASSERT_EQ(::chmod(target.c_str(), 0644), 0);
  const std::string linked = tmp / "linked.db";
  std::filesystem::create_symlink(target, linked);
  auto r = prepare_private_store(linked);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("symbolic link"), std::string::npos) << r.error().message;
  EXPECT_EQ(failure_of(r.error()), Failure::ReadOnly) << "the recorder treats it as a store it cannot write";
  EXPECT_EQ(mode_of(target), 0644U);
}

TEST(PrivateStore, AStoreTheCallerMayNotReadIsAClearError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every file (the integration test runs this as a second user)";
  TempDir tmp;
  const std::string path = database_path(tmp.path());
  std::ofstream(path).close();
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  auto reader = Reader::open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.error().message.find("cannot read the store " + path + ": permission denied"), std::string::npos)
      << reader.error().message;
}

// Another process opens the store read-write (as Python's sqlite3 does), reads it and closes: the
// way a test, a dashboard user's script or `sqlite3` reads the agent's store. A fresh program, not a
// fork: a forked child would inherit SQLite's record of this process's locks.
bool another_process_reads(const std::string& path) {
  const std::string command =
      "python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute(\"SELECT count(*) FROM meta\"); "
      "c.close()' " + path;
  return std::system(command.c_str()) == 0;
}

// The agent holds the store open (the scheduler's job table, then the recorder) while it prepares
// or probes the same files (the recorder opening it again, the HTTP server's readers). POSIX drops
// every fcntl lock a process holds on a file when it closes any descriptor of that file, and SQLite's
// locks are such locks: a reader in another process then took itself for the last connection and
// deleted the -wal and -shm the agent was writing through (the agent's next write: "disk I/O
// error"), or truncated the -shm the agent had mapped (the agent died of SIGBUS in
// sqlite3WalFindFrame, seen under load in alerts_live).
void expect_locks_kept_through(const std::function<void(const std::string&)>& touch) {
  TempDir tmp;
  const std::string path = database_path(tmp.path());
  ASSERT_TRUE(prepare_private_store(path).ok());
  auto db = Database::open(path, Database::Mode::ReadWrite);
  ASSERT_TRUE(db.ok()) << db.error().message;
  ASSERT_TRUE(ensure_schema(*db).ok());
  ASSERT_TRUE(db->exec("INSERT INTO event(ts_ms, kind, detail) VALUES (1, 'test', 'first')").ok());
  ASSERT_TRUE(std::filesystem::exists(path + "-wal"));

  touch(path);
  ASSERT_TRUE(another_process_reads(path));

  EXPECT_TRUE(std::filesystem::exists(path + "-wal")) << "another process deleted the WAL this one writes";
  EXPECT_TRUE(std::filesystem::exists(path + "-shm")) << "another process deleted the index this one maps";
  ASSERT_TRUE(db->exec("INSERT INTO event(ts_ms, kind, detail) VALUES (2, 'test', 'second')").ok());
  auto fresh = Database::open(path, Database::Mode::ReadOnly);
  ASSERT_TRUE(fresh.ok());
  auto rows = fresh->scalar("SELECT count(*) FROM event WHERE kind = 'test'");
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  EXPECT_EQ(rows->value_or(0), 2) << "a row written after the other process closed was lost";
}

TEST(PrivateStore, PreparingAStoreThisProcessHasOpenKeepsItsLocks) {
  expect_locks_kept_through([](const std::string& path) { ASSERT_TRUE(prepare_private_store(path).ok()); });
}

TEST(PrivateStore, ProbingAStoreThisProcessHasOpenKeepsItsLocks) {
  expect_locks_kept_through([](const std::string& path) { ASSERT_TRUE(Reader::open(path).ok()); });
}

}  // namespace
}  // namespace tarmac::store
