#include "tarmac/reap/test_device.hpp"

#include <cstdlib>
#include <fmt/format.h>

namespace tarmac::reap {

std::string test_device_path() {
#ifdef TARMAC_TEST_SEAMS
  const char* path = std::getenv("TARMAC_REAP_TEST_DEVICE_FILE");
  return path == nullptr ? std::string() : std::string(path);
#else
  return {};
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
