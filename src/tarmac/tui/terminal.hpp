// The terminal under `tarmac top`, through ncurses: the alternate screen, colours, keys and the
// mouse, and the terminal given back as it was on every way out (q, Ctrl-C, SIGTERM, SIGHUP, a
// crash). Only this file knows ncurses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tarmac/tui/layout.hpp"
#include "tarmac/tui/view.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::tui {

// Why `term` (the TERM variable, nullptr when unset) cannot run a full-screen view, or nullopt
// when it can.
[[nodiscard]] std::optional<std::string> terminal_refusal(const char* term);

// Whether the locale's character set is UTF-8 (else top draws ASCII).
[[nodiscard]] bool locale_is_utf8();

// Set by SIGINT, SIGTERM and SIGHUP while a Terminal is open: the view ends and restores the
// terminal (the handlers are installed before ncurses, which then leaves them alone).
[[nodiscard]] int pending_stop_signal();

class Terminal {
 public:
  // Takes over the terminal on stdin/stdout.
  [[nodiscard]] static Result<std::unique_ptr<Terminal>> open(bool color);
  ~Terminal();
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  // The screen's size now (columns, lines).
  [[nodiscard]] std::pair<int, int> size() const;
  // Draws `frame` (only what changed reaches the terminal; nothing when it is the frame drawn last
  // and the screen was not resized).
  void draw(const Frame& frame);
  // Every key and click waiting, without blocking.
  [[nodiscard]] std::vector<Input> read_input();

 private:
  Terminal() = default;
  void* screen_ = nullptr;  // ncurses' SCREEN
  bool color_ = false;
  Frame last_;
  std::pair<int, int> last_size_{-1, -1};
};

}  // namespace tarmac::tui
