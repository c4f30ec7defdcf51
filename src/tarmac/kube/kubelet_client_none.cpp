// The kubelet client of a build without gRPC (TARMAC_KUBELET off: the static release binary).
#include <fmt/format.h>

#include "tarmac/kube/kubelet_client.hpp"

namespace tarmac::kube {

bool client_built() { return false; }

Result<std::vector<host::PodDevices>> list_pod_resources(const std::string& socket, long long /*timeout_ms*/) {
  return make_error(Error::Code::Unsupported,
                    fmt::format("kubelet pod resources at {}: this tarmac was built without the kubelet client "
                                "(TARMAC_KUBELET=OFF); the container image's build has it",
                                socket));
}

}  // namespace tarmac::kube
