// The HTTP server with TLS and passwords, end to end in one process: certificates made here with
// OpenSSL, a blocking OpenSSL client on loopback.
#include "tarmac/serve/tls.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "tarmac/serve/auth.hpp"
#include "tarmac/serve/http.hpp"

namespace tarmac::serve {
namespace {

namespace fs = std::filesystem;

// A key and a certificate for it, signed by `issuer` (itself when null), as PEM texts.
struct Identity {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  Identity() = default;
  Identity(const Identity&) = delete;
  ~Identity() {
    EVP_PKEY_free(key);
    X509_free(cert);
  }
  std::string cert_pem() const {
    BIO* b = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(b, cert);
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    std::string out(data, static_cast<std::size_t>(n));
    BIO_free(b);
    return out;
  }
  std::string key_pem(const char* passphrase = nullptr) const {
    BIO* b = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(b, key, passphrase ? EVP_aes_128_cbc() : nullptr,
                             reinterpret_cast<const unsigned char*>(passphrase), passphrase ? 6 : 0, nullptr, nullptr);
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    std::string out(data, static_cast<std::size_t>(n));
    BIO_free(b);
    return out;
  }
};

std::unique_ptr<Identity> make_identity(const char* cn, const Identity* issuer, bool ca) {
  auto id = std::make_unique<Identity>();
  id->key = EVP_EC_gen("P-256");
  id->cert = X509_new();
  X509_set_version(id->cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(id->cert), ca ? 1 : 2);
  X509_gmtime_adj(X509_getm_notBefore(id->cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(id->cert), 3600);
  X509_set_pubkey(id->cert, id->key);
  X509_NAME* name = X509_get_subject_name(id->cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  X509_set_issuer_name(id->cert, issuer ? X509_get_subject_name(issuer->cert) : name);
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer ? issuer->cert : id->cert, id->cert, nullptr, nullptr, 0);
  const auto add = [&](int nid, const char* value) {
    X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(id->cert, e, -1);
    X509_EXTENSION_free(e);
  };
  add(NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
  if (!ca) add(NID_subject_alt_name, "IP:127.0.0.1");
  X509_sign(id->cert, issuer ? issuer->key : id->key, EVP_sha256());
  return id;
}

class TlsServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tarmac-tls-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    ca_ = make_identity("test CA", nullptr, true);
    other_ca_ = make_identity("another CA", nullptr, true);
    server_ = make_identity("127.0.0.1", ca_.get(), false);
    client_ = make_identity("prometheus", ca_.get(), false);
    stranger_ = make_identity("stranger", other_ca_.get(), false);
    write("server.crt", server_->cert_pem());
    write("server.key", server_->key_pem());
    write("ca.crt", ca_->cert_pem());
  }
  void TearDown() override {
    if (http_) http_->stop();
    fs::remove_all(dir_);
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  TlsSettings settings(ClientAuth auth = ClientAuth::None) {
    TlsSettings s;
    s.cert_file = (dir_ / "server.crt").string();
    s.key_file = (dir_ / "server.key").string();
    s.client_auth = auth;
    if (auth == ClientAuth::RequireAndVerify || auth == ClientAuth::VerifyIfGiven) s.client_ca_file = (dir_ / "ca.crt").string();
    return s;
  }
  void serve(ServerSecurity security, ServerLimits limits = {}) {
    http_ = std::make_unique<HttpServer>([](const Request& r) { return text_response(200, "hello " + r.path); },
                                         limits, std::move(security));
    ASSERT_TRUE(http_->start("127.0.0.1", 0).ok());
  }
  int connect_plain() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(http_->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }
  // One request over TLS, trusting `ca_` and presenting `id` (none when null); the whole answer,
  // or "handshake failed".
  std::string get(const std::string& head_lines, const Identity* id = nullptr) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca_->cert);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (id != nullptr) {
      SSL_CTX_use_certificate(ctx, id->cert);
      SSL_CTX_use_PrivateKey(ctx, id->key);
    }
    const int fd = connect_plain();
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    std::string out;
    if (SSL_connect(ssl) != 1) {
      out = "handshake failed";
    } else {
      const std::string request = "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + head_lines + "\r\n";
      SSL_write(ssl, request.data(), static_cast<int>(request.size()));
      char buf[4096];
      for (int n; (n = SSL_read(ssl, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
      // TLS 1.3 sends the client's certificate verdict after the handshake: a refusal shows here.
      if (out.empty()) out = "handshake failed";
    }
    ERR_clear_error();
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(ctx);
    return out;
  }

  fs::path dir_;
  std::unique_ptr<Identity> ca_, other_ca_, server_, client_, stranger_;
  std::unique_ptr<HttpServer> http_;
};

TEST_F(TlsServer, LoadRefusesUnusableFilesByName) {
  auto s = settings();
  s.key_file = write("other.key", client_->key_pem());
  auto r = TlsContext::load(s, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("is not the key of the certificate"), std::string::npos) << r.error().message;

  s.key_file = write("locked.key", server_->key_pem("secret"));
  r = TlsContext::load(s, false);
  ASSERT_FALSE(r.ok()) << "an encrypted key is refused, never prompted for";
  EXPECT_NE(r.error().message.find("locked.key"), std::string::npos) << r.error().message;

  s = settings();
  s.cert_file = write("junk.crt", "not a certificate\n");
  r = TlsContext::load(s, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("junk.crt"), std::string::npos);

  s = settings();
  s.cert_file = (dir_ / "missing.crt").string();
  r = TlsContext::load(s, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("missing.crt"), std::string::npos);

  s = settings(ClientAuth::RequireAndVerify);
  s.client_ca_file = write("empty.crt", "");
  r = TlsContext::load(s, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("empty.crt"), std::string::npos);
}

TEST_F(TlsServer, ServesOverTlsAndPlainHttpGetsNothing) {
  auto tls = TlsContext::load(settings(), false);
  ASSERT_TRUE(tls.ok()) << tls.error().message;
  serve({*tls, nullptr});
  EXPECT_NE(get("").find("hello /x"), std::string::npos);

  const int fd = connect_plain();
  const std::string plain = "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_EQ(send(fd, plain.data(), plain.size(), 0), static_cast<ssize_t>(plain.size()));
  char buf[256];
  const ssize_t got = recv(fd, buf, sizeof buf, 0);
  EXPECT_LE(got, 0) << "no answer in clear: " << std::string(buf, static_cast<std::size_t>(std::max<ssize_t>(got, 0)));
  close(fd);
  EXPECT_EQ(http_->stats().tls_failures.load(), 1);
  EXPECT_NE(get("").find("hello /x"), std::string::npos) << "the server goes on";
}

TEST_F(TlsServer, AHandshakeThatNeverComesIsDropped) {
  auto tls = TlsContext::load(settings(), false);
  ASSERT_TRUE(tls.ok());
  ServerLimits limits;
  limits.head_timeout_ms = 200;
  serve({*tls, nullptr}, limits);
  const int fd = connect_plain();  // says nothing
  char buf[16];
  EXPECT_EQ(recv(fd, buf, sizeof buf, 0), 0) << "closed by the server after head_timeout_ms";
  close(fd);
  EXPECT_EQ(http_->stats().tls_failures.load(), 1);
}

TEST_F(TlsServer, PasswordsAreAskedOverTls) {
  auto tls = TlsContext::load(settings(), false);
  ASSERT_TRUE(tls.ok());
  const auto hash = bcrypt_hash("s3cret", 4);
  ASSERT_TRUE(hash.ok());
  serve({*tls, std::make_shared<BasicAuth>(std::map<std::string, std::string>{{"prom", *hash}})});
  const std::string refused = get("");
  EXPECT_NE(refused.find("HTTP/1.1 401"), std::string::npos) << refused;
  EXPECT_NE(refused.find("WWW-Authenticate: Basic realm=\"tarmac\""), std::string::npos);
  EXPECT_NE(get("Authorization: Basic cHJvbTp3cm9uZw==\r\n").find("HTTP/1.1 401"), std::string::npos);  // prom:wrong
  EXPECT_NE(get("Authorization: Basic cHJvbTpzM2NyZXQ=\r\n").find("hello /x"), std::string::npos);     // prom:s3cret
  EXPECT_EQ(http_->stats().auth_failures.load(), 2);
}

TEST_F(TlsServer, ClientCertificatesSignedByTheCaAreRequired) {
  auto tls = TlsContext::load(settings(ClientAuth::RequireAndVerify), false);
  ASSERT_TRUE(tls.ok()) << tls.error().message;
  serve({*tls, nullptr});
  EXPECT_NE(get("", client_.get()).find("hello /x"), std::string::npos);
  EXPECT_EQ(get(""), "handshake failed") << "no certificate";
  EXPECT_EQ(get("", stranger_.get()), "handshake failed") << "a certificate from another CA";
  // The server counts a failed handshake after the client has seen it fail: wait for the count.
  for (int i = 0; i < 500 && http_->stats().tls_failures.load() < 2; ++i) usleep(10'000);
  EXPECT_GE(http_->stats().tls_failures.load(), 2);
}

TEST_F(TlsServer, VerifyIfGivenTakesNoneButRefusesAStranger) {
  auto tls = TlsContext::load(settings(ClientAuth::VerifyIfGiven), false);
  ASSERT_TRUE(tls.ok());
  serve({*tls, nullptr});
  EXPECT_NE(get("").find("hello /x"), std::string::npos);
  EXPECT_NE(get("", client_.get()).find("hello /x"), std::string::npos);
  EXPECT_EQ(get("", stranger_.get()), "handshake failed");
}

}  // namespace
}  // namespace tarmac::serve
