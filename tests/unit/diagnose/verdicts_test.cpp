#include "tarmac/diagnose/verdicts.hpp"

#include <gtest/gtest.h>

#include "tarmac/util/units.hpp"

namespace tarmac::diagnose {
namespace {

constexpr long long kNow = 1'800'000'000;

// A board in MIG mode with three MIG devices; the first has a process holding memory at 0 % for
// an hour, the other two are empty.
gpu::Device board() {
  gpu::Device d;
  d.id.index = 3;
  d.id.uuid = "GPU-board";
  d.modes.mig_mode_current = true;
  for (unsigned k = 0; k < 3; ++k) {
    gpu::MigDevice m;
    m.index = k;
    m.uuid = "MIG-" + std::to_string(k);
    m.mem_total_bytes = 20480 * util::kMiB;
    m.mem_used_bytes = (k == 0 ? 15000 : 0) * util::kMiB;
    m.gpm_sm_active_pct = 0.0;
    d.mig.push_back(m);
  }
  gpu::GpuProcess p;
  p.pid = 2000;
  p.host.start_time_unix = kNow - 3600;
  p.mig = 0;
  d.processes.push_back(p);
  return d;
}

TEST(OverlayMigLeases, ALeasedEmptyMigDeviceIsReservedIdleAndWhatRunsKeepsItsClass) {
  const gpu::Device d = board();
  const gpu::ActivityThresholds t;
  std::vector<gpu::MigActivity> classes;
  for (std::size_t k = 0; k < d.mig.size(); ++k) classes.push_back(gpu::classify_mig(d, k, t, kNow));
  ASSERT_EQ(classes[0].activity, gpu::Activity::Holding);
  ASSERT_EQ(classes[1].activity, gpu::Activity::Idle);
  const std::map<std::string, GpuLease> leases{{"MIG-0", {"job 7 alice", "7"}}, {"MIG-1", {"lease bob", ""}},
                                               {"GPU-board", {"lease carol", ""}}};
  const auto got = overlay_mig_leases(d, leases, t, kNow, classes);
  ASSERT_EQ(got.size(), 3U);
  EXPECT_EQ(got[0].label, "job 7 alice");
  EXPECT_EQ(got[0].cancel_id, "7");
  EXPECT_EQ(got[1].label, "lease bob");
  EXPECT_EQ(got[2].label, "");  // the board's own lease is not its MIG devices'
  EXPECT_EQ(classes[0].activity, gpu::Activity::Holding);  // leased, but something runs on it
  EXPECT_EQ(classes[1].activity, gpu::Activity::ReservedIdle);
  EXPECT_EQ(classes[2].activity, gpu::Activity::Idle);  // not leased
}

TEST(OverlayMigLeases, ClassesThatAreNotKnownStayUnknown) {
  const gpu::Device d = board();
  std::vector<gpu::MigActivity> classes;  // none known (an agent that sent none)
  const auto got = overlay_mig_leases(d, {{"MIG-1", {"lease bob", ""}}}, gpu::ActivityThresholds{}, kNow, classes);
  EXPECT_EQ(got.size(), 3U);
  EXPECT_TRUE(classes.empty());
}

}  // namespace
}  // namespace tarmac::diagnose
