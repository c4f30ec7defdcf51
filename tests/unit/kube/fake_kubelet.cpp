#include "fake_kubelet.hpp"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

namespace tarmac::kube::testing {

class FakeKubelet::Service final : public v1::PodResourcesLister::Service {
 public:
  Service(Answer answer, long long delay_ms) : answer_(std::move(answer)), delay_ms_(delay_ms) {}

  grpc::Status List(grpc::ServerContext* context, const v1::ListPodResourcesRequest* /*request*/,
                    v1::ListPodResourcesResponse* response) override {
    ++calls_;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms_);
    while (std::chrono::steady_clock::now() < until && !stopping_ && !context->IsCancelled()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    *response = answer_();
    return grpc::Status::OK;
  }

  std::atomic<long long> calls_{0};
  std::atomic<bool> stopping_{false};

 private:
  Answer answer_;
  long long delay_ms_;
};

FakeKubelet::FakeKubelet(const std::string& socket, Answer answer, long long delay_ms)
    : service_(std::make_unique<Service>(std::move(answer), delay_ms)) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) {
    std::fprintf(stderr, "fake kubelet: cannot listen on %s\n", socket.c_str());
    std::abort();
  }
}

FakeKubelet::~FakeKubelet() {
  service_->stopping_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

long long FakeKubelet::calls() const { return service_->calls_; }

void SocketDirTest::SetUp() {
  char tmpl[] = "/tmp/tarmac-kube-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  dir_ = tmpl;
  socket_ = (dir_ / "kubelet.sock").string();
}

void SocketDirTest::TearDown() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

v1::ListPodResourcesResponse answer_from_json(const std::string& text) {
  v1::ListPodResourcesResponse out;
  for (const auto& pod : nlohmann::json::parse(text)) {
    auto* p = out.add_pod_resources();
    p->set_name(pod.at("name").get<std::string>());
    p->set_namespace_(pod.at("namespace").get<std::string>());
    for (const auto& container : pod.value("containers", nlohmann::json::array())) {
      auto* c = p->add_containers();
      c->set_name(container.at("name").get<std::string>());
      for (const auto& devices : container.value("devices", nlohmann::json::array())) {
        auto* d = c->add_devices();
        d->set_resource_name(devices.at("resource_name").get<std::string>());
        for (const auto& id : devices.at("device_ids")) d->add_device_ids(id.get<std::string>());
      }
    }
  }
  return out;
}

}  // namespace tarmac::kube::testing
