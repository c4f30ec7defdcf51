// `tarmac top`'s screens as text: the main screen (GPU panels, verdicts, process table), help,
// detail and the signal dialog, for a terminal of a given size. Pure: the same Frame is drawn by
// ncurses (terminal.hpp) and printed by --once, and each panel is unit-tested on fixed snapshots.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tarmac/tui/model.hpp"
#include "tarmac/tui/view.hpp"

namespace tarmac::tui {

enum class Style { Plain, Dim, Bold, Good, Warn, Bad, Header, Selected, Title };

struct Span {
  std::string text;  // safe for a terminal (no control characters), one column per character
  Style style = Style::Plain;
  friend bool operator==(const Span&, const Span&) = default;
};

struct Line {
  std::vector<Span> spans;
  [[nodiscard]] std::string text() const;  // the spans' text joined
  friend bool operator==(const Line&, const Line&) = default;
};

struct Frame {
  std::vector<Line> lines;  // at most the height, each at most the width
  friend bool operator==(const Frame&, const Frame&) = default;
};

// What the frame needs besides the model and the view.
struct FrameContext {
  int width = 80;
  int height = 24;
  long long now_ms = 0;       // steady clock
  long long now_unix_s = 0;   // wall clock (process ages, the title's time)
  std::string title_host;     // this machine's name
  std::optional<long long> nvml_waiting_ms;  // the local read has not come back for this long
};

// The rows the table shows now (what Model::rows gives for view.table).
[[nodiscard]] Frame render(const Model& model, const std::vector<Row>& rows, ViewState& view, const FrameContext& ctx);

// The terminal's width of `text` (UTF-8; wcwidth where the locale knows the character, else 1).
[[nodiscard]] int text_width(std::string_view text);

// `text` cut to `width` columns (a cut ends with "~"), padded with spaces to exactly `width` when
// `pad` is set.
[[nodiscard]] std::string fit(std::string_view text, int width, bool pad = true);

// A one-line graph of the last `width` points of `points`, scaled to [0, top]: block characters
// (" ▁▂▃▄▅▆▇█"), or " .-:=+*#@" when `ascii`.
[[nodiscard]] std::string sparkline(const std::deque<double>& points, int width, double top, bool ascii);

// "[######----]" style bar of `fraction` in `width` cells (including brackets).
[[nodiscard]] std::string bar(double fraction, int width, bool ascii);

// The frame as plain lines (--once to a pipe), or with ANSI colours (--once to a terminal).
[[nodiscard]] std::string frame_text(const Frame& frame, bool color);

}  // namespace tarmac::tui
