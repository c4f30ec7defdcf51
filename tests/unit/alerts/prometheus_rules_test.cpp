#include "tarmac/alerts/prometheus_rules.hpp"

#include <gtest/gtest.h>

namespace tarmac::alerts {
namespace {

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(PrometheusRules, OneRulePerEnabledRuleWithItsThresholdsAndFor) {
  const std::string text = prometheus_rules(AlertConfig{}, gpu::ActivityThresholds{});
  EXPECT_NE(text.find("groups:\n  - name: tarmac\n    rules:\n"), std::string::npos) << text;
  EXPECT_EQ(count(text, "      - alert: "), kRules.size());
  for (Rule r : kRules) EXPECT_NE(text.find(std::string("alert: ") + prometheus_alert_name(r) + "\n"), std::string::npos);
  EXPECT_NE(text.find("alert: TarmacGpuStarved\n        expr: '(DCGM_FI_DEV_GPU_UTIL < 30) and"), std::string::npos);
  EXPECT_NE(text.find(">= 50)"), std::string::npos);
  EXPECT_NE(text.find("for: 10m\n        labels:\n          severity: warning\n          tarmac_rule: starvation\n"),
            std::string::npos);
  EXPECT_NE(text.find("expr: 'tarmac_gpu_activity{class=\"holding\"} == 1'\n        for: 0s\n"), std::string::npos);
  EXPECT_NE(text.find("expr: '(DCGM_FI_DEV_GPU_TEMP >= 85) or on(instance, gpu) (tarmac_gpu_clock_events_thermal == 1)'\n"
                      "        for: 1m\n        labels:\n          severity: critical\n"),
            std::string::npos);
  EXPECT_NE(text.find("(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) >= 98'\n        for: 1m\n"), std::string::npos);
  EXPECT_NE(text.find("tarmac_gpu_activity{class=~\"idle|reserved-idle\"} == 1'\n        for: 1h\n"), std::string::npos);
  EXPECT_NE(text.find("summary: \"GPU {{ $labels.gpu }} on {{ $labels.instance }}"), std::string::npos);
  EXPECT_NE(text.find("max by (instance, slurm_job)"), std::string::npos);
}

TEST(PrometheusRules, FollowsTheConfiguration) {
  AlertConfig c;
  c.thermal_c = 80;
  c.thermal_for_ms = 90 * 1000;
  c.disabled = {Rule::Idle, Rule::Imbalance};
  const std::string text = prometheus_rules(c, gpu::ActivityThresholds{});
  EXPECT_EQ(count(text, "      - alert: "), kRules.size() - 2);
  EXPECT_EQ(text.find("TarmacGpuIdle"), std::string::npos);
  EXPECT_EQ(text.find("TarmacJobImbalance"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_TEMP >= 80"), std::string::npos);
  EXPECT_NE(text.find("for: 1m30s"), std::string::npos);
}

}  // namespace
}  // namespace tarmac::alerts
