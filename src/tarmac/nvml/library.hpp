// The dlopen loader for NVIDIA's driver library: finds libnvidia-ml.so.1, resolves every entry
// point of nvml_functions.def (required versus optional), initialises NVML and shuts it down.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tarmac/nvml/nvml_api.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::nvml {

// Every entry point of the table; nullptr when the loaded library does not export it.
struct Functions {
#define X(name, params, need) PFN_##name name = nullptr;
#include "tarmac/nvml/nvml_functions.def"
#undef X
  PFN_nvmlErrorString nvmlErrorString = nullptr;
};

struct LoadOptions {
  // Explicit library path (--nvml-lib); empty: $TARMAC_NVML_LIB, then the loader's search path.
  std::string library_path;
  // Initialise even when the machine has no GPU (NVML_INIT_FLAG_NO_GPUS).
  bool allow_no_gpus = true;
};

// A loaded and initialised NVML. Destruction shuts NVML down and closes the library.
class Library {
 public:
  // Loads the library and initialises NVML; errors name what to check (driver, container, path).
  [[nodiscard]] static Result<std::unique_ptr<Library>> open(const LoadOptions& options);

  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();

  [[nodiscard]] const Functions& fn() const { return fn_; }
  // The path that was loaded, as asked for (a name when the search path found it).
  [[nodiscard]] const std::string& path() const { return path_; }
  // Optional entry points the library lacks (an older driver): their values are "not supported".
  [[nodiscard]] const std::vector<std::string>& missing_optional() const { return missing_optional_; }

 private:
  Library() = default;
  void* handle_ = nullptr;
  bool initialised_ = false;
  bool profiled_ = false;  // TARMAC_NVML_PROFILE: every call timed, the table printed at exit
  std::string path_;
  Functions fn_;
  std::vector<std::string> missing_optional_;
};

// The return code's NVML name, e.g. "NVML_ERROR_GPU_IS_LOST"; "NVML_ERROR_<n>" when unknown.
[[nodiscard]] std::string return_code_name(nvmlReturn_t code);

// A sentence for people saying what the return code means and, where useful, what to check.
[[nodiscard]] std::string return_code_message(nvmlReturn_t code);

// What NVML said when a call failed, carried as the cause of nvml_error's Error, so that a front
// end that must speak as NVIDIA's own tools do (query, as nvidia-smi) can recover it.
struct Failure {
  nvmlReturn_t code = NVML_SUCCESS;
  std::string library_text;  // the library's nvmlErrorString for the code; empty when not asked
};

// An Error of code External naming the call and the return code, with a Failure as its cause.
[[nodiscard]] Error nvml_error(std::string_view call, nvmlReturn_t code, std::string library_text = {});

// The Failure an Error of nvml_error carries; nullptr for any other error.
[[nodiscard]] const Failure* failure_of(const Error& error);

}  // namespace tarmac::nvml
