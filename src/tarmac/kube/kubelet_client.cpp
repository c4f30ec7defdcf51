#include "tarmac/kube/kubelet_client.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <chrono>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include "podresources.grpc.pb.h"
#include "tarmac/util/trusted_file.hpp"

namespace tarmac::kube {

namespace {

constexpr int kMaxMessageBytes = 4 * 1024 * 1024;
constexpr std::size_t kMaxContainers = 16384;

std::string status_words(const grpc::Status& status) {
  const std::string message = status.error_message().substr(0, 200);
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "no answer in time";
    case grpc::StatusCode::UNAVAILABLE:
      return fmt::format("unavailable ({})", message);
    case grpc::StatusCode::UNIMPLEMENTED:
      return "the kubelet does not serve PodResources v1 List";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return fmt::format("answer too large ({})", message);
    default:
      return fmt::format("gRPC status {} ({})", static_cast<int>(status.error_code()), message);
  }
}

}  // namespace

bool client_built() { return true; }

Result<std::vector<host::PodDevices>> list_pod_resources(const std::string& socket, long long timeout_ms) {
  // The path without links, checked, is the one connected to: nothing on the way can change between.
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(socket.c_str(), nullptr), &std::free);
  if (!real) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return make_error(Error::Code::NotFound, fmt::format("kubelet pod resources at {}: no such socket", socket));
    }
    return make_error(Error::Code::Io, fmt::format("kubelet pod resources at {}: {}", socket, std::strerror(errno)));
  }
  const std::string path = real.get();
  if (path.find_first_of("%?#") != std::string::npos) {
    // gRPC reads its target as a URI: such a path could name another.
    return make_error(Error::Code::Invalid, fmt::format("kubelet pod resources at {}: '%', '?' and '#' are refused in "
                                                        "the socket's path", socket));
  }
  TARMAC_TRY(util::check_trusted_socket(path, ::geteuid()));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  const auto channel = grpc::CreateCustomChannel("unix:" + path, grpc::InsecureChannelCredentials(), args);
  const auto stub = v1::PodResourcesLister::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  v1::ListPodResourcesResponse response;
  const grpc::Status status = stub->List(&context, v1::ListPodResourcesRequest{}, &response);
  if (!status.ok()) {
    return make_error(Error::Code::External, fmt::format("kubelet pod resources at {}: {}", socket, status_words(status)));
  }
  std::vector<host::PodDevices> out;
  std::size_t containers = 0;
  for (const auto& pod : response.pod_resources()) {
    for (const auto& container : pod.containers()) {
      if (++containers > kMaxContainers) {
        return make_error(Error::Code::Invalid,
                          fmt::format("kubelet pod resources at {}: more than {} containers", socket, kMaxContainers));
      }
      for (const auto& devices : container.devices()) {
        host::PodDevices d;
        d.pod = {pod.name(), pod.namespace_(), container.name()};
        d.resource = devices.resource_name();
        d.device_ids.assign(devices.device_ids().begin(), devices.device_ids().end());
        out.push_back(std::move(d));
      }
    }
  }
  return out;
}

}  // namespace tarmac::kube
