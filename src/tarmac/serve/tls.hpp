// TLS for the agent's HTTP server, from OpenSSL (Debian's libssl): the only file that sees it.
// Certificates and keys are read by tarmac (as root, only files only root can change) and handed
// to OpenSSL from memory; sessions work on the server's non-blocking sockets.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tarmac/serve/web_config.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::serve {

// One accepted connection's TLS state. Every call returns at once: WantRead or WantWrite says what
// the socket must become before the call is made again.
class TlsSession {
 public:
  enum class Io { Ok, WantRead, WantWrite, Closed, Failed };
  struct Impl;
  explicit TlsSession(std::unique_ptr<Impl> impl);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  [[nodiscard]] Io handshake();                                        // Ok once it is complete
  [[nodiscard]] Io read(char* buf, std::size_t n, std::size_t& got);   // Ok with got > 0
  [[nodiscard]] Io write(const char* buf, std::size_t n, std::size_t& sent);
  [[nodiscard]] std::size_t pending() const;  // decrypted bytes waiting in the session
  void close_notify();                        // says goodbye once; what the peer answers is not waited for
  [[nodiscard]] const std::string& failure() const;  // why the last Failed, for logs

 private:
  std::unique_ptr<Impl> impl_;
};

class TlsContext {
 public:
  struct Impl;
  // Reads the certificate chain, key and client CA of `settings` (through util::read_trusted_file
  // when `trusted`: as root, root's files in root's directories) and checks that the key is the
  // certificate's. Fails naming the file and why.
  [[nodiscard]] static Result<std::shared_ptr<TlsContext>> load(const TlsSettings& settings, bool trusted);
  explicit TlsContext(std::unique_ptr<Impl> impl);
  ~TlsContext();

  // A session on the accepted socket `fd` (which stays the caller's to close).
  [[nodiscard]] std::unique_ptr<TlsSession> accept(int fd) const;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tarmac::serve
