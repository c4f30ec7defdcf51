#include "tarmac/serve/openssl.hpp"

#include "tarmac/util/dynamic_library.hpp"

namespace tarmac::serve {

const Result<OpenSsl>& openssl() {
  static const Result<OpenSsl> loaded = []() -> Result<OpenSsl> {
    auto lib = util::DynamicLibrary::open("libssl.so.3", "TARMAC_OPENSSL_LIB",
                                          "install OpenSSL 3 (Debian: apt install libssl3) for the agent's HTTPS "
                                          "endpoint and its basic authentication");
    if (!lib.ok()) return lib.error();
    // Symbols are also searched in what libssl needs: libcrypto, with the ERR_, BIO_, PEM_, X509_
    // and EVP_ functions.
    OpenSsl o;
#define TARMAC_OPENSSL_RESOLVE(name) lib->resolve(o.name, #name);
    TARMAC_OPENSSL_FUNCTIONS(TARMAC_OPENSSL_RESOLVE)
#undef TARMAC_OPENSSL_RESOLVE
    TARMAC_TRY(lib->complete("a usable OpenSSL 3"));
    return o;
  }();
  return loaded;
}

}  // namespace tarmac::serve
