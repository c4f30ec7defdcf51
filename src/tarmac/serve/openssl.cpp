#include "tarmac/serve/openssl.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <fmt/format.h>
#include <string>
#include <type_traits>

namespace tarmac::serve {

namespace {

constexpr const char* kLibrary = "libssl.so.3";

}  // namespace

const Result<OpenSsl>& openssl() {
  static const Result<OpenSsl> loaded = []() -> Result<OpenSsl> {
    const char* path = std::getenv("TARMAC_OPENSSL_LIB");
    const std::string name = path != nullptr && *path != '\0' ? path : kLibrary;
    dlerror();
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return make_error(Error::Code::NotFound,
                        fmt::format("cannot load {} ({}): install OpenSSL 3 (Debian: apt install libssl3) for the "
                                    "agent's HTTPS endpoint and its basic authentication",
                                    name, why != nullptr ? why : "unknown error"));
    }
    OpenSsl o;
    std::string missing;
    // dlsym on the handle also searches what libssl needs (libcrypto), where the ERR_, BIO_, PEM_,
    // X509_ and EVP_ functions are. dlsym's void* to a function pointer: what POSIX guarantees.
    const auto resolve = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
      if (fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
    };
#define TARMAC_OPENSSL_RESOLVE(name) resolve(o.name, #name);
    TARMAC_OPENSSL_FUNCTIONS(TARMAC_OPENSSL_RESOLVE)
#undef TARMAC_OPENSSL_RESOLVE
    if (!missing.empty()) {
      return make_error(Error::Code::Unsupported, fmt::format("{} is not a usable OpenSSL 3: it lacks {}", name, missing));
    }
    return o;
  }();
  return loaded;
}

}  // namespace tarmac::serve
