#include "tarmac/tui/terminal.hpp"

#include <curses.h>
#include <langinfo.h>
#include <termios.h>
#include <unistd.h>

#include <clocale>
#include <csignal>
#include <cstring>
#include <string_view>

namespace tarmac::tui {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
struct termios g_saved_termios {};
volatile std::sig_atomic_t g_termios_saved = 0;

void on_stop(int signo) { g_stop_signal = signo; }

// A crash must not leave the person's terminal in the alternate screen without a cursor or echo:
// only async-signal-safe calls here, then the signal's own end.
void on_crash(int signo) {
  // Mouse reports off, keypad in normal mode, the cursor shown, the normal screen back.
  static const char kRestore[] = "\033[?1000l\033[?1002l\033[?1006l\033[?1l\033>\033[?25h\033[?1049l";
  [[maybe_unused]] const auto n = ::write(STDOUT_FILENO, kRestore, sizeof kRestore - 1);
  if (g_termios_saved != 0) ::tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_termios);
  ::signal(signo, SIG_DFL);
  ::raise(signo);
}

struct SavedHandlers {
  struct sigaction intr {}, term {}, hup {}, segv {}, abrt {}, bus {}, fpe {};
};
SavedHandlers g_saved;

void install_handlers() {
  g_stop_signal = 0;
  struct sigaction stop {};
  stop.sa_handler = on_stop;
  sigemptyset(&stop.sa_mask);
  ::sigaction(SIGINT, &stop, &g_saved.intr);
  ::sigaction(SIGTERM, &stop, &g_saved.term);
  ::sigaction(SIGHUP, &stop, &g_saved.hup);
  // A stack overflow's SIGSEGV has no stack left to run the handler on: it gets one of its own.
  static char alternate[1 << 16];
  stack_t stack{};
  stack.ss_sp = alternate;
  stack.ss_size = sizeof alternate;
  ::sigaltstack(&stack, nullptr);
  struct sigaction crash {};
  crash.sa_handler = on_crash;
  sigemptyset(&crash.sa_mask);
  crash.sa_flags = SA_RESETHAND | SA_ONSTACK;
  ::sigaction(SIGSEGV, &crash, &g_saved.segv);
  ::sigaction(SIGABRT, &crash, &g_saved.abrt);
  ::sigaction(SIGBUS, &crash, &g_saved.bus);
  ::sigaction(SIGFPE, &crash, &g_saved.fpe);
}

void restore_handlers() {
  ::sigaction(SIGINT, &g_saved.intr, nullptr);
  ::sigaction(SIGTERM, &g_saved.term, nullptr);
  ::sigaction(SIGHUP, &g_saved.hup, nullptr);
  ::sigaction(SIGSEGV, &g_saved.segv, nullptr);
  ::sigaction(SIGABRT, &g_saved.abrt, nullptr);
  ::sigaction(SIGBUS, &g_saved.bus, nullptr);
  ::sigaction(SIGFPE, &g_saved.fpe, nullptr);
}

enum Pair : short { kGood = 1, kWarn, kBad };

attr_t attributes(Style s, bool color) {
  switch (s) {
    case Style::Plain: return A_NORMAL;
    case Style::Dim: return A_DIM;
    case Style::Bold:
    case Style::Title: return A_BOLD;
    case Style::Good: return color ? COLOR_PAIR(kGood) : A_NORMAL;
    case Style::Warn: return color ? COLOR_PAIR(kWarn) | A_BOLD : A_BOLD;
    case Style::Bad: return color ? COLOR_PAIR(kBad) | A_BOLD : A_BOLD;
    case Style::Header:
    case Style::Selected: return A_REVERSE;
  }
  return A_NORMAL;
}

int translate(int ch) {
  switch (ch) {
    case KEY_UP: return kKeyUp;
    case KEY_DOWN: return kKeyDown;
    case KEY_LEFT: return kKeyLeft;
    case KEY_RIGHT: return kKeyRight;
    case KEY_PPAGE: return kKeyPageUp;
    case KEY_NPAGE: return kKeyPageDown;
    case KEY_HOME: return kKeyHome;
    case KEY_END: return kKeyEnd;
    case KEY_ENTER:
    case '\n':
    case '\r': return kKeyEnter;
    case 27: return kKeyEscape;
    case KEY_BACKSPACE:
    case 127:
    case 8: return kKeyBackspace;
    case '\t': return kKeyTab;
    case KEY_RESIZE: return kKeyResize;
    case KEY_F(9): return kKeyF9;
    case 3: return kKeyInterrupt;
    default: return ch;
  }
}

}  // namespace

std::optional<std::string> terminal_refusal(const char* term) {
  if (term == nullptr || *term == '\0') {
    return std::string("TERM is not set: tarmac top needs to know the terminal (tarmac watch, or tarmac top --once, need not)");
  }
  if (std::string_view(term) == "dumb") {
    return std::string("TERM=dumb cannot show a full-screen view: use tarmac watch, or tarmac top --once");
  }
  return std::nullopt;
}

bool locale_is_utf8() {
  const char* set = ::nl_langinfo(CODESET);
  return set != nullptr && (std::strcmp(set, "UTF-8") == 0 || std::strcmp(set, "utf8") == 0);
}

int pending_stop_signal() { return g_stop_signal; }

Result<std::unique_ptr<Terminal>> Terminal::open(bool color) {
  if (::tcgetattr(STDIN_FILENO, &g_saved_termios) == 0) g_termios_saved = 1;
  install_handlers();
  std::unique_ptr<Terminal> t(new Terminal());
  SCREEN* screen = ::newterm(nullptr, stdout, stdin);
  if (screen == nullptr) {
    restore_handlers();
    const char* term = std::getenv("TERM");
    return make_error(Error::Code::Unsupported,
                      std::string("the terminal \"") + (term ? term : "") + "\" is not in the terminfo database: tarmac top cannot draw on it");
  }
  t->screen_ = screen;
  ::set_term(screen);
  ::cbreak();
  ::noecho();
  ::nonl();
  ::keypad(stdscr, TRUE);
  ::nodelay(stdscr, TRUE);
  ::curs_set(0);
  ::set_escdelay(25);
  ::typeahead(-1);  // a frame goes out in one write, not one per line between looks at the keyboard
  ::mousemask(BUTTON1_CLICKED | BUTTON1_PRESSED | BUTTON4_PRESSED | BUTTON5_PRESSED, nullptr);
  ::mouseinterval(0);
  if (color && ::has_colors()) {
    ::start_color();
    ::use_default_colors();
    ::init_pair(kGood, COLOR_GREEN, -1);
    ::init_pair(kWarn, COLOR_YELLOW, -1);
    ::init_pair(kBad, COLOR_RED, -1);
    t->color_ = true;
  }
  return t;
}

Terminal::~Terminal() {
  if (screen_ != nullptr) {
    ::curs_set(1);
    ::endwin();
    ::delscreen(static_cast<SCREEN*>(screen_));
  }
  restore_handlers();
  g_termios_saved = 0;
}

std::pair<int, int> Terminal::size() const {
  int lines = 0;
  int cols = 0;
  getmaxyx(stdscr, lines, cols);
  return {cols, lines};
}

void Terminal::draw(const Frame& frame) {
  const auto now = size();
  if (now == last_size_ && frame == last_) return;
  last_size_ = now;
  last_ = frame;
  ::erase();
  int y = 0;
  for (const auto& line : frame.lines) {
    ::move(y, 0);
    for (const auto& s : line.spans) {
      const attr_t a = attributes(s.style, color_);
      ::attrset(a);
      ::addstr(s.text.c_str());
    }
    ++y;
  }
  ::attrset(A_NORMAL);
  ::refresh();
}

std::vector<Input> Terminal::read_input() {
  std::vector<Input> out;
  for (int ch = ::getch(); ch != ERR; ch = ::getch()) {
    if (ch == KEY_MOUSE) {
      MEVENT m{};
      if (::getmouse(&m) != OK) continue;
      if ((m.bstate & BUTTON4_PRESSED) != 0) {
        out.push_back({kKeyWheelUp});
      } else if ((m.bstate & BUTTON5_PRESSED) != 0) {
        out.push_back({kKeyWheelDown});
      } else if ((m.bstate & (BUTTON1_CLICKED | BUTTON1_PRESSED)) != 0) {
        out.push_back({kKeyClick, m.x, m.y});
      }
      continue;
    }
    out.push_back({translate(ch)});
    if (out.size() >= 256) break;  // a paste: the rest on the next turn
  }
  return out;
}

}  // namespace tarmac::tui
