#include <gtest/gtest.h>

#include "tarmac/kube/kubelet_client.hpp"

namespace tarmac::kube {
namespace {

TEST(KubeletClientNone, SaysTheBuildHasNoClient) {
  EXPECT_FALSE(client_built());
  const auto r = list_pod_resources(kDefaultSocket, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::Unsupported);
  EXPECT_NE(r.error().message.find("built without the kubelet client"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace tarmac::kube
