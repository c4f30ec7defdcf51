// Fd: an owning file descriptor. Every descriptor tarmac holds for longer than one function lives
// in one, so that no path (an early return, an error, a client hanging up) can forget to close it.
#pragma once

#include <unistd.h>

#include <utility>

namespace tarmac::util {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  // The descriptor, still owned; -1 when empty.
  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }

  // Gives up ownership without closing; the caller closes what it gets.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

  // Closes the current descriptor (if any) and owns `fd` instead.
  void reset(int fd = -1) noexcept {
    const int old = std::exchange(fd_, fd);
    if (old >= 0 && old != fd) ::close(old);
  }

 private:
  int fd_ = -1;
};

}  // namespace tarmac::util
