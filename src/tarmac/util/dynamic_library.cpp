#include "tarmac/util/dynamic_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <fmt/format.h>

namespace tarmac::util {

Result<DynamicLibrary> DynamicLibrary::open(const char* name, const char* override_env, std::string_view install_hint) {
  // secure_getenv: a process that gained privileges (setuid, file capabilities) takes no library
  // from the environment of whoever started it.
  const char* path = ::secure_getenv(override_env);
  std::string file = path != nullptr && *path != '\0' ? path : name;
  dlerror();
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return make_error(Error::Code::NotFound,
                      fmt::format("cannot load {} ({}): {}", file, why != nullptr ? why : "unknown error", install_hint));
  }
  return DynamicLibrary(handle, std::move(file));
}

void* DynamicLibrary::find(const char* symbol) {
  void* found = dlsym(handle_, symbol);
  if (found == nullptr) missing_ += (missing_.empty() ? "" : ", ") + std::string(symbol);
  return found;
}

Result<void> DynamicLibrary::complete(std::string_view what) const {
  if (missing_.empty()) return {};
  return make_error(Error::Code::Unsupported, fmt::format("{} is not {}: it lacks {}", name_, what, missing_));
}

}  // namespace tarmac::util
