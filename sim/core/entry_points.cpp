#include "entry_points.hpp"

#include <algorithm>
#include <array>

namespace tarmac::sim {

namespace {

#define X(name, params, need) std::string_view{#name},
constexpr std::array kTable{
#include "tarmac/nvml/nvml_functions.def"
};
#undef X

#define STUB(name) std::string_view{#name},
constexpr std::array kStubs{
#include "entry_points/nvidia_smi_stubs.def"
};
#undef STUB

#define NEWER(name) std::string_view{#name},
constexpr std::array kNewer{
#include "entry_points/newer.def"
};
#undef NEWER

constexpr std::array<std::string_view, 2> kOthers{"nvmlErrorString", "nvmlInternalGetExportTable"};

}  // namespace

std::span<const std::string_view> table_entry_points() { return kTable; }
std::span<const std::string_view> stub_entry_points() { return kStubs; }
std::span<const std::string_view> newer_entry_points() { return kNewer; }

bool is_entry_point(std::string_view name) {
  auto in = [name](auto& list) { return std::find(list.begin(), list.end(), name) != list.end(); };
  return in(kTable) || in(kStubs) || in(kOthers);
}

}  // namespace tarmac::sim
