#include "tarmac/fields/select.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "tarmac/fields/readers.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::fields {

namespace {

bool same_bus(std::string_view id, const std::optional<std::string>& bus_id) {
  if (!bus_id) return false;
  const auto a = detail::parse_pci_bus_id(id);
  const auto b = detail::parse_pci_bus_id(*bus_id);
  return a && b && a->domain == b->domain && a->bus == b->bus && a->device == b->device && a->function == b->function;
}

// An index as nvidia-smi reads one (strtol over the whole id): " 1", "01" and "+1" are GPU 1.
std::optional<unsigned long long> parse_index(std::string_view id) {
  while (!id.empty() && (id.front() == ' ' || id.front() == '\t')) id.remove_prefix(1);
  if (!id.empty() && id.front() == '+') id.remove_prefix(1);
  if (id.empty() || id.size() > 9 || id.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  return std::stoull(std::string(id));
}

bool names(std::string_view id, const gpu::Device& d) {
  if (auto index = parse_index(id); index && *index == d.id.index) return true;
  if (d.id.uuid && id == *d.id.uuid) return true;
  if (d.id.serial && id == *d.id.serial) return true;
  return id.find(':') != std::string_view::npos && same_bus(id, d.id.pci_bus_id);
}

}  // namespace

Result<std::vector<std::size_t>> select_devices(std::string_view ids, const std::vector<gpu::Device>& devices) {
  const auto wanted = util::split(ids, ',');
  if (std::all_of(wanted.begin(), wanted.end(), [](const std::string& id) { return id.empty(); })) {
    return make_error(Error::Code::Invalid, std::string(kBadDeviceString));
  }
  std::vector<std::size_t> out;
  for (std::size_t at = 0; at < devices.size(); ++at) {
    const auto named = [&](const std::string& id) { return names(id, devices[at]); };
    if (std::any_of(wanted.begin(), wanted.end(), named)) out.push_back(at);
  }
  if (out.empty()) return make_error(Error::Code::NotFound, std::string(kNoDevicesFound));
  return out;
}

}  // namespace tarmac::fields
