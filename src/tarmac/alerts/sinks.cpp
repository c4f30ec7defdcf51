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

#include "tarmac/net/http_client.hpp"
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

}  // namespace

Result<void> check_webhook_url(std::string_view text) { return net::check_url(text); }

std::string webhook_origin(std::string_view url) {
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return "(not a URL)";
  const auto end = url.find_first_of("/?#", scheme + 3);
  return std::string(url.substr(0, end)) + (end == std::string_view::npos ? "" : "/…");
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

std::string test_body(std::string_view host, long long ts_ms) {
  nlohmann::json j;
  j["text"] = util::slack_text(fmt::format("TEST from tarmac on {}: alerts reach this webhook", host));
  j["status"] = "test";
  j["ts_ms"] = ts_ms;
  j["alert"] = nullptr;
  return util::json_text(j);
}

Result<void> post_json(const std::string& url, const std::string& body, int timeout_ms, const std::string& ca_file) {
  net::Request request;
  request.url = url;
  request.headers = {"Content-Type: application/json"};
  request.body = body;
  request.timeout_ms = timeout_ms;
  request.ca_file = ca_file;
  request.max_body_bytes = 64 * 1024;  // the answer is read only for its status
  TARMAC_TRY_ASSIGN(const auto response, net::perform(request));
  if (response.status < 200 || response.status > 299) {
    return make_error(Error::Code::Io, fmt::format("answered HTTP {}", response.status));
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
                         const std::vector<std::pair<std::string, std::string>>& env, int timeout_ms,
                         int stdout_fd) {
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
  spec.fds = {{STDIN_FILENO, read_end.get()}, {STDOUT_FILENO, stdout_fd}, {STDERR_FILENO, STDERR_FILENO}};
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
