#include "tarmac/sched/pick.hpp"

#include <gtest/gtest.h>

#include "tarmac/util/units.hpp"

namespace tarmac::sched {
namespace {

using util::kGiB;

// n idle GPUs of 80 GiB, UUIDs GPU-0..., NUMA node 0 for the first half and 1 for the rest, PCIe
// (NODE/SYS) between every pair.
gpu::Snapshot fleet(unsigned n) {
  gpu::Snapshot snap;
  gpu::Topology topo;
  topo.links.assign(n, std::vector<gpu::Link>(n, gpu::Link::Sys));
  topo.nvlink_count.assign(n, std::vector<unsigned>(n, 0));
  for (unsigned i = 0; i < n; ++i) {
    gpu::Device d;
    d.id.index = i;
    d.id.uuid = "GPU-" + std::to_string(i);
    d.id.numa_node = i < n / 2 ? 0 : 1;
    d.sample.mem_free_bytes = 80 * kGiB;
    d.sample.util_gpu_pct = 0;
    snap.devices.push_back(d);
    topo.links[i][i] = gpu::Link::Self;
  }
  snap.topology = topo;
  return snap;
}

void nvlink(gpu::Snapshot& snap, unsigned a, unsigned b, unsigned links) {
  snap.topology->links[a][b] = snap.topology->links[b][a] = gpu::Link::NvLink;
  snap.topology->nvlink_count[a][b] = snap.topology->nvlink_count[b][a] = links;
}

TEST(Pick, OneGpuRanksByFreeMemoryThenUtilizationThenIndex) {
  auto snap = fleet(4);
  snap.devices[0].sample.mem_free_bytes = 10 * kGiB;
  snap.devices[1].sample.util_gpu_pct = 5;
  // 1, 2, 3 have 80 GiB free; 1 is busier; 2 and 3 tie: the lower index wins.
  auto r = pick(snap, {}, PickRequest{.n = 1});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.chosen, std::vector<unsigned>{2});
  EXPECT_EQ(r.free, (std::vector<unsigned>{2, 3, 1, 0}));
  snap.devices[3].sample.mem_free_bytes = 81 * kGiB;
  EXPECT_EQ(pick(snap, {}, PickRequest{.n = 1}).chosen, std::vector<unsigned>{3});
}

TEST(Pick, ExcludesWithReasons) {
  auto snap = fleet(6);
  snap.devices[0].lost = "GPU is lost";
  snap.devices[1].processes.push_back(gpu::GpuProcess{.pid = 4242});
  snap.devices[3].sample.mem_free_bytes = 1 * kGiB;
  snap.devices[4].sample.util_gpu_pct = 60;
  auto r = pick(snap, {{"GPU-2", "by bob, job j"}}, PickRequest{.n = 2, .min_free_bytes = 20 * kGiB, .max_util_pct = 50});
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.excluded.size(), 5u);
  EXPECT_EQ(r.excluded[0].reason, Exclusion::Lost);
  EXPECT_EQ(r.excluded[1].reason, Exclusion::Process);
  EXPECT_NE(r.excluded[1].detail.find("4242"), std::string::npos);
  EXPECT_EQ(r.excluded[2].reason, Exclusion::Leased);
  EXPECT_EQ(r.excluded[2].detail, "by bob, job j");
  EXPECT_EQ(r.excluded[3].reason, Exclusion::NotEnoughMemory);
  EXPECT_EQ(r.excluded[4].reason, Exclusion::TooBusy);
  EXPECT_EQ(r.free, std::vector<unsigned>{5});
  EXPECT_TRUE(pick(snap, {{"GPU-2", "by bob, job j"}}, PickRequest{.n = 1, .min_free_bytes = 20 * kGiB, .max_util_pct = 50}).ok());
}

TEST(Pick, AGpuInMigModeIsNeverGivenOutWhole) {
  auto snap = fleet(2);
  // Empty slices, all its memory free, no process on the board: still not a GPU CUDA can use.
  snap.devices[0].modes.mig_mode_current = true;
  snap.devices[0].sample.util_gpu_pct.reset();
  snap.devices[0].mig.resize(7);
  snap.devices[1].modes.mig_mode_pending = true;  // MIG after its next reset: whole until then
  auto r = pick(snap, {}, PickRequest{.n = 1});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.chosen, std::vector<unsigned>{1});
  ASSERT_EQ(r.excluded.size(), 1u);
  EXPECT_EQ(r.excluded[0].reason, Exclusion::Mig);
  EXPECT_NE(r.excluded[0].detail.find("7 MIG devices"), std::string::npos);
  EXPECT_FALSE(pick(snap, {}, PickRequest{.n = 2}).ok());
}

gpu::MigDevice slice(unsigned index, const char* profile, unsigned slices, std::uint64_t total_gib, const char* uuid) {
  gpu::MigDevice m;
  m.index = index;
  m.profile = profile;
  m.slices = slices;
  m.uuid = uuid;
  m.mem_total_bytes = total_gib * kGiB;
  m.mem_free_bytes = total_gib * kGiB;
  return m;
}

TEST(Pick, AMigPickTakesTheSmallestFreeMigDeviceThatFits) {
  auto snap = fleet(3);
  snap.devices[1].modes.mig_mode_current = true;
  snap.devices[1].mig = {slice(0, "3g.40gb", 3, 40, "MIG-a"), slice(1, "1g.10gb", 1, 10, "MIG-b"),
                         slice(2, "1g.10gb", 1, 10, "MIG-c")};
  snap.devices[1].processes.push_back(gpu::GpuProcess{.pid = 77, .mig = 1U});  // on MIG device 1
  snap.devices[2].modes.mig_mode_current = true;
  snap.devices[2].mig = {slice(0, "7g.80gb", 7, 80, "MIG-d")};
  auto r = pick(snap, {}, PickRequest{.mig = std::string()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.chosen, std::vector<unsigned>{1});
  EXPECT_EQ(r.chosen_mig, 2U);  // 1g and free; MIG device 1 has a process
  EXPECT_EQ(r.mig_uuid, "MIG-c");
  // Leased by its MIG UUID: the next smallest.
  r = pick(snap, {{"MIG-c", "by bob"}}, PickRequest{.mig = std::string()});
  EXPECT_EQ(r.mig_uuid, "MIG-a");
  // A profile, and memory.
  EXPECT_EQ(pick(snap, {}, PickRequest{.mig = std::string("7g.80gb")}).mig_uuid, "MIG-d");
  EXPECT_EQ(pick(snap, {}, PickRequest{.min_free_bytes = 50 * kGiB, .mig = std::string()}).mig_uuid, "MIG-d");
  r = pick(snap, {}, PickRequest{.mig = std::string("2g.20gb")});
  EXPECT_FALSE(r.ok());
  // Every MIG device is accounted for, with its reason; the whole GPU 0 is not in MIG mode.
  ASSERT_EQ(r.excluded.size(), 5u);
  EXPECT_EQ(r.excluded[0].reason, Exclusion::Mig);
  EXPECT_FALSE(r.excluded[0].mig.has_value());
  for (std::size_t k = 1; k < 5; ++k) EXPECT_EQ(r.excluded[k].reason, Exclusion::Profile);
  r = pick(snap, {}, PickRequest{.mig = std::string("1g.10gb")});
  EXPECT_EQ(r.mig_uuid, "MIG-c");
  // A process NVML did not place on a MIG device keeps them all.
  snap.devices[2].processes.push_back(gpu::GpuProcess{.pid = 78});
  EXPECT_FALSE(pick(snap, {}, PickRequest{.mig = std::string("7g.80gb")}).ok());
}

TEST(Pick, UnknownFreeMemoryFailsAMemoryRequirement) {
  auto snap = fleet(2);
  snap.devices[0].sample.mem_free_bytes.reset();
  auto r = pick(snap, {}, PickRequest{.n = 1, .min_free_bytes = 1});
  EXPECT_EQ(r.chosen, std::vector<unsigned>{1});
  EXPECT_EQ(pick(snap, {}, PickRequest{.n = 2}).chosen, (std::vector<unsigned>{0, 1}));
}

TEST(Pick, PrefersNvlinkPairsOverBetterRankedGpus) {
  auto snap = fleet(8);
  nvlink(snap, 4, 5, 12);
  nvlink(snap, 6, 7, 12);
  snap.devices[0].sample.mem_free_bytes = 81 * kGiB;  // best ranked, but no NVLink
  snap.devices[1].sample.mem_free_bytes = 81 * kGiB;
  EXPECT_EQ(pick(snap, {}, PickRequest{.n = 2}).chosen, (std::vector<unsigned>{4, 5}));
  // With 4 leased, the other pair.
  EXPECT_EQ(pick(snap, {{"GPU-4", ""}}, PickRequest{.n = 2}).chosen, (std::vector<unsigned>{6, 7}));
}

TEST(Pick, MoreNvlinksWin) {
  auto snap = fleet(4);
  nvlink(snap, 0, 1, 2);
  nvlink(snap, 2, 3, 12);
  EXPECT_EQ(pick(snap, {}, PickRequest{.n = 2}).chosen, (std::vector<unsigned>{2, 3}));
}

TEST(Pick, SetsNeedEveryPairOnNvlink) {
  auto snap = fleet(8);
  nvlink(snap, 0, 1, 4);
  nvlink(snap, 1, 2, 4);  // 0-2 not linked: {0,1,2} is not all-NVLink
  nvlink(snap, 4, 5, 4);
  nvlink(snap, 5, 6, 4);
  nvlink(snap, 4, 6, 4);
  EXPECT_EQ(pick(snap, {}, PickRequest{.n = 3}).chosen, (std::vector<unsigned>{4, 5, 6}));
}

TEST(Pick, WithoutNvlinkPrefersOneNumaNode) {
  auto snap = fleet(4);  // 0,1 on node 0; 2,3 on node 1
  snap.devices[0].sample.util_gpu_pct = 10;
  snap.devices[3].sample.util_gpu_pct = 10;
  // The ranking alone (1, 2, 0, 3) would take 1 and 2, across nodes; {0,1} ranks better than {2,3}.
  EXPECT_EQ(pick(snap, {}, PickRequest{.n = 2}).chosen, (std::vector<unsigned>{0, 1}));
  snap.devices[0].sample.util_gpu_pct = 30;
  snap.devices[1].sample.util_gpu_pct = 30;
  EXPECT_EQ(pick(snap, {}, PickRequest{.n = 2}).chosen, (std::vector<unsigned>{2, 3}));
}

TEST(Pick, NotEnoughFreeGpusChoosesNothing) {
  auto snap = fleet(2);
  snap.devices[1].processes.push_back(gpu::GpuProcess{.pid = 7});
  auto r = pick(snap, {}, PickRequest{.n = 2});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.free, std::vector<unsigned>{0});
}

TEST(Pick, ManyGpusStaysFastAndValid) {
  auto snap = fleet(32);
  for (unsigned i = 0; i + 1 < 32; i += 2) nvlink(snap, i, i + 1, 4);
  auto r = pick(snap, {}, PickRequest{.n = 2});
  ASSERT_EQ(r.chosen.size(), 2u);
  EXPECT_EQ(r.chosen[0] + 1, r.chosen[1]);
  EXPECT_EQ(pick(snap, {}, PickRequest{.n = 20}).chosen.size(), 20u);
}


TEST(Pick, AMigRequestIsOneDeviceOfANamedProfileOrAny) {
  const auto req = [](std::string mig) { return PickRequest{.mig = std::move(mig)}; };
  for (const char* ok : {"", "1g.18gb", "3g.71gb", "7g.141gb", "1g.18gb+me", "1g.23gb-me", "1g.24gb+gfx",
                         "1g.24gb+me.all"}) {
    EXPECT_EQ(mig_request_error(req(ok)), std::nullopt) << ok;
  }
  for (const char* bad : {"any", "1g", "9g.10gb", "0g.10gb", "1g.gb", "1g.12345gb", "1g.18gb+", "1g.18gb+ME",
                          "1g.18gb;rm", "1g.18GB", "g.18gb", "1g.18gb+abcdefghijklm", "1g.18gb+.me",
                          "1g.18gb+me."}) {
    const auto why = mig_request_error(req(bad));
    ASSERT_TRUE(why.has_value()) << bad;
    EXPECT_NE(why->find("is not a MIG profile"), std::string::npos) << *why;
  }
  EXPECT_NE(mig_request_error(PickRequest{.n = 2, .mig = std::string()})->find("one MIG device"), std::string::npos);
  EXPECT_NE(mig_request_error(PickRequest{.max_util_pct = 50, .mig = std::string()})->find("--max-util"),
            std::string::npos);
  EXPECT_EQ(mig_request_error(PickRequest{.n = 2, .max_util_pct = 50}), std::nullopt) << "not a MIG request";
  // A profile is shown escaped: it comes from the socket.
  EXPECT_EQ(mig_request_error(req("1g\x1b[2J"))->find('\x1b'), std::string::npos);
}

TEST(Pick, WhatIsGivenIsTheMigDevicesUuidOrTheGpusInOrder) {
  auto snap = fleet(3);
  PickResult whole;
  whole.chosen = {0, 2};
  EXPECT_EQ(given_uuids(snap, whole), (std::vector<std::string>{*snap.devices[0].id.uuid, *snap.devices[2].id.uuid}));
  PickResult mig;
  mig.chosen = {1};
  mig.mig_uuid = "MIG-x";
  EXPECT_EQ(given_uuids(snap, mig), std::vector<std::string>{"MIG-x"});
  EXPECT_TRUE(is_mig_uuid("MIG-x"));
  EXPECT_FALSE(is_mig_uuid(*snap.devices[0].id.uuid));
  EXPECT_EQ(wanted_text(PickRequest{.n = 1}), "1 free GPU");
  EXPECT_EQ(wanted_text(PickRequest{.n = 3}), "3 free GPUs");
  EXPECT_EQ(wanted_text(PickRequest{.mig = std::string()}), "a free MIG device");
  EXPECT_EQ(wanted_text(PickRequest{.mig = std::string("1g.18gb")}), "a free MIG device of profile 1g.18gb");
}

}  // namespace
}  // namespace tarmac::sched
