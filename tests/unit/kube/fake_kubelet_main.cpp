// tarmac-test-kubelet SOCKET PODS.json: a kubelet's PodResourcesLister on SOCKET, answering List
// with PODS.json as it is at each call (the test edits it to allocate and free GPUs). Prints
// "ready" once it listens; runs until SIGTERM or SIGINT.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "fake_kubelet.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tarmac-test-kubelet SOCKET PODS.json\n");
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before gRPC's threads start: they inherit it
  const std::string pods = argv[2];
  tarmac::kube::testing::FakeKubelet kubelet(argv[1], [pods] {
    std::ifstream in(pods);
    std::stringstream text;
    text << in.rdbuf();
    try {
      return tarmac::kube::testing::answer_from_json(text.str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tarmac-test-kubelet: %s: %s\n", pods.c_str(), e.what());
      return v1::ListPodResourcesResponse{};
    }
  });
  std::printf("ready\n");
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
  return 0;
}
