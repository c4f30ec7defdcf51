// How an NVML return code travels in an Error: util::Error knows nothing of NVML, so nvml_error
// puts a Failure in the error's cause and failure_of is the only way back to it.
#include <gtest/gtest.h>

#include "tarmac/nvml/library.hpp"

namespace tarmac::nvml {
namespace {

TEST(NvmlError, NamesTheCallAndTheCodeInItsMessage) {
  const Error e = nvml_error("nvmlDeviceGetCount", NVML_ERROR_UNKNOWN);
  EXPECT_EQ(e.code, Error::Code::External);
  EXPECT_EQ(e.message, "nvmlDeviceGetCount failed: an unknown driver error occurred (NVML_ERROR_UNKNOWN)");
}

TEST(NvmlError, CarriesTheReturnCodeAndTheLibrarysText) {
  const Error e = nvml_error("nvmlInit_v2", NVML_ERROR_NO_PERMISSION, "Insufficient Permissions");
  const Failure* failure = failure_of(e);
  ASSERT_NE(failure, nullptr);
  EXPECT_EQ(failure->code, NVML_ERROR_NO_PERMISSION);
  EXPECT_EQ(failure->library_text, "Insufficient Permissions");
  EXPECT_EQ(failure_of(nvml_error("nvmlInit", NVML_ERROR_UNKNOWN))->library_text, "");
}

Result<void> fails_in_nvml() { return nvml_error("nvmlDeviceGetCount", NVML_ERROR_GPU_IS_LOST); }

Result<int> propagates() {
  TARMAC_TRY(fails_in_nvml());
  return 1;
}

TEST(NvmlError, TheFailureSurvivesCopiesAndPropagation) {
  auto r = propagates();
  ASSERT_FALSE(r.ok());
  const Error copy = r.error();
  ASSERT_NE(failure_of(copy), nullptr);
  EXPECT_EQ(failure_of(copy)->code, NVML_ERROR_GPU_IS_LOST);
  const Error moved = r.take_error();
  ASSERT_NE(failure_of(moved), nullptr);
  EXPECT_EQ(failure_of(moved)->code, NVML_ERROR_GPU_IS_LOST);
}

TEST(NvmlError, OtherErrorsHaveNoFailure) {
  EXPECT_EQ(failure_of(make_error(Error::Code::Io, "read failed")), nullptr);
  // Another layer's cause, even one that holds a number like a return code, is not NVML's.
  EXPECT_EQ(failure_of(make_error(Error::Code::External, "sqlite: disk full", 13)), nullptr);
  struct OtherCause {
    int code;
  };
  EXPECT_EQ(failure_of(make_error(Error::Code::External, "other", OtherCause{9})), nullptr);
}

}  // namespace
}  // namespace tarmac::nvml
