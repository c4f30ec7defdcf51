#include "tarmac/reap/gate.hpp"

#include <cstdlib>
#include <fmt/format.h>
#include <string_view>

namespace tarmac::reap {

bool kill_gate_open() {
  const char* value = std::getenv("TARMAC_REAP_KILL_PREVIEW");
  return value != nullptr && std::string_view(value) == "1";
}

const char* kill_gate_reason() {
  return "not enabled yet: the fixes for a security review of it (docs/reap.md, \"Safety checks\") await a second "
         "review";
}

std::string test_device_path() {
#ifdef TARMAC_TEST_SEAMS
  const char* path = std::getenv("TARMAC_REAP_TEST_DEVICE_FILE");
  if (path == nullptr || !kill_gate_open()) return {};
  return path;
#else
  return {};  // a build without tests has no seam (TARMAC_TEST_SEAMS)
#endif
}

Result<std::optional<host::DeviceNumber>> test_device_file() {
  const std::string path = test_device_path();
  if (path.empty()) return std::optional<host::DeviceNumber>{};
  const auto device = host::char_device_of(path);
  if (!device) {
    return make_error(Error::Code::Invalid, fmt::format("TARMAC_REAP_TEST_DEVICE_FILE {}: not a character device", path));
  }
  return std::optional<host::DeviceNumber>(*device);
}

}  // namespace tarmac::reap
