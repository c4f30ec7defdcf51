#include "tarmac/sched/wire.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <fmt/format.h>

namespace tarmac::sched {

namespace {

Result<sockaddr_un> address_of(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return make_error(Error::Code::Invalid, fmt::format("socket path '{}' is empty or too long", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// One recvmsg: appends bytes to `buffer` and descriptors to `fds` (owned from the moment they
// arrive); returns the bytes read (0 at EOF, -1 with errno). Descriptors past the control buffer's
// room are closed by the kernel (MSG_CTRUNC).
ssize_t receive(int fd, std::string& buffer, std::vector<util::Fd>& fds) {
  char data[4096];
  iovec iov{.iov_base = data, .iov_len = sizeof data};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * Connection::kMaxFds)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) return n;
  buffer.append(data, static_cast<std::size_t>(n));
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(received);
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

Result<Connection> Connection::connect(const std::string& path) {
  TARMAC_TRY_ASSIGN(auto addr, address_of(path));
  Connection c(util::Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)));
  if (!c.fd_) return make_error(Error::Code::Io, fmt::format("socket: {}", std::strerror(errno)));
  if (::connect(c.fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
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
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{.fd = fd_.get(), .events = POLLOUT, .revents = 0};
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

Connection::Fill Connection::fill(std::vector<util::Fd>& fds) {
  for (;;) {
    const ssize_t n = receive(fd_.get(), in_, fds);
    if (fds.size() > kMaxFds) return Fill::TooManyFds;
    if (n == 0) return Fill::Closed;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Fill::Open : Fill::Closed;
    // A line at a time: what follows stays in the kernel until this one is answered.
    if (in_.find('\n', in_.size() - static_cast<std::size_t>(n)) != std::string::npos) return Fill::Open;
    if (in_.size() > kMaxLine) return Fill::LineTooLong;
  }
}

void Connection::queue_line(std::string_view line) {
  if (out_sent_ == out_.size()) {
    out_.clear();
    out_sent_ = 0;
  }
  out_.append(line);
  out_.push_back('\n');
}

Connection::Flush Connection::flush() {
  while (out_sent_ < out_.size()) {
    const ssize_t n = ::send(fd_.get(), out_.data() + out_sent_, out_.size() - out_sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Flush::Pending;
      return Flush::Failed;
    }
    out_sent_ += static_cast<std::size_t>(n);
  }
  out_.clear();
  out_sent_ = 0;
  return Flush::Done;
}

bool Connection::wait_readable(int timeout_ms) const {
  if (in_.find('\n') != std::string::npos) return true;
  pollfd p{.fd = fd_.get(), .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, timeout_ms) > 0;
}

bool Connection::take_line(std::string& line) {
  const auto nl = in_.find('\n');
  if (nl == std::string::npos) return false;
  line = in_.substr(0, nl);
  in_.erase(0, nl + 1);
  return true;
}

Result<std::string> Connection::read_line(int timeout_ms, std::vector<util::Fd>* fds) {
  std::vector<util::Fd> got;  // closed on every path that does not hand them to the caller
  std::string line;
  // One deadline for the whole line: a peer that sends a byte now and then cannot stretch it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(0, timeout_ms));
  for (;;) {
    if (take_line(line)) {
      if (fds != nullptr) std::move(got.begin(), got.end(), std::back_inserter(*fds));
      return line;
    }
    int wait_ms = -1;
    if (timeout_ms >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::max<long long>(0, left.count()));
    }
    pollfd p{.fd = fd_.get(), .events = POLLIN, .revents = 0};
    const int r = ::poll(&p, 1, wait_ms);
    if (r == 0) return make_error(Error::Code::Io, "the agent did not answer in time");
    if (r < 0) {
      if (errno == EINTR) continue;
      return make_error(Error::Code::Io, fmt::format("reading from the agent: {}", std::strerror(errno)));
    }
    const ssize_t n = receive(fd_.get(), in_, got);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      return make_error(Error::Code::Io, "the agent closed the connection");
    }
    if (in_.size() > kMaxLine) return make_error(Error::Code::Io, "a line over 1 MiB from the agent");
  }
}

Result<Peer> Connection::peer() const {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd_.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return make_error(Error::Code::Io, fmt::format("SO_PEERCRED: {}", std::strerror(errno)));
  }
  Peer p{.uid = cred.uid, .gid = cred.gid, .pid = cred.pid, .groups = {}};
  // The groups the peer had when it connected; the kernel says how many when the room is short.
  std::vector<gid_t> groups(64);
  for (int tries = 0; tries < 2; ++tries) {
    socklen_t size = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd_.get(), SOL_SOCKET, SO_PEERGROUPS, groups.data(), &size) == 0) {
      groups.resize(size / sizeof(gid_t));
      p.groups = std::move(groups);
      return p;
    }
    if (errno != ERANGE) break;
    groups.resize(size / sizeof(gid_t));
  }
  if (errno == ENOPROTOOPT) return p;  // a kernel before 4.13: no supplementary groups
  return make_error(Error::Code::Io, fmt::format("SO_PEERGROUPS: {}", std::strerror(errno)));
}

void Listener::close_and_remove() {
  if (fd_) {
    fd_.reset();
    ::unlink(path_.c_str());
  }
}

Listener& Listener::operator=(Listener&& other) noexcept {
  if (this != &other) {
    close_and_remove();
    fd_ = std::move(other.fd_);
    path_ = std::move(other.path_);
  }
  return *this;
}

Listener::~Listener() { close_and_remove(); }

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
  util::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return make_error(Error::Code::Io, fmt::format("socket: {}", std::strerror(errno)));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    return make_error(Error::Code::Io, fmt::format("cannot bind {}: {}", path, std::strerror(err)));
  }
  l.fd_ = std::move(fd);
  l.path_ = path;
  ::chmod(path.c_str(), 0666);  // anyone may connect; each request's rights come from SO_PEERCRED
  if (::listen(l.fd_.get(), 512) != 0) {
    return make_error(Error::Code::Io, fmt::format("cannot listen on {}: {}", path, std::strerror(errno)));
  }
  return l;
}

Connection Listener::accept() {
  return Connection(util::Fd(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)));
}

}  // namespace tarmac::sched
