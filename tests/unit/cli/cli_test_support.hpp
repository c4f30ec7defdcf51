// What the cli tests share: output captured from a FILE*, environment variables set for one test,
// a configuration file of the test's own (so no test reads /etc/tarmac or the user's), an agent
// that answers one request on a socket, and a command run through CLI11 as `tarmac` runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>
#include <stdio.h>   // open_memstream
#include <stdlib.h>  // setenv, unsetenv
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../store/temp_dir.hpp"
#include "tarmac/cli/app.hpp"
#include "tarmac/cli/context.hpp"
#include "tarmac/util/fd.hpp"

namespace tarmac::cli::testing {

using store::test_support::TempDir;

// What `print(FILE*)` writes, as text.
template <typename Print>
[[nodiscard]] std::string printed(Print&& print) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  if (out == nullptr) return "<open_memstream failed>";
  print(out);
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

// Whether `text` holds a control character a terminal would obey: C0 but the line break, DEL, or
// a C1 control written as a character (U+0080 to U+009F). Hostile-input tests must never see one.
[[nodiscard]] inline bool has_raw_control(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7F) return true;
    if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9F) return true;
  }
  return false;
}

// Sets (or, with nullopt, unsets) an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) ::setenv(name_.c_str(), value->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A directory with tarmac.toml holding `toml`, and global options that read only that file.
class ConfigFixture {
 public:
  explicit ConfigFixture(const std::string& toml = "") {
    std::ofstream(dir_ / "tarmac.toml") << toml;
    global.config = dir_ / "tarmac.toml";
    global.no_color = true;
  }
  [[nodiscard]] const TempDir& dir() const { return dir_; }

  GlobalOptions global;

 private:
  TempDir dir_;
};

// An agent that answers one connection with `answer` (a line, sent as is) and keeps the request.
class FakeAgent {
 public:
  FakeAgent(const std::string& path, std::string answer) : answer_(std::move(answer)) {
    listener_ = util::Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::bind(listener_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener_.get(), 1) != 0) {
      throw std::runtime_error("cannot listen on " + path);
    }
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeAgent() {
    ::shutdown(listener_.get(), SHUT_RDWR);  // wakes an accept that no client came to
    if (thread_.joinable()) thread_.join();
  }
  FakeAgent(const FakeAgent&) = delete;
  FakeAgent& operator=(const FakeAgent&) = delete;

  // The request line it received (after the client is done).
  std::string request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  void serve() {
    const util::Fd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) return;
    char c = 0;
    while (::read(conn.get(), &c, 1) == 1 && c != '\n') request_ += c;
    const std::string line = answer_ + "\n";
    (void)!::write(conn.get(), line.data(), line.size());
  }

  util::Fd listener_;
  std::string answer_;
  std::string request_;
  std::thread thread_;
};

// load_config's result, and what it printed on stderr (its warnings, or why it failed).
struct LoadedConfig {
  Result<config::Loaded> loaded;
  std::string err;
};
[[nodiscard]] inline LoadedConfig load_printing(const GlobalOptions& global) {
  ::testing::internal::CaptureStderr();
  auto loaded = load_config(global);
  return {std::move(loaded), ::testing::internal::GetCapturedStderr()};
}

// The exit code of `tarmac ARGS...` for a command that `add` puts on the app, as app.cpp turns a
// bad command line into kExitUsage.
template <typename Add>
[[nodiscard]] int run_command_line(Add&& add, const GlobalOptions& global, std::vector<std::string> args) {
  CLI::App app{"tarmac"};
  int exit_code = -1;
  add(app, global, exit_code);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.get_exit_code() == 0 ? kExitOk : kExitUsage;
  }
  return exit_code;
}

// What a command printed and how it ended.
struct Ran {
  int code = -1;
  std::string out;
  std::string err;
  [[nodiscard]] std::pair<int, std::string> code_and_err() const { return {code, err}; }
};

// Runs `body` (which returns an exit code) with stdout and stderr captured.
template <typename Body>
[[nodiscard]] Ran run_captured(Body&& body) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  Ran ran;
  ran.code = body();
  ran.out = ::testing::internal::GetCapturedStdout();
  ran.err = ::testing::internal::GetCapturedStderr();
  return ran;
}

// For the commands that talk to the agent: TARMAC_SOCKET names a socket in a directory of the
// test's own, where nothing answers unless the test starts a FakeAgent there.
class AgentSocketTest : public ::testing::Test {
 protected:
  // `tarmac ARGS...` for the commands `add` puts on the app: the exit code and stderr.
  template <typename Add>
  std::pair<int, std::string> run_cli(Add&& add, std::vector<std::string> args) {
    return run_captured([&] { return run_command_line(add, config_.global, std::move(args)); }).code_and_err();
  }
  [[nodiscard]] std::string socket_path() const { return dir_ / "agent.sock"; }

  TempDir dir_;
  ScopedEnv socket_{"TARMAC_SOCKET", dir_ / "agent.sock"};
  ConfigFixture config_;
};

}  // namespace tarmac::cli::testing
