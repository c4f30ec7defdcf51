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

std::vector<VisibleDevice> visible_devices(const Scenario& scenario, std::optional<std::string_view> visible,
                                           DeviceOrder order) {
  const auto in_mig = [&](unsigned i) { return scenario.gpus[i].mig_mode.value_or(false); };
  // CUDA's indices count the GPUs it can use whole: not those in MIG mode.
  std::vector<unsigned> enumeration;
  for (unsigned i : cuda_order(scenario, order)) {
    if (!in_mig(i)) enumeration.push_back(i);
  }
  std::vector<VisibleDevice> out;
  if (!visible) {
    for (unsigned i : enumeration) out.push_back({i, std::nullopt});
    if (out.empty()) {
      for (unsigned i : cuda_order(scenario, order)) {
        if (!scenario.gpus[i].mig.empty()) return {{i, 0U}};
      }
    }
    return out;
  }
  for (const std::string& raw : util::split(*visible, ',')) {
    const std::string_view token = util::trim(raw);
    std::optional<VisibleDevice> pick;
    bool ambiguous = false;
    const auto take = [&](VisibleDevice d) {
      ambiguous = ambiguous || pick.has_value();
      pick = d;
    };
    if (auto index = util::parse_int(token)) {
      if (*index >= 0 && static_cast<std::size_t>(*index) < enumeration.size()) {
        pick = VisibleDevice{enumeration[static_cast<std::size_t>(*index)], std::nullopt};
      }
    } else if (token.starts_with("GPU-") && token.size() > 4) {
      for (unsigned i = 0; i < scenario.gpus.size(); ++i) {
        if (scenario.gpus[i].uuid.starts_with(token)) take({i, std::nullopt});
      }
    } else if (token.starts_with("MIG-") && token.size() > 4) {
      for (unsigned i = 0; i < scenario.gpus.size(); ++i) {
        for (unsigned m = 0; m < scenario.gpus[i].mig.size(); ++m) {
          if (scenario.gpus[i].mig[m].uuid.starts_with(token)) take({i, m});
        }
      }
    }
    if (ambiguous) pick.reset();  // an ambiguous prefix names no device
    // A GPU in MIG mode named whole is no device to CUDA: enumeration stops there.
    if (pick && !pick->mig && in_mig(pick->gpu)) pick.reset();
    if (!pick || std::find(out.begin(), out.end(), *pick) != out.end()) break;
    if (pick->mig) {
      if (out.empty()) out.push_back(*pick);
      break;
    }
    out.push_back(*pick);
  }
  return out;
}

std::vector<unsigned> visible_gpus(const Scenario& scenario, std::optional<std::string_view> visible,
                                   DeviceOrder order) {
  std::vector<unsigned> out;
  for (const VisibleDevice& d : visible_devices(scenario, visible, order)) {
    if (!d.mig) out.push_back(d.gpu);
  }
  return out;
}

}  // namespace tarmac::sim
