#include "tarmac/kube/kubelet_client.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>

#include "fake_kubelet.hpp"

namespace tarmac::kube {
namespace {

namespace fs = std::filesystem;
using testing::answer_from_json;
using testing::FakeKubelet;

class KubeletClient : public testing::SocketDirTest {};

constexpr const char* kPods = R"([
  {"name": "trainer-0", "namespace": "ml", "containers": [
    {"name": "main", "devices": [
      {"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-aaaa", "GPU-bbbb"]},
      {"resource_name": "example.com/nic", "device_ids": ["eth1"]}]},
    {"name": "sidecar"}]},
  {"name": "notebook", "namespace": "alice", "containers": [
    {"name": "jupyter", "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["nvidia2"]}]}]}
])";

TEST_F(KubeletClient, ListsEveryContainersDevices) {
  ASSERT_TRUE(client_built());
  FakeKubelet kubelet(socket_, [] { return answer_from_json(kPods); });
  const auto listed = list_pod_resources(socket_, 5000);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  ASSERT_EQ(listed->size(), 3U);
  EXPECT_EQ((*listed)[0].pod, (host::PodRef{"trainer-0", "ml", "main"}));
  EXPECT_EQ((*listed)[0].resource, "nvidia.com/gpu");
  EXPECT_EQ((*listed)[0].device_ids, (std::vector<std::string>{"GPU-aaaa", "GPU-bbbb"}));
  EXPECT_EQ((*listed)[1].resource, "example.com/nic");
  EXPECT_EQ((*listed)[2].pod, (host::PodRef{"notebook", "alice", "jupyter"}));
  EXPECT_EQ(kubelet.calls(), 1);

  // Resolved against this machine's GPUs, the NIC is not a GPU and nvidia2 is GPU 2's device file.
  const auto m = host::map_pod_devices(*listed, {{0, "GPU-aaaa", 0}, {1, "GPU-bbbb", 1}, {2, "GPU-cccc", 2}});
  EXPECT_EQ(m.map.size(), 3U);
  EXPECT_EQ(m.map.at(2).front().container, "jupyter");
}

TEST_F(KubeletClient, NoSocketIsNotFound) {
  const auto listed = list_pod_resources(socket_, 1000);
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.error().code, Error::Code::NotFound);
  EXPECT_NE(listed.error().message.find(socket_), std::string::npos) << listed.error().message;
}

TEST_F(KubeletClient, AKubeletThatDoesNotAnswerTimesOut) {
  FakeKubelet kubelet(socket_, [] { return answer_from_json(kPods); }, 5000);
  const auto started = std::chrono::steady_clock::now();
  const auto listed = list_pod_resources(socket_, 200);
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().message.find("no answer in time"), std::string::npos) << listed.error().message;
  // The deadline is what bounds the call, not the server's 5 s.
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(4));
}

TEST_F(KubeletClient, ASocketOthersCouldHavePlacedIsRefused) {
  // Anyone may write the directory: whoever listens on the socket could be anyone.
  FakeKubelet kubelet(socket_, [] { return answer_from_json(kPods); });
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
  const auto listed = list_pod_resources(socket_, 1000);
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().message.find("writable by everyone"), std::string::npos) << listed.error().message;
  EXPECT_EQ(kubelet.calls(), 0);
}

TEST_F(KubeletClient, ALinkIsJudgedByWhereItLeadsAndAFileIsNotASocket) {
  // A link to the socket in a trusted directory is the socket (the path it leads to is checked and
  // connected to).
  FakeKubelet kubelet(socket_, [] { return answer_from_json(kPods); });
  const std::string link = (dir_ / "link.sock").string();
  ASSERT_EQ(symlink(socket_.c_str(), link.c_str()), 0);
  auto listed = list_pod_resources(link, 1000);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(kubelet.calls(), 1);
  // A link to a socket in a directory anyone can write is that socket, and refused.
  const fs::path open_dir = dir_ / "open";
  fs::create_directory(open_dir);
  FakeKubelet other((open_dir / "k.sock").string(), [] { return answer_from_json(kPods); });
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  const std::string to_open = (dir_ / "to-open.sock").string();
  ASSERT_EQ(symlink((open_dir / "k.sock").c_str(), to_open.c_str()), 0);
  listed = list_pod_resources(to_open, 1000);
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().message.find("writable by everyone"), std::string::npos) << listed.error().message;
  EXPECT_EQ(other.calls(), 0);
  const std::string file = (dir_ / "file").string();
  ASSERT_EQ(mknod(file.c_str(), S_IFREG | 0600, 0), 0);
  listed = list_pod_resources(file, 1000);
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().message.find("not a socket"), std::string::npos) << listed.error().message;
  EXPECT_EQ(kubelet.calls(), 1);
}

TEST_F(KubeletClient, SomethingElseOnTheSocketIsAnError) {
  // Not a gRPC server: a listener that closes every connection.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  std::thread closer([fd] {
    for (int i = 0; i < 20; ++i) {
      const int c = accept(fd, nullptr, nullptr);
      if (c < 0) return;
      close(c);
    }
  });
  const auto listed = list_pod_resources(socket_, 1000);
  shutdown(fd, SHUT_RDWR);
  close(fd);
  closer.join();
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().message.find(socket_), std::string::npos) << listed.error().message;
}

TEST_F(KubeletClient, AnAnswerTooLargeIsRefused) {
  FakeKubelet kubelet(socket_, [] {
    v1::ListPodResourcesResponse r;
    auto* c = r.add_pod_resources()->add_containers();
    auto* d = c->add_devices();
    d->set_resource_name("nvidia.com/gpu");
    for (int i = 0; i < 40000; ++i) d->add_device_ids(std::string(128, 'x'));  // 5 MiB
    return r;
  });
  const auto listed = list_pod_resources(socket_, 5000);
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().message.find("too large"), std::string::npos) << listed.error().message;
}

TEST_F(KubeletClient, TooManyContainersAreRefused) {
  FakeKubelet kubelet(socket_, [] {
    v1::ListPodResourcesResponse r;
    auto* pod = r.add_pod_resources();
    for (int i = 0; i < 16385; ++i) pod->add_containers();
    return r;
  });
  const auto listed = list_pod_resources(socket_, 5000);
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().message.find("more than 16384 containers"), std::string::npos) << listed.error().message;
}

}  // namespace
}  // namespace tarmac::kube
