#include "tarmac/alerts/sinks.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "tarmac/util/escape.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::alerts {

namespace {

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Waits until `fd` is ready for `events` or `deadline` passes; false on a timeout.
bool wait_fd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // let the next call report the error
  }
}

Result<int> connect_to(const WebhookUrl& url, std::chrono::steady_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(url.port);
  if (int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return make_error(Error::Code::NotFound, fmt::format("cannot resolve {}: {}", url.host, ::gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) continue;
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!wait_fd(fd.get(), POLLOUT, deadline)) {
        why = "timed out connecting";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      why = std::strerror(errno);
      continue;
    }
    const int out = fd.release();
    ::freeaddrinfo(found);
    return out;
  }
  ::freeaddrinfo(found);
  return make_error(Error::Code::Io, fmt::format("cannot connect to {}:{}: {}", url.host, url.port, why));
}

}  // namespace

Result<WebhookUrl> parse_webhook_url(std::string_view text) {
  if (text.starts_with("https://")) {
    return make_error(Error::Code::Invalid,
                      fmt::format("'{}': tarmac posts plain http:// only; for https, point it at a local relay "
                                  "(for example a reverse proxy on 127.0.0.1) that forwards over TLS",
                                  text));
  }
  const auto bad = [&] {
    return make_error(Error::Code::Invalid, fmt::format("'{}' is not http://host[:port]/path", text));
  };
  if (!text.starts_with("http://")) return bad();
  std::string_view rest = text.substr(7);
  WebhookUrl url;
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  url.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (authority.empty() || authority.find('@') != std::string_view::npos) return bad();
  if (authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return bad();
    url.host = std::string(authority.substr(1, close - 1));
    authority = authority.substr(close + 1);
    if (!authority.empty() && authority.front() != ':') return bad();
  } else {
    const auto colon = authority.find(':');
    url.host = std::string(authority.substr(0, colon));
    authority = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
  }
  if (url.host.empty() || url.host.find_first_of(" \t/?#") != std::string::npos) return bad();
  if (!authority.empty()) {
    const auto port = util::parse_int(authority.substr(1));
    if (!port || *port < 1 || *port > 65535) return bad();
    url.port = static_cast<unsigned>(*port);
  }
  if (url.path.find_first_of(" \t\r\n") != std::string::npos) return bad();
  return url;
}

nlohmann::json alert_json(const Alert& alert) {
  nlohmann::json j;
  j["rule"] = to_string(alert.rule);
  j["severity"] = to_string(alert.severity);
  j["key"] = alert.key;
  j["gpu"] = alert.gpu ? nlohmann::json(*alert.gpu) : nlohmann::json(nullptr);
  j["uuid"] = alert.uuid;
  j["gpus"] = alert.gpus;
  j["pid"] = alert.pid ? nlohmann::json(*alert.pid) : nlohmann::json(nullptr);
  j["user"] = alert.user;
  j["command"] = alert.command;
  j["job"] = alert.job;
  j["since_ms"] = alert.since_ms;
  j["summary"] = alert.summary;
  return j;
}

std::string notice_body(const Notice& notice) {
  nlohmann::json j;
  j["text"] = util::slack_text(notice.text());  // Slack reads <...> and & as markup: shown, not obeyed
  j["status"] = to_string(notice.kind);
  j["ts_ms"] = notice.ts_ms;
  j["alert"] = alert_json(notice.alert);
  return util::json_text(j);
}

Result<void> post_json(const WebhookUrl& url, const std::string& body, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);  // for all of it
  auto connected = connect_to(url, deadline);
  if (!connected.ok()) return connected.take_error();
  Fd fd(*connected);
  const bool v6 = url.host.find(':') != std::string::npos;
  std::string request = fmt::format(
      "POST {} HTTP/1.1\r\nHost: {}{}{}:{}\r\nUser-Agent: tarmac\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\nConnection: close\r\n\r\n",
      url.path, v6 ? "[" : "", url.host, v6 ? "]" : "", url.port, body.size());
  request += body;
  std::size_t sent = 0;
  while (sent < request.size()) {
    if (!wait_fd(fd.get(), POLLOUT, deadline)) return make_error(Error::Code::Io, "timed out sending");
    const ssize_t n = ::send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return make_error(Error::Code::Io, fmt::format("cannot send: {}", std::strerror(errno)));
    }
    sent += static_cast<std::size_t>(n);
  }
  // The status line is all we need.
  std::string answer;
  char buffer[1024];
  while (answer.find("\r\n") == std::string::npos && answer.size() < 8192) {
    if (!wait_fd(fd.get(), POLLIN, deadline)) return make_error(Error::Code::Io, "timed out waiting for the answer");
    const ssize_t n = ::recv(fd.get(), buffer, sizeof buffer, 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return make_error(Error::Code::Io, fmt::format("cannot read the answer: {}", std::strerror(errno)));
    }
    if (n == 0) break;
    answer.append(buffer, static_cast<std::size_t>(n));
  }
  const auto line = answer.substr(0, answer.find("\r\n"));
  const auto words = util::split(line, ' ');
  if (words.size() < 2 || !words[0].starts_with("HTTP/")) {
    return make_error(Error::Code::Io, "no HTTP answer");
  }
  const auto status = util::parse_int(words[1]);
  if (!status || *status < 200 || *status > 299) {
    return make_error(Error::Code::Io, fmt::format("answered {}", line.substr(words[0].size() + 1)));
  }
  return {};
}

std::vector<std::string> command_argv(std::string_view command) {
  std::vector<std::string> out;
  std::string word;
  for (char c : command) {
    if (c == ' ' || c == '\t' || c == '\n') {
      if (!word.empty()) out.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

std::vector<std::pair<std::string, std::string>> notice_env(const Notice& notice) {
  const Alert& a = notice.alert;
  return {
      {"TARMAC_ALERT_STATUS", to_string(notice.kind)},
      {"TARMAC_ALERT_RULE", to_string(a.rule)},
      {"TARMAC_ALERT_SEVERITY", to_string(a.severity)},
      {"TARMAC_ALERT_KEY", a.key},
      {"TARMAC_ALERT_GPU", a.gpu ? std::to_string(*a.gpu) : ""},
      {"TARMAC_ALERT_UUID", a.uuid},
      {"TARMAC_ALERT_PID", a.pid ? std::to_string(*a.pid) : ""},
      {"TARMAC_ALERT_USER", a.user},
      {"TARMAC_ALERT_SINCE_MS", std::to_string(a.since_ms)},
      {"TARMAC_ALERT_SUMMARY", a.summary},
      {"TARMAC_ALERT_TEXT", notice.text()},
  };
}

namespace {

// How long a command killed at its timeout may take to end before it is left unreaped: a process
// stuck in the kernel must not hold up the sender (or the agent's stop) for ever.
constexpr long long kKilledCommandMs = 2000;

// The agent's environment with `env`'s variables in place of any it has.
std::vector<std::string> command_environment(const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> out;
  for (auto& entry : util::own_environment()) {
    bool replaced = false;
    for (const auto& [k, v] : env) replaced = replaced || entry.starts_with(k + "=");
    if (!replaced) out.push_back(std::move(entry));
  }
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

Result<void> run_command(const std::vector<std::string>& argv, const std::string& input,
                         const std::vector<std::pair<std::string, std::string>>& env, int timeout_ms) {
  if (argv.empty()) return make_error(Error::Code::Invalid, "empty command");
  // Found on the agent's PATH, as execvp would, but before the child exists.
  const char* path_env = std::getenv("PATH");
  const auto path = util::resolve_command(argv[0], path_env != nullptr ? path_env : "/bin:/usr/bin");
  if (!path) {
    return make_error(Error::Code::NotFound, fmt::format("{}: cannot run it (not found or not executable)", argv[0]));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return make_error(Error::Code::Io, fmt::format("cannot make a pipe: {}", std::strerror(errno)));
  }
  Fd read_end(pipe_fds[0]);
  Fd write_end(pipe_fds[1]);
  // Only our end: a command that does not read must not block the sender past the timeout.
  const int flags = ::fcntl(write_end.get(), F_GETFL);
  if (flags < 0 || ::fcntl(write_end.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return make_error(Error::Code::Io, fmt::format("cannot set up the command's stdin: {}", std::strerror(errno)));
  }
  util::ProcessSpec spec;
  spec.path = *path;
  spec.argv = argv;
  spec.env = command_environment(env);
  // Its output goes where the agent's goes (the journal); no other descriptor of the agent's.
  spec.fds = {{STDIN_FILENO, read_end.get()}, {STDOUT_FILENO, STDOUT_FILENO}, {STDERR_FILENO, STDERR_FILENO}};
  auto child = util::start_process(spec);
  if (!child.ok()) return child.take_error();
  read_end.reset();
  // A command that does not read its stdin must not kill us with SIGPIPE: block it in this thread
  // while writing, and take any pending one back.
  sigset_t pipe_set;
  sigset_t old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::size_t written = 0;
  while (written < input.size()) {
    const ssize_t n = ::write(write_end.get(), input.data() + written, input.size() - written);
    if (n > 0) {
      written += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(write_end.get(), POLLOUT, deadline)) break;  // it does not read: the timeout below kills it
    } else {
      break;  // EPIPE: it closed its stdin, which is its right
    }
  }
  write_end.reset();
  timespec zero{0, 0};
  while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);

  const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  auto ended = util::wait_for(*child, left_ms.count());
  if (!ended.ok()) return ended.take_error();
  if (!ended->has_value()) {
    (void)util::send_signal(*child, SIGKILL);  // fails only when it has just ended: reaped below either way
    (void)util::wait_for(*child, kKilledCommandMs);
    return make_error(Error::Code::Io, fmt::format("{} did not finish within {} ms (killed)", argv[0], timeout_ms));
  }
  const int status = **ended;
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    return make_error(Error::Code::Io, fmt::format("{} exited with {}", argv[0], WEXITSTATUS(status)));
  }
  if (WIFSIGNALED(status)) {
    return make_error(Error::Code::Io, fmt::format("{} was killed by signal {}", argv[0], WTERMSIG(status)));
  }
  return {};
}

}  // namespace tarmac::alerts
