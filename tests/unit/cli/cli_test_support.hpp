// What the cli tests share: output captured from a FILE*, environment variables set for one test,
// a configuration file of the test's own (so no test reads /etc/tarmac or the user's), an agent
// that answers one request on a socket, and a command run through CLI11 as `tarmac` runs it.
#pragma once

#include <CLI/CLI.hpp>
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

}  // namespace tarmac::cli::testing
