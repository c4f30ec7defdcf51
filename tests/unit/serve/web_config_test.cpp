#include "tarmac/serve/web_config.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <string>

namespace tarmac::serve {
namespace {

// bcrypt of "s3cret" at cost 4 (made with libcrypt): cheap for tests.
constexpr const char* kS3cretCost4 = "$2b$04$7BzZ2GX2nUXOFxZbL4YGZOUK49/tAOa6XvDILWBi/sa/d83VqNcWy";

std::string error_of(std::string_view text) {
  auto r = parse_web_config(text, "/etc/tarmac");
  return r.ok() ? "" : r.error().message;
}

TEST(WebConfig, EmptyFileIsPlainHttpWithoutPasswords) {
  auto r = parse_web_config("", "/d");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->tls);
  EXPECT_TRUE(r->users.empty());
  EXPECT_FALSE(r->authenticates());
  EXPECT_TRUE(parse_web_config("# only a comment\n", "/d").ok());
  EXPECT_TRUE(parse_web_config("tls_server_config:\nbasic_auth_users: ~\n", "/d").ok());
}

TEST(WebConfig, ReadsTlsAndUsersAsExporterToolkitDoes) {
  auto r = parse_web_config(std::string("tls_server_config:\n"
                                        "  cert_file: server.crt\n"
                                        "  key_file: /abs/server.key\n"
                                        "  client_auth_type: RequireAndVerifyClientCert\n"
                                        "  client_ca_file: \"ca.crt\"\n"
                                        "  min_version: TLS13\n"
                                        "  prefer_server_cipher_suites: true\n"
                                        "  cipher_suites: []\n"
                                        "basic_auth_users:\n"
                                        "  prometheus: '") + kS3cretCost4 + "'\n",
                            "/etc/tarmac");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->tls);
  EXPECT_EQ(r->tls->cert_file, "/etc/tarmac/server.crt");  // relative: from the file's directory
  EXPECT_EQ(r->tls->key_file, "/abs/server.key");
  EXPECT_EQ(r->tls->client_ca_file, "/etc/tarmac/ca.crt");
  EXPECT_EQ(r->tls->client_auth, ClientAuth::RequireAndVerify);
  EXPECT_EQ(r->tls->min_version, 13);
  EXPECT_EQ(r->users.at("prometheus"), kS3cretCost4);
  EXPECT_TRUE(r->authenticates());
}

TEST(WebConfig, ClientCertificatesAloneAuthenticateOnlyWhenRequiredAndVerified) {
  const auto with = [](std::string_view type) {
    auto r = parse_web_config(fmt::format("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: "
                                          "{}\n  client_ca_file: ca\n",
                                          type),
                              "/d");
    EXPECT_TRUE(r.ok()) << type << ": " << r.error().message;
    return r.ok() && r->authenticates();
  };
  EXPECT_TRUE(with("RequireAndVerifyClientCert"));
  EXPECT_FALSE(with("VerifyClientCertIfGiven"));
  auto plain = parse_web_config("tls_server_config:\n  cert_file: c\n  key_file: k\n", "/d");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->tls->client_auth, ClientAuth::None);
  EXPECT_EQ(plain->tls->min_version, 12);  // exporter-toolkit's default
  EXPECT_FALSE(plain->authenticates());
}

TEST(WebConfig, RefusesWhatItDoesNotImplementByName) {
  EXPECT_NE(error_of("tls_server_config:\n  cert_file: c\n  key_file: k\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n")
                .find("cipher suites"),
            std::string::npos);
  EXPECT_NE(error_of("tls_server_config:\n  cert_file: c\n  key_file: k\n  curve_preferences: [X25519]\n")
                .find("curves"),
            std::string::npos);
  EXPECT_NE(error_of("http_server_config:\n  http2: false\n").find("http_server_config"), std::string::npos);
  EXPECT_NE(error_of("tls_server_config:\n  cert: |\n    PEM\n  key_file: k\n").find("as a file"), std::string::npos);
}

TEST(WebConfig, RefusesMistakesWithTheirPlace) {
  EXPECT_NE(error_of("tls_config:\n  cert_file: c\n").find("unknown key tls_config"), std::string::npos);
  EXPECT_NE(error_of("tls_server_config:\n  key_file: k\n").find("missing cert_file"), std::string::npos);
  EXPECT_NE(error_of("tls_server_config:\n  cert_file: c\n").find("missing key_file"), std::string::npos);
  EXPECT_NE(error_of("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: Sometimes\n")
                .find("client_auth_type"),
            std::string::npos);
  EXPECT_NE(error_of("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: "
                     "RequireAndVerifyClientCert\n")
                .find("needs client_ca_file"),
            std::string::npos);
  EXPECT_NE(error_of("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_ca_file: ca\n")
                .find("does not verify"),
            std::string::npos);
  EXPECT_NE(error_of("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS14\n").find("TLS14"),
            std::string::npos);
  EXPECT_NE(error_of("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS13\n  max_version: TLS12\n")
                .find("below"),
            std::string::npos);
  EXPECT_NE(error_of("basic_auth_users:\n  alice: plaintext\n").find("not a bcrypt hash"), std::string::npos);
  EXPECT_NE(error_of("basic_auth_users:\n  'a:b': x\n").find("cannot be a user name"), std::string::npos);
  EXPECT_NE(error_of("basic_auth_users:\n  - alice\n").find("must be a mapping"), std::string::npos);
  EXPECT_NE(error_of("basic_auth_users: {a: x, a: y}\n").find("twice"), std::string::npos);
  EXPECT_NE(error_of("a: [unclosed\n").find("not YAML"), std::string::npos);
  EXPECT_NE(error_of("basic_auth_users: {}\n---\nbasic_auth_users: {}\n").find("more than one"), std::string::npos);
  EXPECT_NE(error_of("- a\n- b\n").find("must be a mapping"), std::string::npos);
}

TEST(WebConfig, AliasesCannotMultiplyWork) {
  // YAML's aliases point at one node: a "billion laughs" file is a few nodes, and only two levels
  // are ever walked. It is refused for what it is (not a mapping of known keys), quickly.
  const std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                             "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n";
  EXPECT_NE(error_of(laughs).find("unknown key a"), std::string::npos);
}

TEST(BcryptHash, ShapeAndCost) {
  EXPECT_TRUE(is_bcrypt_hash(kS3cretCost4));
  EXPECT_TRUE(is_bcrypt_hash("$2y$10$" + std::string(53, 'a')));
  EXPECT_FALSE(is_bcrypt_hash("$2x$10$" + std::string(53, 'a')));
  EXPECT_FALSE(is_bcrypt_hash("$2y$10$" + std::string(52, 'a')));
  EXPECT_TRUE(is_bcrypt_hash("$2y$12$" + std::string(53, 'a')));
  EXPECT_FALSE(is_bcrypt_hash("$2y$13$" + std::string(53, 'a'))) << "a cost that would stall the server";
  EXPECT_FALSE(is_bcrypt_hash("$2y$31$" + std::string(53, 'a')));
  EXPECT_FALSE(is_bcrypt_hash("$2y$03$" + std::string(53, 'a')));
  EXPECT_FALSE(is_bcrypt_hash("$2y$10$" + std::string(52, 'a') + "!"));
  EXPECT_FALSE(is_bcrypt_hash("$6$salt$hash"));
}

}  // namespace
}  // namespace tarmac::serve
