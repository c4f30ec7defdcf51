// Keys an older tarmac read and that another key now decides (one definition of starved).
#include <gtest/gtest.h>

#include "tarmac/config/config.hpp"

namespace tarmac::config {
namespace {

TEST(ConfigRetired, TheAlertsOwnStarvationThresholdsWarnNamingTheActivityKey) {
  std::vector<std::string> warnings;
  auto c = parse("[alerts]\nstarvation_util_pct = 20\n\nstarvation_mem_pct = 70\n", "t.toml", Config{}, warnings);
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(warnings.size(), 2U);
  EXPECT_EQ(warnings[0],
            "t.toml:2: 'alerts.starvation_util_pct' is no longer read: activity.busy_util_pct decides it for the GPU "
            "class, the alert and doctor alike (ignored)");
  EXPECT_NE(warnings[1].find("t.toml:4: 'alerts.starvation_mem_pct' is no longer read: activity.starved_mem_pct"),
            std::string::npos);
  EXPECT_EQ(c->activity.busy_util_pct, Config{}.activity.busy_util_pct);
}

}  // namespace
}  // namespace tarmac::config
