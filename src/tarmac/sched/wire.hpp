// The scheduler's socket (docs/scheduler.md "The socket"): a Unix stream socket carrying one JSON
// object per line, with descriptors passed by SCM_RIGHTS and the peer's uid from SO_PEERCRED.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::sched {

// The socket's path: $TARMAC_SOCKET, else `configured` (scheduler.socket) when not empty, else
// $XDG_RUNTIME_DIR/tarmac/agent.sock for a user other than root, else /run/tarmac/agent.sock.
[[nodiscard]] std::string socket_path(const std::string& configured);

// A connected socket, closed when destroyed.
class Connection {
 public:
  Connection() = default;
  explicit Connection(int fd) : fd_(fd) {}
  Connection(Connection&& other) noexcept : fd_(other.fd_), buffer_(std::move(other.buffer_)) { other.fd_ = -1; }
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Connects to the socket at `path`; an error names the path and why (not there, refused).
  [[nodiscard]] static Result<Connection> connect(const std::string& path);

  [[nodiscard]] int fd() const { return fd_; }

  // Sends one line (a newline is added), with `fds` attached to its first byte.
  [[nodiscard]] Result<void> send_line(const std::string& line, const std::vector<int>& fds = {});

  // Reads up to the next newline, blocking up to `timeout_ms` (-1: forever). Descriptors that came
  // with it are appended to `fds` when given, closed otherwise. An error on EOF, timeout or failure.
  [[nodiscard]] Result<std::string> read_line(int timeout_ms, std::vector<int>* fds = nullptr);

  // Whether a line is buffered or something arrives (data, or the peer closing) within `timeout_ms`.
  [[nodiscard]] bool wait_readable(int timeout_ms) const;

  // Non-blocking: appends what is readable now to the buffer (and any descriptors to `fds`);
  // false when the peer closed or the socket failed.
  [[nodiscard]] bool fill(std::vector<int>& fds);
  // A complete line from the buffer, if one has arrived.
  [[nodiscard]] bool take_line(std::string& line);
  [[nodiscard]] std::size_t buffered() const { return buffer_.size(); }

  // The peer's uid and pid (SO_PEERCRED).
  [[nodiscard]] bool peer(uid_t& uid, pid_t& pid) const;

 private:
  int fd_ = -1;
  std::string buffer_;
};

// A listening socket at `path`: the directory is created (0755), a stale socket replaced, the
// socket made 0666. Fails when another process answers on it, naming the path.
class Listener {
 public:
  Listener() = default;
  Listener(Listener&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }
  Listener& operator=(Listener&& other) noexcept;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  ~Listener();  // closes and removes the socket file

  [[nodiscard]] static Result<Listener> open(const std::string& path);
  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  // The next pending connection (non-blocking, close-on-exec), or a Connection with fd -1.
  [[nodiscard]] Connection accept();

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace tarmac::sched
