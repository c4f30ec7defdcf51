// A PodResourcesLister server built from the same .proto as tarmac's client: the kubelet's side of
// the socket, for the client's tests and (as tarmac-test-kubelet) the agent's end-to-end test.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "podresources.grpc.pb.h"

namespace tarmac::kube::testing {

class FakeKubelet {
 public:
  using Answer = std::function<v1::ListPodResourcesResponse()>;
  // Serves List on the Unix socket `socket` (created), answering with what `answer` returns at each
  // call, after `delay_ms` (an unresponsive kubelet). Fails the process when it cannot listen.
  FakeKubelet(const std::string& socket, Answer answer, long long delay_ms = 0);
  ~FakeKubelet();
  FakeKubelet(const FakeKubelet&) = delete;
  FakeKubelet& operator=(const FakeKubelet&) = delete;

  [[nodiscard]] long long calls() const;

 private:
  class Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

// The answer described in JSON, the tests' format (the proto's own JSON mapping):
// [{"name": POD, "namespace": NS, "containers": [{"name": C, "devices": [{"resource_name": R,
// "device_ids": [ID, ...]}]}]}]. Throws on malformed input.
[[nodiscard]] v1::ListPodResourcesResponse answer_from_json(const std::string& text);

// A test's own directory under /tmp (0700, removed after), with the path of a socket in it.
class SocketDirTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::filesystem::path dir_;
  std::string socket_;
};

}  // namespace tarmac::kube::testing
