#include "tarmac/cli/topo.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace tarmac::cli {
namespace {

// Two GPUs joined by four NVLinks; GPU 0 knows its CPUs and NUMA node, GPU 1 neither.
gpu::Snapshot two_linked_gpus() {
  gpu::Snapshot snap;
  snap.devices.resize(2);
  snap.devices[0].id.index = 0;
  snap.devices[0].id.cpu_affinity = {0, 1, 2, 3, 8};
  snap.devices[0].id.numa_node = 0;
  snap.devices[0].id.pci_bus_id = "00000000:07:00.0";
  snap.devices[1].id.index = 1;
  gpu::Topology t;
  t.links = {{gpu::Link::Self, gpu::Link::NvLink}, {gpu::Link::NvLink, gpu::Link::Self}};
  t.nvlink_count = {{0, 4}, {4, 0}};
  snap.topology = t;
  return snap;
}

TEST(FormatCpuList, RangesAsTheKernelWritesThem) {
  EXPECT_EQ(format_cpu_list({}), "N/A");
  EXPECT_EQ(format_cpu_list({5}), "5");
  EXPECT_EQ(format_cpu_list({0, 1}), "0-1");
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({0, 2, 4}), "0,2,4");
}

TEST(RenderTopology, MatrixAffinityAndLegend) {
  const std::string text = render_topology(two_linked_gpus());
  EXPECT_TRUE(text.starts_with("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
                               "GPU0\t X \tNV4\t0-3,8\t0\n"
                               "GPU1\tNV4\t X \tN/A\tN/A\n\n"
                               "Legend:\n"))
      << text;
  EXPECT_NE(text.find("NV#  = Connection traversing a bonded set of # NVLinks"), std::string::npos);
}

TEST(RenderTopology, PcieLinksUseNvidiaSmisWords) {
  auto snap = two_linked_gpus();
  snap.topology->links = {{gpu::Link::Self, gpu::Link::Sys}, {gpu::Link::Phb, gpu::Link::Self}};
  const std::string text = render_topology(snap);
  EXPECT_NE(text.find("GPU0\t X \tSYS\t"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU1\tPHB\t X \t"), std::string::npos) << text;
}

TEST(RenderTopology, ZeroGpusIsTheHeaderAndTheLegend) {
  gpu::Snapshot snap;
  snap.topology = gpu::Topology{};
  EXPECT_TRUE(render_topology(snap).starts_with("\tCPU Affinity\tNUMA Affinity\n\nLegend:\n"));
}

// A pair the topology does not cover is unknown; the old code read past the matrix (or
// dereferenced a missing topology).
TEST(RenderTopology, PairsOutsideTheTopologyAreUnknown) {
  auto snap = two_linked_gpus();
  snap.devices.emplace_back();
  snap.devices[2].id.index = 2;
  std::string text = render_topology(snap);
  EXPECT_NE(text.find("GPU0\t X \tNV4\tN/A\t"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU2\tN/A\tN/A\tN/A\t"), std::string::npos) << text;
  snap.topology.reset();
  text = render_topology(snap);
  EXPECT_NE(text.find("GPU0\tN/A\tN/A\tN/A\t0-3,8\t0\n"), std::string::npos) << text;
}

TEST(TopologyJson, LinksAndAffinity) {
  const auto j = detail::topology_json(two_linked_gpus());
  EXPECT_EQ(j["links"][0][1], "NV4");
  EXPECT_EQ(j["links"][1][1], "X");
  ASSERT_EQ(j["gpus"].size(), 2U);
  EXPECT_EQ(j["gpus"][0]["pci_bus_id"], "00000000:07:00.0");
  EXPECT_EQ(j["gpus"][0]["cpu_affinity"], nlohmann::json::array({0, 1, 2, 3, 8}));
  EXPECT_EQ(j["gpus"][0]["numa_node"], 0);
  EXPECT_TRUE(j["gpus"][1]["pci_bus_id"].is_null());
  EXPECT_TRUE(j["gpus"][1]["numa_node"].is_null());
}

}  // namespace
}  // namespace tarmac::cli
