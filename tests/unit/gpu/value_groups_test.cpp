#include "tarmac/gpu/value_groups.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace tarmac::gpu {
namespace {

TEST(ValueGroups, SetOperations) {
  const ValueGroups none;
  EXPECT_TRUE(none.empty());
  const ValueGroups two{ValueGroup::Name, ValueGroup::ClockSm};
  EXPECT_TRUE(two.has(ValueGroup::Name));
  EXPECT_TRUE(two.has(ValueGroup::ClockSm));
  EXPECT_FALSE(two.has(ValueGroup::ClockMem));
  EXPECT_EQ(two.without({ValueGroup::Name}), ValueGroups{ValueGroup::ClockSm});
  EXPECT_TRUE(two.without(two).empty());
  EXPECT_EQ(ValueGroups{ValueGroup::Name} | ValueGroups{ValueGroup::ClockSm}, two);
}

TEST(ValueGroups, AllHoldsEveryGroupAndEachHasItsOwnName) {
  std::set<std::string> names;
  for (unsigned g = 0; g < kValueGroupCount; ++g) {
    const auto group = static_cast<ValueGroup>(g);
    EXPECT_TRUE(ValueGroups::all().has(group)) << g;
    names.emplace(to_string(group));
  }
  EXPECT_EQ(names.size(), kValueGroupCount);
  EXPECT_EQ(names.count("unknown"), 0U);
  EXPECT_TRUE(ValueGroups::all().without(ValueGroups::all()).empty());
}

}  // namespace
}  // namespace tarmac::gpu
