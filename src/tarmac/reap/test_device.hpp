// The device file in tests (docs/reap.md, "The device file in tests"): no test can create a GPU's
// device node (major 195) without the driver, so a build with tests (TARMAC_TEST_SEAMS, on with
// TARMAC_BUILD_TESTS) takes TARMAC_REAP_TEST_DEVICE_FILE's character device for every GPU's own
// file. A build without tests, the release binary among them, has no such seam: both functions
// then say "none" whatever the environment holds.
#pragma once

#include <optional>
#include <string>

#include "tarmac/host/device_files.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::reap {

// TARMAC_REAP_TEST_DEVICE_FILE, the one path besides NVIDIA's device files whose descriptors are
// stat'ed (host::ProcReader's test_device_path); "" when unset or compiled out.
[[nodiscard]] std::string test_device_path();

// The character device that path names, taken for every GPU's own file
// (GatherOptions::device_file_override); nullopt when unset or compiled out, an error when it names
// no character device.
[[nodiscard]] Result<std::optional<host::DeviceNumber>> test_device_file();

}  // namespace tarmac::reap
