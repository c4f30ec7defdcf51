// The kubelet's PodResourcesLister, asked over its Unix socket which devices it allocated to which
// pod's container (gRPC `List`, the call dcgm-exporter makes). Compiled with gRPC only when
// TARMAC_KUBELET is on (the container image's build, the tests); otherwise every call answers that
// this build has no kubelet client, so the static release binary carries no gRPC.
#pragma once

#include <string>
#include <vector>

#include "tarmac/host/pod_map.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::kube {

inline constexpr const char* kDefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock";

// Whether this build has the kubelet client.
[[nodiscard]] bool client_built();

// One `List` call on `socket`, answered within `timeout_ms`: each container's devices of each
// resource (not only NVIDIA's). The socket must be root's (or this user's) in directories no one
// else can write (util::check_trusted_socket); the answer is at most 4 MiB and 16384 containers.
// Fails naming the socket and why (NotFound when there is no socket).
[[nodiscard]] Result<std::vector<host::PodDevices>> list_pod_resources(const std::string& socket, long long timeout_ms);

}  // namespace tarmac::kube
