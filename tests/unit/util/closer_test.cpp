// Descriptors a user handed over, closed off the caller's thread (util/closer.hpp): a socket whose
// sender set SO_LINGER with data its peer does not read makes close() wait (up to the linger
// time); the caller of close_in_background does not, and the close ends once the peer reads.
#include <chrono>
#include <gtest/gtest.h>
#include <vector>

#include "../support/lingering_socket.hpp"
#include "tarmac/util/closer.hpp"

namespace tarmac::util {
namespace {

TEST(Closer, ALingeringSocketIsClosedOnAnotherThreadAndTheCallerDoesNotWait) {
  auto s = testing::LingeringSocket::make(30);
  ASSERT_TRUE(s.sender && s.peer);
  const auto t0 = std::chrono::steady_clock::now();
  close_in_background(std::move(s.sender));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_FALSE(s.sender.valid());
  // A close here would wait the 30 s (its peer reads only below).
  EXPECT_LT(took, std::chrono::seconds(5)) << "the caller waited for the lingering close";
  EXPECT_TRUE(s.drain()) << "the socket was never closed";

  std::vector<Fd> several;
  several.emplace_back(::dup(1));
  several.emplace_back(::dup(1));
  close_in_background(several);
  EXPECT_TRUE(several.empty());
}

}  // namespace
}  // namespace tarmac::util
