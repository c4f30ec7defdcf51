#include "tarmac/host/job_map.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tarmac::host {
namespace {

namespace fs = std::filesystem;

class JobMapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tarmac-jobmap-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) {
    std::ifstream in(dir_ / name);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  fs::path dir_;
};

TEST(JobId, ValidIds) {
  EXPECT_TRUE(valid_job_id("77"));
  EXPECT_TRUE(valid_job_id("1234_5"));
  EXPECT_TRUE(valid_job_id("job-a.b"));
  EXPECT_FALSE(valid_job_id(""));
  EXPECT_FALSE(valid_job_id(".hidden"));
  EXPECT_FALSE(valid_job_id("a b"));
  EXPECT_FALSE(valid_job_id("a\"b"));
  EXPECT_FALSE(valid_job_id(std::string(65, '1')));
}

TEST_F(JobMapTest, AddAndRemoveInDcgmExportersFormat) {
  EXPECT_TRUE(read_job_map(dir_.string()).empty()) << "a missing directory is an empty map";
  ASSERT_TRUE(change_job_map(dir_.string(), {1, 2}, "77", JobMapChange::Add).ok());
  ASSERT_TRUE(change_job_map(dir_.string(), {2}, "78", JobMapChange::Add).ok());
  ASSERT_TRUE(change_job_map(dir_.string(), {2}, "78", JobMapChange::Add).ok()) << "twice is once";
  EXPECT_EQ(file("1"), "77\n");
  EXPECT_EQ(file("2"), "77\n78\n");
  const JobMap map = read_job_map(dir_.string());
  ASSERT_EQ(map.size(), 2u);
  EXPECT_EQ(map.at(2), (std::vector<std::string>{"77", "78"}));
  struct stat st{};
  ASSERT_EQ(stat((dir_ / "2").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  ASSERT_TRUE(change_job_map(dir_.string(), {1, 2}, "77", JobMapChange::Remove).ok());
  EXPECT_FALSE(fs::exists(dir_ / "1")) << "a file left empty is removed";
  EXPECT_EQ(file("2"), "78\n");
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().filename(), "2") << "no temporary left";
  EXPECT_FALSE(change_job_map(dir_.string(), {0}, "a b", JobMapChange::Add).ok());
}

TEST_F(JobMapTest, TheJobsUserAndPartitionLiveBesideTheMapUntilItsRemoved) {
  const JobInfo info{"alice", "gpu-long"};
  ASSERT_TRUE(change_job_map(dir_.string(), {0, 1}, "77", JobMapChange::Add, &info).ok());
  EXPECT_EQ(file(".job-77"), "user=alice\npartition=gpu-long\n");
  EXPECT_EQ(read_job_map(dir_.string()).size(), 2u) << "the info file is not a GPU's";
  JobInfos infos = read_job_infos(dir_.string());
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos.at("77").user, "alice");
  EXPECT_EQ(infos.at("77").partition, "gpu-long");
  ASSERT_TRUE(change_job_map(dir_.string(), {0, 1}, "77", JobMapChange::Remove).ok());
  EXPECT_FALSE(fs::exists(dir_ / ".job-77"));
  EXPECT_TRUE(read_job_infos(dir_.string()).empty());

  // What is not a plain name is not written, nor read back.
  const JobInfo odd{"bob\nuser=root", "p q"};
  ASSERT_TRUE(change_job_map(dir_.string(), {0}, "78", JobMapChange::Add, &odd).ok());
  EXPECT_EQ(file(".job-78"), "");
  std::ofstream(dir_ / ".job-79") << "user=$(reboot)\npartition=ok\nnoise\n";
  infos = read_job_infos(dir_.string());
  EXPECT_EQ(infos.at("78").user, "");
  EXPECT_EQ(infos.at("79").user, "");
  EXPECT_EQ(infos.at("79").partition, "ok");
}

TEST_F(JobMapTest, ReadsOnlyWhatItShould) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "0") << "12\n\n  13  \nnot a job!\n12\n";
  std::ofstream(dir_ / "notanindex") << "99\n";
  std::ofstream(dir_ / "007") << "98\n";
  fs::create_symlink(dir_ / "0", dir_ / "3");
  mkfifo((dir_ / "4").c_str(), 0644);  // would block a reader that opens it blocking
  fs::create_directories(dir_ / "5");
  const JobMap map = read_job_map(dir_.string());
  ASSERT_EQ(map.size(), 1u) << "links, FIFOs, directories and other names are ignored";
  EXPECT_EQ(map.at(0), (std::vector<std::string>{"12", "13"}));
}

TEST_F(JobMapTest, RefusesADirectoryOthersCanWrite) {
  fs::create_directories(dir_);
  chmod(dir_.c_str(), 0777);
  const auto r = change_job_map(dir_.string(), {0}, "1", JobMapChange::Add);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("writable by no one else"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace tarmac::host
