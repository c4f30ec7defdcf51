#include "tarmac/util/fd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>

namespace tarmac::util {
namespace {

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(Fd, ClosesWhatItOwnsOnEveryPath) {
  int raw = -1;
  {
    Fd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    raw = fd.get();
    ASSERT_TRUE(fd.valid());
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(Fd, MovesOwnershipAndReleases) {
  Fd a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = a.get();
  Fd b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  EXPECT_EQ(b.get(), raw);
  Fd c(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int other = c.get();
  c = std::move(b);  // closes what c held
  EXPECT_FALSE(is_open(other));
  EXPECT_EQ(c.get(), raw);
  const int released = c.release();
  EXPECT_FALSE(c.valid());
  EXPECT_TRUE(is_open(released));  // release hands it over without closing
  ::close(released);
}

TEST(Fd, ResetClosesTheOldDescriptor) {
  Fd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int old = fd.get();
  fd.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_FALSE(is_open(old) && old != fd.get());
  fd.reset();
  EXPECT_FALSE(fd.valid());
}

}  // namespace
}  // namespace tarmac::util
