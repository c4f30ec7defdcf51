#include "tarmac/nvml/library.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>

#include "tarmac/nvml/profile.hpp"

namespace tarmac::nvml {
namespace {

constexpr const char* kDefaultName = "libnvidia-ml.so.1";

std::string choose_path(const LoadOptions& options) {
  if (!options.library_path.empty()) return options.library_path;
  if (const char* env = std::getenv("TARMAC_NVML_LIB"); env != nullptr && *env != '\0') return env;
  return kDefaultName;
}

Error not_found(const std::string& path, const char* dl_message) {
  return make_error(
      Error::Code::NotFound,
      fmt::format("the NVIDIA driver library was not found: cannot load {} ({}).\n"
                  "Check that the NVIDIA driver is installed (`nvidia-smi` should work). In a container, start it "
                  "with GPU access (`docker run --gpus all`, with the NVIDIA Container Toolkit installed). "
                  "Or point --nvml-lib / TARMAC_NVML_LIB at libnvidia-ml.so.1.",
                  path, dl_message != nullptr ? dl_message : "unknown error"));
}

}  // namespace

Result<std::unique_ptr<Library>> Library::open(const LoadOptions& options) {
  std::unique_ptr<Library> lib(new Library());
  lib->path_ = choose_path(options);
  lib->profiled_ = profile_wanted();
  const auto load_began = std::chrono::steady_clock::now();
  dlerror();
  lib->handle_ = dlopen(lib->path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) return not_found(lib->path_, dlerror());
  if (lib->profiled_) {
    profile_load(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                              load_began).count());
  }

  std::vector<std::string> missing_required;
  auto resolve = [&](const char* name, Need need) -> void* {
    void* sym = dlsym(lib->handle_, name);
    if (sym == nullptr) (need == Need::Required ? missing_required : lib->missing_optional_).emplace_back(name);
    return sym;
  };
  // dlsym returns void*; converting it to a function pointer is what POSIX guarantees to work.
#define X(name, params, need) lib->fn_.name = reinterpret_cast<PFN_##name>(resolve(#name, Need::need));
#include "tarmac/nvml/nvml_functions.def"
#undef X
  lib->fn_.nvmlErrorString = reinterpret_cast<PFN_nvmlErrorString>(resolve("nvmlErrorString", Need::Optional));

  if (!missing_required.empty()) {
    std::string names;
    for (const auto& name : missing_required) names += (names.empty() ? "" : ", ") + name;
    return make_error(Error::Code::Unsupported,
                      fmt::format("{} is not a usable NVML library: it lacks {} (a very old or broken driver?)",
                                  lib->path_, names));
  }
  if (lib->profiled_) profile_calls(lib->fn_);

  // Newest initialiser first: InitWithFlags lets a machine with no GPU still answer.
  nvmlReturn_t rc = NVML_ERROR_FUNCTION_NOT_FOUND;
  const char* call = "nvmlInit";
  if (lib->fn_.nvmlInitWithFlags != nullptr) {
    call = "nvmlInitWithFlags";
    rc = lib->fn_.nvmlInitWithFlags(options.allow_no_gpus ? NVML_INIT_FLAG_NO_GPUS : 0U);
  } else if (lib->fn_.nvmlInit_v2 != nullptr) {
    call = "nvmlInit_v2";
    rc = lib->fn_.nvmlInit_v2();
  } else {
    rc = lib->fn_.nvmlInit();
  }
  if (rc != NVML_SUCCESS) {
    // The library's own words for the code, as nvidia-smi prints them ("Insufficient Permissions").
    std::string library_text;
    if (lib->fn_.nvmlErrorString != nullptr) {
      if (const char* text = lib->fn_.nvmlErrorString(rc); text != nullptr) library_text = text;
    }
    return nvml_error(call, rc, std::move(library_text));
  }
  lib->initialised_ = true;
  return lib;
}

Library::~Library() {
  if (initialised_ && fn_.nvmlShutdown != nullptr) fn_.nvmlShutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

}  // namespace tarmac::nvml
