// The scheduler's socket (docs/scheduler.md "The socket"): a Unix stream socket carrying one JSON
// object per line, with descriptors passed by SCM_RIGHTS and the peer's uid from SO_PEERCRED.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "tarmac/util/fd.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sched {

// The socket's path: $TARMAC_SOCKET, else `configured` (scheduler.socket) when not empty, else
// $XDG_RUNTIME_DIR/tarmac/agent.sock for a user other than root, else /run/tarmac/agent.sock.
[[nodiscard]] std::string socket_path(const std::string& configured);

// What SO_PEERCRED and SO_PEERGROUPS say about the process at the other end, as it was when it
// connected: the rights of every request on the connection come from here, never from the request.
struct Peer {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  std::vector<gid_t> groups;  // supplementary groups; empty when the kernel cannot say (before 4.13)
};

// A connected socket, closed when destroyed. Clients (the CLI) use it blocking, one request and its
// answer at a time; the agent uses it non-blocking, with a buffer each way (fill/take_line in,
// queue_line/flush out) so that no peer can make it wait.
class Connection {
 public:
  // The most descriptors one line may carry; a peer that sends more is dropped.
  static constexpr std::size_t kMaxFds = 4;
  // The longest line; a peer whose line passes it is dropped.
  static constexpr std::size_t kMaxLine = 1 << 20;

  Connection() = default;
  explicit Connection(util::Fd fd) : fd_(std::move(fd)) {}

  // Connects to the socket at `path`; an error names the path and why (not there, refused).
  [[nodiscard]] static Result<Connection> connect(const std::string& path);

  [[nodiscard]] int fd() const { return fd_.get(); }

  // Sends one line (a newline is added), with `fds` attached to its first byte; blocks until it is
  // written. For clients: the agent never calls it.
  [[nodiscard]] Result<void> send_line(const std::string& line, const std::vector<int>& fds = {});

  // Reads up to the next newline, blocking up to `timeout_ms` in all (-1: forever). Descriptors that came
  // with it are appended to `fds` when given, closed otherwise. An error on EOF, timeout or failure.
  [[nodiscard]] Result<std::string> read_line(int timeout_ms, std::vector<util::Fd>* fds = nullptr);

  // Whether a line is buffered or something arrives (data, or the peer closing) within `timeout_ms`.
  [[nodiscard]] bool wait_readable(int timeout_ms) const;

  enum class Fill { Open, Closed, LineTooLong, TooManyFds };
  // Non-blocking: appends what is readable now to the buffer, up to the first complete line, and any
  // descriptors to `fds` (owned there, so every path closes them). Open while the peer may send more.
  [[nodiscard]] Fill fill(std::vector<util::Fd>& fds);
  // A complete line from the buffer, if one has arrived.
  [[nodiscard]] bool take_line(std::string& line);
  [[nodiscard]] std::size_t buffered() const { return in_.size(); }

  // Appends one line (a newline is added) to the output buffer; nothing is written yet.
  void queue_line(std::string_view line);
  enum class Flush { Done, Pending, Failed };
  // Writes what the socket takes now without waiting: Done when the output buffer is empty, Pending
  // when the peer has not read enough yet (poll for POLLOUT), Failed when the peer is gone.
  [[nodiscard]] Flush flush();
  [[nodiscard]] std::size_t pending_output() const { return out_.size() - out_sent_; }

  // The peer's credentials (SO_PEERCRED, SO_PEERGROUPS).
  [[nodiscard]] Result<Peer> peer() const;

 private:
  util::Fd fd_;
  std::string in_;
  std::string out_;
  std::size_t out_sent_ = 0;  // bytes of out_ already written
};

// A listening socket at `path`: the directory is created (0755), a stale socket replaced, the
// socket made 0666. Fails when another process answers on it, naming the path.
class Listener {
 public:
  Listener() = default;
  Listener(Listener&& other) noexcept : fd_(std::move(other.fd_)), path_(std::move(other.path_)) {}
  Listener& operator=(Listener&& other) noexcept;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  ~Listener();  // closes and removes the socket file

  [[nodiscard]] static Result<Listener> open(const std::string& path);
  [[nodiscard]] int fd() const { return fd_.get(); }
  [[nodiscard]] const std::string& path() const { return path_; }
  // The next pending connection (non-blocking, close-on-exec), or a Connection with fd -1 (errno
  // says why: EAGAIN when none is pending, EMFILE when the agent is out of descriptors).
  [[nodiscard]] Connection accept();

 private:
  void close_and_remove();
  util::Fd fd_;
  std::string path_;
};

}  // namespace tarmac::sched
