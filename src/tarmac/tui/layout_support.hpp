// Internal to tui/: what the screens of layout.cpp and screens.cpp share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/tui/layout.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::tui::detail {

// Builds one line of at most `width` columns from spans; everything added is escaped for the
// terminal first (others' command lines, user names, host names).
class Builder {
 public:
  explicit Builder(int width) : width_(std::max(0, width)) {}

  Builder& add(std::string_view text, Style style = Style::Plain) {
    if (used_ >= width_ || text.empty()) return *this;
    // Printable ASCII (most of a frame) needs neither escaping nor width lookups.
    const bool plain = std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7F; });
    std::string t = plain ? fit(text, width_ - used_, false) : fit(util::terminal_text(text), width_ - used_, false);
    used_ += plain ? static_cast<int>(t.size()) : text_width(t);
    line_.spans.push_back({std::move(t), style});
    return *this;
  }
  Builder& pad_to(int column, Style style = Style::Plain) {
    if (column > used_) add(std::string(static_cast<std::size_t>(std::min(column, width_) - used_), ' '), style);
    return *this;
  }
  // Every span in `style` (a selected row), padded to the full width.
  Builder& all(Style style) {
    for (auto& s : line_.spans) s.style = style;
    return pad_to(width_, style);
  }
  [[nodiscard]] int used() const { return used_; }
  Line done() { return std::move(line_); }

 private:
  int width_;
  int used_ = 0;
  Line line_;
};

// One line of `text` in `style`, cut to `width`.
inline Line plain_line(int width, std::string_view text, Style style = Style::Plain) {
  Builder b(width);
  b.add(text, style);
  return b.done();
}

// Others' text cut to `width` columns: escaped first, so the cut counts the columns it will take.
[[nodiscard]] inline std::string safe_fit(std::string_view text, int width, bool pad = true) {
  return fit(util::terminal_text(text), width, pad);
}

// "37.1G", "512M", "?" for unknown.
[[nodiscard]] std::string bytes_short(std::optional<std::uint64_t> bytes);

// The screens besides the main one, and the signal dialog drawn over it.
// "gpu-b:9478 " before a GPU of another host when several are shown; "" with one.
[[nodiscard]] std::string host_prefix(const Model& model, std::size_t host);
// One GPU's lines (panels.cpp): compact or `full`, then one per MIG device, with their classes `mig`.
void gpu_panel(std::vector<Line>& out, const Model& model, std::size_t host, const gpu::Device& d, gpu::Activity cls,
               const std::vector<gpu::MigActivity>& mig, const ViewState& view, int width, bool full);

void help_screen(Frame& f, const FrameContext& ctx);
void detail_screen(Frame& f, const Model& model, const ViewState& view, const FrameContext& ctx);
void report_screen(Frame& f, const ViewState& view, const FrameContext& ctx);
void dialog_overlay(Frame& f, const ViewState& view, const FrameContext& ctx);

}  // namespace tarmac::tui::detail
