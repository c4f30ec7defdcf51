#include "tarmac/sched/wire.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

namespace tarmac::sched {

namespace {

constexpr std::size_t kMaxFds = 4;
constexpr std::size_t kMaxLine = 1 << 20;  // a request with a large environment is still far below

Result<sockaddr_un> address_of(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return make_error(Error::Code::Invalid, fmt::format("socket path '{}' is empty or too long", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

void close_all(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

// One recvmsg: appends bytes to `buffer` and descriptors to `fds`; returns the bytes read (0 at EOF,
// -1 with errno).
ssize_t receive(int fd, std::string& buffer, std::vector<int>& fds) {
  char data[4096];
  iovec iov{.iov_base = data, .iov_len = sizeof data};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n > 0) buffer.append(data, static_cast<std::size_t>(n));
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(received);
      }
    }
  }
  return n;
}

}  // namespace

std::string socket_path(const std::string& configured) {
  if (const char* env = std::getenv("TARMAC_SOCKET"); env != nullptr && *env != '\0') return env;
  if (!configured.empty()) return configured;
  if (::geteuid() != 0) {
    if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
      return std::string(xdg) + "/tarmac/agent.sock";
    }
  }
  return "/run/tarmac/agent.sock";
}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    buffer_ = std::move(other.buffer_);
    other.fd_ = -1;
  }
  return *this;
}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

Result<Connection> Connection::connect(const std::string& path) {
  TARMAC_TRY_ASSIGN(auto addr, address_of(path));
  Connection c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (c.fd_ < 0) return make_error(Error::Code::Io, fmt::format("socket: {}", std::strerror(errno)));
  if (::connect(c.fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return make_error(Error::Code::NotFound, fmt::format("no tarmac agent answers on {}: {}", path, std::strerror(errno)));
  }
  return c;
}

Result<void> Connection::send_line(const std::string& line, const std::vector<int>& fds) {
  std::string data = line + "\n";
  std::size_t sent = 0;
  bool fds_sent = fds.empty();
  while (sent < data.size()) {
    iovec iov{.iov_base = data.data() + sent, .iov_len = data.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
    if (!fds_sent) {
      const std::size_t count = std::min(fds.size(), kMaxFds);
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * count);
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * count);
    }
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{.fd = fd_, .events = POLLOUT, .revents = 0};
        (void)::poll(&p, 1, 1000);
        continue;
      }
      return make_error(Error::Code::Io, fmt::format("sending to the agent: {}", std::strerror(errno)));
    }
    fds_sent = true;
    sent += static_cast<std::size_t>(n);
  }
  return {};
}

bool Connection::fill(std::vector<int>& fds) {
  for (;;) {
    const ssize_t n = receive(fd_, buffer_, fds);
    if (n > 0) {
      if (buffer_.size() > kMaxLine) return false;
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

bool Connection::wait_readable(int timeout_ms) const {
  if (buffer_.find('\n') != std::string::npos) return true;
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, timeout_ms) > 0;
}

bool Connection::take_line(std::string& line) {
  const auto nl = buffer_.find('\n');
  if (nl == std::string::npos) return false;
  line = buffer_.substr(0, nl);
  buffer_.erase(0, nl + 1);
  return true;
}

Result<std::string> Connection::read_line(int timeout_ms, std::vector<int>* fds) {
  std::vector<int> got;
  std::string line;
  for (;;) {
    if (take_line(line)) {
      if (fds != nullptr) fds->insert(fds->end(), got.begin(), got.end());
      else close_all(got);
      return line;
    }
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r == 0) {
      close_all(got);
      return make_error(Error::Code::Io, "the agent did not answer in time");
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      close_all(got);
      return make_error(Error::Code::Io, fmt::format("reading from the agent: {}", std::strerror(errno)));
    }
    const ssize_t n = receive(fd_, buffer_, got);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      close_all(got);
      return make_error(Error::Code::Io, "the agent closed the connection");
    }
    if (buffer_.size() > kMaxLine) {
      close_all(got);
      return make_error(Error::Code::Io, "a line over 1 MiB from the agent");
    }
  }
}

bool Connection::peer(uid_t& uid, pid_t& pid) const {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  uid = cred.uid;
  pid = cred.pid;
  return true;
}

Listener& Listener::operator=(Listener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(path_.c_str());
    }
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

Listener::~Listener() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

Result<Listener> Listener::open(const std::string& path) {
  TARMAC_TRY_ASSIGN(auto addr, address_of(path));
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error(Error::Code::Io, fmt::format("cannot create {}: {}", dir.string(), ec.message()));
    ::chmod(dir.c_str(), 0755);
  }
  if (auto live = Connection::connect(path); live.ok()) {
    return make_error(Error::Code::Invalid, fmt::format("another tarmac agent already answers on {}", path));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return make_error(Error::Code::Invalid, fmt::format("{} exists and is not a socket", path));
    }
    ::unlink(path.c_str());  // stale: nobody answers on it
  }
  Listener l;
  l.fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l.fd_ < 0) return make_error(Error::Code::Io, fmt::format("socket: {}", std::strerror(errno)));
  if (::bind(l.fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(l.fd_);
    l.fd_ = -1;
    return make_error(Error::Code::Io, fmt::format("cannot bind {}: {}", path, std::strerror(err)));
  }
  l.path_ = path;
  ::chmod(path.c_str(), 0666);  // anyone may connect; each request's rights come from SO_PEERCRED
  if (::listen(l.fd_, 512) != 0) {
    return make_error(Error::Code::Io, fmt::format("cannot listen on {}: {}", path, std::strerror(errno)));
  }
  return l;
}

Connection Listener::accept() {
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  return Connection(fd);
}

}  // namespace tarmac::sched
