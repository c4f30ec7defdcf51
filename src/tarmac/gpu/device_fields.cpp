#include "tarmac/gpu/device_fields.hpp"

#include <optional>
#include <type_traits>

namespace tarmac::gpu {

namespace {

// For each optional member of the list: into's, else from's.
template <class S>
auto filler(S& into, const S& from) {
  return [&](const char*, auto member) {
    auto& mine = into.*member;
    if constexpr (is_optional<std::remove_reference_t<decltype(mine)>>::value) {
      if (!mine) mine = from.*member;
    }
  };
}

}  // namespace

void fill_unread(Device& into, const Device& from) {
  identity_fields(filler(into.id, from.id));
  if (into.id.cpu_affinity.empty()) into.id.cpu_affinity = from.id.cpu_affinity;
  modes_fields(filler(into.modes, from.modes));
  sample_fields(filler(into.sample, from.sample));
}

}  // namespace tarmac::gpu
