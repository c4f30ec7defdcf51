// The store holds every job's command line and working directory: it is not world-readable
// (issue 13, item 16).
#include "tarmac/store/private_files.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tarmac/store/reader.hpp"
#include "tarmac/store/recorder.hpp"
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

}  // namespace
}  // namespace tarmac::store
