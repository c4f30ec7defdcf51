#include "tarmac/util/trusted_file.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tarmac::util {
namespace {

constexpr uid_t kOther = 65534;  // nobody

class TrustedFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "tarmac-trusted-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    file_ = dir_ + "/tarmac.toml";
    std::ofstream(file_) << "[alerts]\ncommand = \"/bin/true\"\n";
    ASSERT_EQ(::chmod(file_.c_str(), 0644), 0);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Result<std::string> read(const std::string& path, Writers writers = Writers::OwnerOnly) {
    return read_trusted_file(path, writers, ::geteuid(), 1 << 20);
  }
  static std::string why(const Result<std::string>& r) { return r.ok() ? "(read)" : r.error().message; }

  std::string dir_;
  std::string file_;
};

TEST_F(TrustedFile, ReadsAFileOnlyItsOwnerCanChange) {
  auto r = read(file_);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, "[alerts]\ncommand = \"/bin/true\"\n");
}

TEST_F(TrustedFile, RefusesAGroupOrWorldWritableFile) {
  ASSERT_EQ(::chmod(file_.c_str(), 0664), 0);
  auto r = read(file_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::Invalid);
  EXPECT_EQ(why(r), file_ + ": it is writable by its group (mode 0664)");
  ASSERT_EQ(::chmod(file_.c_str(), 0646), 0);
  EXPECT_EQ(why(read(file_)), file_ + ": it is writable by everyone (mode 0646)");
  // Without the ownership checks (a user's own file), the mode does not matter.
  EXPECT_TRUE(read(file_, Writers::Anyone).ok());
}

TEST_F(TrustedFile, RefusesAFileInADirectoryOthersCanWrite) {
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  EXPECT_EQ(why(read(file_)), file_ + ": its directory " + dir_ + " is writable by everyone (mode 0777)");
  // A sticky directory, as /tmp, lets no one replace another's entry.
  ASSERT_EQ(::chmod(dir_.c_str(), 01777), 0);
  EXPECT_TRUE(read(file_).ok()) << why(read(file_));
}

TEST_F(TrustedFile, ChecksTheDirectoryAPathReachesNotTheWordsInIt) {
  ASSERT_EQ(::mkdir((dir_ + "/open").c_str(), 0700), 0);
  ASSERT_EQ(::chmod((dir_ + "/open").c_str(), 0777), 0);
  // "open/.." leads back to dir_: the walk checks open/ on the way.
  EXPECT_NE(why(read(dir_ + "/open/../tarmac.toml")).find("its directory " + dir_ + "/open is writable"),
            std::string::npos);
}

TEST_F(TrustedFile, RefusesWhatOthersOwnWhenRunAsRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file away";
  ASSERT_EQ(::chown(file_.c_str(), kOther, kOther), 0);
  EXPECT_EQ(why(read(file_)), file_ + ": it is owned by uid 65534, not by root");
  ASSERT_EQ(::chown(file_.c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(dir_.c_str(), kOther, kOther), 0);
  EXPECT_EQ(why(read(file_)), file_ + ": its directory " + dir_ + " is owned by uid 65534, not by root");
  // A symbolic link to a root file through the user's directory is refused on the way.
  const std::string link = dir_ + "/link.toml";
  std::filesystem::create_symlink("/etc/hostname", link);
  EXPECT_FALSE(read(link).ok());
}

TEST_F(TrustedFile, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = dir_ + "/fifo.toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (Writers w : {Writers::OwnerOnly, Writers::Anyone}) {
    EXPECT_EQ(why(read(fifo, w)), fifo + ": not a regular file");
  }
}

TEST_F(TrustedFile, BoundsTheSizeAndNamesAMissingFile) {
  std::ofstream(file_) << std::string(2000, '#');
  auto r = read_trusted_file(file_, Writers::OwnerOnly, ::geteuid(), 1000);
  EXPECT_EQ(why(r), file_ + ": larger than 1000 bytes");
  auto missing = read(dir_ + "/missing.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Error::Code::NotFound);
  EXPECT_EQ(why(missing), dir_ + "/missing.toml: no such file");
}

}  // namespace
}  // namespace tarmac::util

namespace tarmac::util {
namespace {

// A Unix socket bound at `path` (left for the test's directory to remove).
int bound_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  return fd;
}

TEST_F(TrustedFile, ASocketIsTrustedOnlyWhereOnlyItsOwnerCouldHavePutIt) {
  const std::string sock = dir_ + "/kubelet.sock";
  const int fd = bound_socket(sock);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(check_trusted_socket(sock, ::geteuid()).ok());
  // Not a socket; a link, even to the socket, in the path.
  auto r = check_trusted_socket(file_, ::geteuid());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not a socket"), std::string::npos) << r.error().message;
  const std::string linked_dir = dir_ + "/via";
  ASSERT_EQ(::symlink(dir_.c_str(), linked_dir.c_str()), 0);
  r = check_trusted_socket(linked_dir + "/kubelet.sock", ::geteuid());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("is a symbolic link"), std::string::npos) << r.error().message;
  // In a directory anyone can write (not sticky): anyone could have bound it.
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  r = check_trusted_socket(sock, ::geteuid());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("writable by everyone"), std::string::npos) << r.error().message;
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  // Someone else's socket, when root checks.
  if (::geteuid() == 0) {
    ASSERT_EQ(::lchown(sock.c_str(), kOther, kOther), 0);
    r = check_trusted_socket(sock, 0);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("owned by uid 65534"), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(check_trusted_socket(dir_ + "/none.sock", ::geteuid()).error().code, Error::Code::NotFound);
  ::close(fd);
}

}  // namespace
}  // namespace tarmac::util
