// OpenSSL 3, loaded at run time (dlopen, as NVML and libcurl are) by the parts of the agent that
// need it: the HTTPS endpoint (tls.cpp) and the basic-auth credential cache (auth.cpp). Linked into
// the binary, libssl and libcrypto cost every tarmac command at start-up, whether it used them or
// not: their relocations (about 60 pages written by the loader) and libcrypto's constructor, which
// asks the CPU for its features (cpuid, slow in a virtual machine). On the CI machine that was
// 1.1 to 1.6 ms and about 100 page faults per start for libcrypto alone (docs/ci.md).
#pragma once

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tarmac/util/result.hpp"

namespace tarmac::serve {

// The functions tarmac calls, each named and typed as OpenSSL's headers declare it (only the
// headers are used at build time; nothing links the libraries). The macros that stand for
// SSL_CTX_ctrl (SSL_CTX_set_mode and the like) are written as SSL_CTX_ctrl calls.
#define TARMAC_OPENSSL_FUNCTIONS(X)                                                                              \
  X(TLS_server_method) X(SSL_CTX_new) X(SSL_CTX_free) X(SSL_CTX_set_options) X(SSL_CTX_ctrl)                     \
  X(SSL_CTX_use_certificate) X(SSL_CTX_use_PrivateKey) X(SSL_CTX_check_private_key) X(SSL_CTX_get0_certificate) \
  X(SSL_CTX_get_cert_store) X(SSL_CTX_add_client_CA) X(SSL_CTX_set_verify) X(SSL_CTX_set_session_id_context)     \
  X(SSL_new) X(SSL_free) X(SSL_set_fd) X(SSL_set_accept_state) X(SSL_accept) X(SSL_read_ex) X(SSL_write_ex)      \
  X(SSL_pending) X(SSL_get_error) X(SSL_is_init_finished) X(SSL_shutdown)                                         \
  X(ERR_get_error) X(ERR_peek_error) X(ERR_clear_error) X(ERR_error_string_n) X(BIO_new_mem_buf) X(BIO_free)     \
  X(PEM_read_bio_X509) X(PEM_read_bio_X509_AUX) X(PEM_read_bio_PrivateKey) X(X509_free)                          \
  X(X509_check_private_key) X(X509_STORE_add_cert) X(EVP_PKEY_free) X(OPENSSL_cleanse) X(EVP_sha256)             \
  X(EVP_Digest) X(CRYPTO_memcmp)

struct OpenSsl {
#define TARMAC_OPENSSL_DECLARE(name) decltype(&::name) name = nullptr;
  TARMAC_OPENSSL_FUNCTIONS(TARMAC_OPENSSL_DECLARE)
#undef TARMAC_OPENSSL_DECLARE
};

// libssl.so.3 (and the libcrypto.so.3 it needs), loaded on the first call and kept for the
// process's life; an error that names the library and the package when it is missing or lacks a
// function. TARMAC_OPENSSL_LIB names another file (tests).
[[nodiscard]] const Result<OpenSsl>& openssl();

}  // namespace tarmac::serve
