#include "cuda_visible.hpp"

#include <algorithm>
#include <numeric>

#include "tarmac/util/strings.hpp"

namespace tarmac::sim {

DeviceOrder parse_device_order(std::optional<std::string_view> value) {
  return value && util::trim(*value) == "PCI_BUS_ID" ? DeviceOrder::PciBusId : DeviceOrder::FastestFirst;
}

std::vector<unsigned> cuda_order(const Scenario& scenario, DeviceOrder order) {
  std::vector<unsigned> out(scenario.gpus.size());
  std::iota(out.begin(), out.end(), 0U);
  if (order == DeviceOrder::PciBusId) return out;
  auto speed = [&](unsigned i) {
    const GpuSpec& g = scenario.gpus[i];
    return static_cast<unsigned long long>(g.multiprocessors) * (g.max_clocks ? g.max_clocks->sm : 0);
  };
  std::stable_sort(out.begin(), out.end(), [&](unsigned a, unsigned b) {
    const GpuSpec& ga = scenario.gpus[a];
    const GpuSpec& gb = scenario.gpus[b];
    if (ga.cc_major != gb.cc_major) return ga.cc_major > gb.cc_major;
    if (ga.cc_minor != gb.cc_minor) return ga.cc_minor > gb.cc_minor;
    return speed(a) > speed(b);
  });
  return out;
}

std::vector<unsigned> visible_gpus(const Scenario& scenario, std::optional<std::string_view> visible,
                                   DeviceOrder order) {
  const std::vector<unsigned> enumeration = cuda_order(scenario, order);
  if (!visible) return enumeration;
  std::vector<unsigned> out;
  for (const std::string& raw : util::split(*visible, ',')) {
    const std::string_view token = util::trim(raw);
    std::optional<unsigned> pick;
    if (auto index = util::parse_int(token)) {
      if (*index >= 0 && static_cast<std::size_t>(*index) < enumeration.size()) {
        pick = enumeration[static_cast<std::size_t>(*index)];
      }
    } else if (token.starts_with("GPU-") && token.size() > 4) {
      for (unsigned i = 0; i < scenario.gpus.size(); ++i) {
        if (!scenario.gpus[i].uuid.starts_with(token)) continue;
        if (pick) {  // an ambiguous prefix names no device
          pick.reset();
          break;
        }
        pick = i;
      }
    }
    if (!pick || std::find(out.begin(), out.end(), *pick) != out.end()) break;
    out.push_back(*pick);
  }
  return out;
}

}  // namespace tarmac::sim
