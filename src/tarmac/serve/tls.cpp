#include "tarmac/serve/tls.hpp"

#include <fmt/format.h>

#include "tarmac/serve/openssl.hpp"
#include "tarmac/util/trusted_file.hpp"

namespace tarmac::serve {

namespace {

constexpr std::size_t kMaxPemBytes = 1 << 20;

// The loaded library. Only TlsContext::load calls anything before it has loaded (and checked) it,
// and no TlsContext or TlsSession exists without it.
const OpenSsl& ossl() { return *openssl(); }

// OpenSSL's queued errors as one line, emptying the queue.
std::string openssl_errors() {
  std::string out;
  while (const unsigned long e = ossl().ERR_get_error()) {
    char buf[256];
    ossl().ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown error" : out;
}

int protocol_version(int v) {
  switch (v) {
    case 10: return TLS1_VERSION;
    case 11: return TLS1_1_VERSION;
    case 12: return TLS1_2_VERSION;
    case 13: return TLS1_3_VERSION;
    default: return 0;
  }
}

// Never prompts for a passphrase on the agent's terminal: an encrypted key is refused.
int no_passphrase(char*, int, int, void*) { return -1; }

// RequestClientCert and RequireAnyClientCert take whatever certificate comes, unchecked.
int accept_any(int, X509_STORE_CTX*) { return 1; }

struct BioDeleter {
  void operator()(BIO* b) const { ossl().BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

Result<std::string> read_pem(const std::string& path, bool trusted, std::string_view what) {
  auto text = util::read_trusted_file(path, trusted ? util::Writers::OwnerOnly : util::Writers::Anyone, 0,
                                      kMaxPemBytes);
  if (!text.ok()) return make_error(Error::Code::Invalid, fmt::format("the {}: {}", what, text.error().message));
  return std::move(*text);
}

BioPtr memory_bio(const std::string& text) {
  return BioPtr(ossl().BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

Error tls_error(const std::string& path, std::string_view what) {
  return make_error(Error::Code::Invalid, fmt::format("{}: not a usable {} ({})", path, what, openssl_errors()));
}

}  // namespace

struct TlsContext::Impl {
  SSL_CTX* ctx = nullptr;
  ~Impl() { ossl().SSL_CTX_free(ctx); }
};

struct TlsSession::Impl {
  SSL* ssl = nullptr;
  std::string failure;
  ~Impl() { ossl().SSL_free(ssl); }

  Io outcome(int rc) {
    switch (ossl().SSL_get_error(ssl, rc)) {
      case SSL_ERROR_WANT_READ: return Io::WantRead;
      case SSL_ERROR_WANT_WRITE: return Io::WantWrite;
      case SSL_ERROR_ZERO_RETURN: return Io::Closed;
      case SSL_ERROR_SYSCALL:
        failure = ossl().ERR_peek_error() != 0 ? openssl_errors() : "the connection was closed";
        ossl().ERR_clear_error();
        return Io::Failed;
      default:
        failure = openssl_errors();
        return Io::Failed;
    }
  }
};

TlsSession::TlsSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsSession::~TlsSession() = default;

TlsSession::Io TlsSession::handshake() {
  ossl().ERR_clear_error();
  const int rc = ossl().SSL_accept(impl_->ssl);
  return rc == 1 ? Io::Ok : impl_->outcome(rc);
}

TlsSession::Io TlsSession::read(char* buf, std::size_t n, std::size_t& got) {
  ossl().ERR_clear_error();
  got = 0;
  const int rc = ossl().SSL_read_ex(impl_->ssl, buf, n, &got);
  return rc == 1 ? Io::Ok : impl_->outcome(rc);
}

TlsSession::Io TlsSession::write(const char* buf, std::size_t n, std::size_t& sent) {
  ossl().ERR_clear_error();
  sent = 0;
  const int rc = ossl().SSL_write_ex(impl_->ssl, buf, n, &sent);
  return rc == 1 ? Io::Ok : impl_->outcome(rc);
}

std::size_t TlsSession::pending() const { return static_cast<std::size_t>(ossl().SSL_pending(impl_->ssl)); }

void TlsSession::close_notify() {
  ossl().ERR_clear_error();
  if (ossl().SSL_is_init_finished(impl_->ssl) == 1) (void)ossl().SSL_shutdown(impl_->ssl);
  ossl().ERR_clear_error();
}

const std::string& TlsSession::failure() const { return impl_->failure; }

TlsContext::TlsContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsContext::~TlsContext() = default;

Result<std::shared_ptr<TlsContext>> TlsContext::load(const TlsSettings& settings, bool trusted) {
  TARMAC_TRY_ASSIGN(const std::string cert_pem, read_pem(settings.cert_file, trusted, "certificate"));
  TARMAC_TRY_ASSIGN(std::string key_pem, read_pem(settings.key_file, trusted, "key"));
  std::string ca_pem;
  if (!settings.client_ca_file.empty()) {
    TARMAC_TRY_ASSIGN(ca_pem, read_pem(settings.client_ca_file, trusted, "client CA"));
  }
  const auto& loaded = openssl();
  if (!loaded.ok()) return loaded.error();
  const OpenSsl& o = *loaded;
  o.ERR_clear_error();
  auto impl = std::make_unique<Impl>();
  impl->ctx = o.SSL_CTX_new(o.TLS_server_method());
  if (impl->ctx == nullptr) return make_error(Error::Code::External, "OpenSSL: " + openssl_errors());
  SSL_CTX* ctx = impl->ctx;
  o.SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  o.SSL_CTX_ctrl(ctx, SSL_CTRL_MODE, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, nullptr);
  if (o.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, protocol_version(settings.min_version), nullptr) != 1 ||
      (settings.max_version != 0 &&
       o.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MAX_PROTO_VERSION, protocol_version(settings.max_version), nullptr) != 1)) {
    return make_error(Error::Code::Invalid, "the TLS versions: " + openssl_errors());
  }

  {
    const BioPtr bio = memory_bio(cert_pem);
    X509* leaf = o.PEM_read_bio_X509_AUX(bio.get(), nullptr, no_passphrase, nullptr);
    if (leaf == nullptr) return tls_error(settings.cert_file, "PEM certificate");
    const int used = o.SSL_CTX_use_certificate(ctx, leaf);
    o.X509_free(leaf);
    if (used != 1) return tls_error(settings.cert_file, "certificate");
    while (X509* extra = o.PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)) {
      if (o.SSL_CTX_ctrl(ctx, SSL_CTRL_CHAIN_CERT, 0, extra) != 1) {
        o.X509_free(extra);
        return tls_error(settings.cert_file, "certificate chain");
      }
    }
    o.ERR_clear_error();  // the end of the PEM text
  }
  {
    const BioPtr bio = memory_bio(key_pem);
    EVP_PKEY* key = o.PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr);
    o.OPENSSL_cleanse(key_pem.data(), key_pem.size());
    if (key == nullptr) return tls_error(settings.key_file, "unencrypted PEM private key");
    if (o.X509_check_private_key(o.SSL_CTX_get0_certificate(ctx), key) != 1) {
      o.EVP_PKEY_free(key);
      o.ERR_clear_error();
      return make_error(Error::Code::Invalid, fmt::format("{} is not the key of the certificate in {}",
                                                          settings.key_file, settings.cert_file));
    }
    const int used = o.SSL_CTX_use_PrivateKey(ctx, key);
    o.EVP_PKEY_free(key);
    if (used != 1) return tls_error(settings.key_file, "private key");
    if (o.SSL_CTX_check_private_key(ctx) != 1) {
      return make_error(Error::Code::Invalid, fmt::format("{} is not the key of the certificate in {}",
                                                          settings.key_file, settings.cert_file));
    }
  }
  if (!settings.client_ca_file.empty()) {
    const BioPtr bio = memory_bio(ca_pem);
    X509_STORE* store = o.SSL_CTX_get_cert_store(ctx);
    int count = 0;
    while (X509* ca = o.PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)) {
      const bool ok = o.X509_STORE_add_cert(store, ca) == 1 && o.SSL_CTX_add_client_CA(ctx, ca) == 1;
      o.X509_free(ca);
      if (!ok) return tls_error(settings.client_ca_file, "CA certificate");
      ++count;
    }
    o.ERR_clear_error();
    if (count == 0) return tls_error(settings.client_ca_file, "PEM CA certificate");
  }
  switch (settings.client_auth) {
    case ClientAuth::None: o.SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr); break;
    case ClientAuth::Request: o.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, accept_any); break;
    case ClientAuth::RequireAny:
      o.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, accept_any);
      break;
    case ClientAuth::VerifyIfGiven: o.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr); break;
    case ClientAuth::RequireAndVerify:
      o.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      break;
  }
  // No server-side session cache: a Prometheus scrape every 15 s gains nothing from it, and with the
  // unchecked client certificate types each cached session would keep a stranger's chain.
  o.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_SESS_CACHE_MODE, SSL_SESS_CACHE_OFF, nullptr);
  o.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MAX_CERT_LIST, 32 * 1024, nullptr);
  static const unsigned char kSessionContext[] = "tarmac";
  o.SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
  return std::make_shared<TlsContext>(std::move(impl));
}

std::unique_ptr<TlsSession> TlsContext::accept(int fd) const {
  auto impl = std::make_unique<TlsSession::Impl>();
  impl->ssl = ossl().SSL_new(impl_->ctx);
  if (impl->ssl == nullptr || ossl().SSL_set_fd(impl->ssl, fd) != 1) {
    ossl().ERR_clear_error();
    return nullptr;
  }
  ossl().SSL_set_accept_state(impl->ssl);
  return std::make_unique<TlsSession>(std::move(impl));
}

}  // namespace tarmac::serve
