// Compile-time and link-time proof that the library defines every row of nvml_functions.def
// with exactly the table's signature: a static_assert per row against tarmac::nvml::PFN_<name>,
// and a table of every row's address, which fails to link (-Wl,--no-undefined) if one is missing.
#include <type_traits>

#include "exports.hpp"

namespace tarmac::nvml {

#define X(name, params, need) \
  static_assert(std::is_same_v<decltype(&name), PFN_##name>, #name " does not match its nvml_functions.def row");
#include "tarmac/nvml/nvml_functions.def"
#undef X
static_assert(std::is_same_v<decltype(&nvmlErrorString), PFN_nvmlErrorString>);

// Referenced from nowhere but kept by `used`: every row must have a definition to link.
[[gnu::used]] const void* const g_every_entry_point[] = {
#define X(name, params, need) reinterpret_cast<const void*>(&name),
#include "tarmac/nvml/nvml_functions.def"
#undef X
    reinterpret_cast<const void*>(&nvmlErrorString),
    reinterpret_cast<const void*>(&nvmlInternalGetExportTable),
};

}  // namespace tarmac::nvml
