#include "tarmac/tui/layout.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <ctime>
#include <cwchar>
#include <fmt/format.h>
#include <set>

#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/tui/layout_support.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::tui {

namespace {

using detail::Builder;
using detail::bytes_short;
using detail::gpu_panel;
using detail::host_prefix;
using detail::plain_line;
using detail::safe_fit;

constexpr int kFullWidth = 110;  // the full layout's first line of a GPU, without its holders

// Decodes one UTF-8 character at `i` of valid UTF-8 `text`; advances `i`.
char32_t next_char(std::string_view text, std::size_t& i) {
  const auto c = static_cast<unsigned char>(text[i]);
  int extra = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
  char32_t cp = extra == 0 ? c : extra == 1 ? (c & 0x1F) : extra == 2 ? (c & 0x0F) : (c & 0x07);
  ++i;
  for (; extra > 0 && i < text.size(); --extra, ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[i]) & 0x3F);
  return cp;
}

int char_width(char32_t cp) {
  if (cp < 0x80) return 1;
  const int w = ::wcwidth(static_cast<wchar_t>(cp));
  return w < 0 ? 1 : w;
}


Style state_style(const Row& r) {
  if (r.state == "busy") return Style::Good;
  if (r.state.rfind("holding", 0) == 0 || r.state == "starved") return Style::Warn;
  if (r.launcher) return Style::Plain;
  return Style::Dim;
}


struct ColumnSpec {
  Column column;
  int width;
};

std::vector<ColumnSpec> table_columns(int width, bool hosts, bool mig) {
  std::vector<ColumnSpec> cols;
  if (hosts) cols.push_back({Column::Host, 18});
  cols.insert(cols.end(), {{Column::Gpu, mig ? 5 : 3},  // "12:6": a MIG device of GPU 12
                           {Column::Pid, 7},
                           {Column::User, 9},
                           {Column::Where, 14},
                           {Column::Mem, 8},
                           {Column::Sm, 4},
                           {Column::Cpu, 5},
                           {Column::Rss, 7},
                           {Column::Age, 5},
                           {Column::State, 11}});
  auto used = [&] {
    int u = 0;
    for (const auto& c : cols) u += c.width + 1;
    return u;
  };
  // Columns given up, in this order, until the command line has room to be read.
  for (Column drop : {Column::Where, Column::Rss, Column::Age, Column::Cpu, Column::User, Column::State}) {
    if (width - used() >= 20) break;
    cols.erase(std::remove_if(cols.begin(), cols.end(), [&](const ColumnSpec& c) { return c.column == drop; }),
               cols.end());
  }
  cols.push_back({Column::Command, std::max(8, width - used())});
  return cols;
}

std::string cell(const Row& r, Column c, const std::vector<Row>& rows, std::size_t index, bool ascii) {
  switch (c) {
    case Column::Host: return r.host_name.empty() ? "local" : r.host_name;
    case Column::Gpu: {
      if (!r.gpu) return "-";
      return r.mig ? fmt::format("{}:{}", *r.gpu, *r.mig) : std::to_string(*r.gpu);
    }
    case Column::Pid: return std::to_string(r.pid);
    case Column::User: return r.user.empty() ? "?" : r.user;
    case Column::Where: return r.where.empty() ? "-" : r.where;
    case Column::Mem: return bytes_short(r.mem_bytes);
    case Column::Sm: return r.sm_pct ? std::to_string(*r.sm_pct) : "?";
    case Column::Cpu: return r.cpu_pct ? fmt::format("{:.0f}", *r.cpu_pct) : "-";
    case Column::Rss: return r.rss_bytes ? bytes_short(r.rss_bytes) : "-";
    case Column::Age: return r.age_s ? short_age(*r.age_s) : "-";
    case Column::State: return r.state;
    case Column::Command: {
      if (r.depth == 0) return r.command;
      const bool last = index + 1 >= rows.size() || rows[index + 1].depth == 0;
      if (ascii) return std::string(last ? "`- " : "|- ") + r.command;
      return std::string(last ? "\u2514\u2500 " : "\u251c\u2500 ") + r.command;
    }
  }
  return "";
}

bool right_aligned(Column c) {
  return c == Column::Pid || c == Column::Mem || c == Column::Sm || c == Column::Cpu || c == Column::Rss ||
         c == Column::Age || c == Column::Gpu;
}

std::string clock_text(long long unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  localtime_r(&t, &tm);
  return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

}  // namespace

std::string Line::text() const {
  std::string out;
  for (const auto& s : spans) out += s.text;
  return out;
}

int text_width(std::string_view text) {
  int w = 0;
  for (std::size_t i = 0; i < text.size();) w += char_width(next_char(text, i));
  return w;
}

std::string fit(std::string_view text, int width, bool pad) {
  if (width <= 0) return "";
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7F; })) {
    // One column per byte.
    const auto w = static_cast<std::size_t>(width);
    if (text.size() > w) return std::string(text.substr(0, w - 1)) + "~";
    std::string out(text);
    if (pad) out.resize(w, ' ');
    return out;
  }
  std::string out;
  int used = 0;
  const int total = text_width(text);
  const int room = total > width ? width - 1 : width;  // a cut leaves one column for "~"
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t start = i;
    const int w = char_width(next_char(text, i));
    if (used + w > room) break;
    out.append(text.substr(start, i - start));
    used += w;
  }
  if (total > width) {
    out += '~';
    ++used;
  }
  if (pad && used < width) out.append(static_cast<std::size_t>(width - used), ' ');
  return out;
}

std::string sparkline(const std::deque<double>& points, int width, double top, bool ascii) {
  static const char* const kBlocks[] = {" ", "\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
  static const char* const kAscii[] = {" ", "_", ".", "-", ":", "=", "+", "*", "#"};
  if (width <= 0) return "";
  std::string out;
  const int n = static_cast<int>(points.size());
  for (int i = 0; i < width - n; ++i) out += ' ';
  for (int i = std::max(0, n - width); i < n; ++i) {
    const double v = points[static_cast<std::size_t>(i)];
    int level = 0;
    if (top > 0 && v > 0) level = std::clamp(static_cast<int>(std::ceil(v / top * 8.0)), 1, 8);
    out += ascii ? kAscii[level] : kBlocks[level];
  }
  return out;
}

std::string bar(double fraction, int width, bool ascii) {
  const int cells = std::max(1, width - 2);
  const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * cells + 0.5);
  std::string out = "[";
  for (int i = 0; i < cells; ++i) out += i < filled ? (ascii ? "#" : "\u2588") : (ascii ? "-" : "\u2591");
  return out + "]";
}

Frame render(const Model& model, const std::vector<Row>& rows, ViewState& view, const FrameContext& context) {
  Frame f;
  // A height of 0: as tall as it takes (--once), with no key hints.
  const bool unbounded = context.height <= 0;
  FrameContext ctx = context;
  if (unbounded) ctx.height = 1 << 20;
  const int w = std::max(1, ctx.width);
  if (view.mode == Mode::Help) {
    detail::help_screen(f, ctx);
    if (static_cast<int>(f.lines.size()) > ctx.height) f.lines.resize(static_cast<std::size_t>(std::max(0, ctx.height)));
    return f;
  }
  if (view.mode == Mode::Report) {
    detail::report_screen(f, view, ctx);
    return f;
  }
  if (view.mode == Mode::Detail && view.detail) {
    detail::detail_screen(f, model, view, ctx);
    if (static_cast<int>(f.lines.size()) > ctx.height) f.lines.resize(static_cast<std::size_t>(std::max(0, ctx.height)));
    return f;
  }

  // Title.
  std::size_t gpus = 0;
  std::size_t migs = 0;  // MIG devices: a line each under their GPU
  std::set<std::pair<std::size_t, unsigned>> procs;
  for (std::size_t i = 0; i < model.hosts().size(); ++i) {
    const auto& h = model.hosts()[i];
    if (!h.snapshot) continue;
    gpus += h.snapshot->devices.size();
    for (const auto& d : h.snapshot->devices) {
      for (const auto& p : d.processes) procs.insert({i, p.pid});
      if (!d.lost) migs += d.mig.size();
    }
  }
  {
    Builder b(w);
    b.add("tarmac top", Style::Title).add("  ");
    if (model.hosts().size() > 1) {
      b.add(fmt::format("{} hosts", model.hosts().size()), Style::Bold);
    } else {
      b.add(ctx.title_host.empty() ? std::string("this host") : ctx.title_host, Style::Bold);
    }
    b.add(fmt::format("  {} GPU{}", gpus, gpus == 1 ? "" : "s"));
    if (migs > 0) b.add(fmt::format("  {} MIG device{}", migs, migs == 1 ? "" : "s"));
    b.add(fmt::format("  {} process{}  {}  every {:g}s", procs.size(), procs.size() == 1 ? "" : "es",
                      clock_text(ctx.now_unix_s), view.interval_s));
    if (view.readonly) b.add("  read-only", Style::Dim);
    for (const auto& h : model.hosts()) {
      if (h.via_agent) b.add("  via agent", Style::Dim);  // this machine's agent's live view
    }
    f.lines.push_back(b.done());
  }
  // What does not answer.
  for (const auto& h : model.hosts()) {
    if (h.agent_problem.empty()) continue;
    f.lines.push_back(plain_line(w, fmt::format("this host's agent: {}: reading NVML here", h.agent_problem), Style::Warn));
  }
  if (ctx.nvml_waiting_ms) {
    f.lines.push_back(plain_line(w, fmt::format("NVML has not answered for {}: showing what it said last",
                                                short_age(*ctx.nvml_waiting_ms / 1000)),
                                 Style::Warn));
  }
  for (const auto& h : model.hosts()) {
    if (!h.problem) continue;
    const std::string who = h.name.empty() ? std::string("this host") : h.name;
    std::string text = fmt::format("{}: {} (for {}", who, *h.problem, short_age((ctx.now_ms - h.problem_since_ms) / 1000));
    text += h.snapshot ? fmt::format("; its data is {} old)", short_age((ctx.now_ms - h.received_ms) / 1000)) : ")";
    f.lines.push_back(plain_line(w, text, Style::Bad));
  }

  // GPU panels: full when asked, or when the terminal has the room.
  const int table_min = 5;  // header, three rows, footer
  bool full = view.layout == LayoutChoice::Full;
  if (view.layout == LayoutChoice::Auto) {
    full = w >= kFullWidth && static_cast<int>(f.lines.size()) + static_cast<int>(gpus) * 3 + static_cast<int>(migs) + 3 +
                                  table_min <=
                              ctx.height;
  }
  std::vector<Line> panels;
  for (std::size_t i = 0; i < model.hosts().size(); ++i) {
    const auto& h = model.hosts()[i];
    if (!h.snapshot) {
      if (!h.problem) {
        panels.push_back(plain_line(w, (h.name.empty() ? std::string("this host") : h.name) + ": waiting for the first reading",
                                    Style::Dim));
      }
      continue;
    }
    for (std::size_t di = 0; di < h.snapshot->devices.size(); ++di) {
      const auto cls = di < h.classes.size() ? h.classes[di] : gpu::Activity::Idle;
      gpu_panel(panels, model, i, h.snapshot->devices[di], cls,
                di < h.mig_classes.size() ? h.mig_classes[di] : std::vector<gpu::MigActivity>{}, view, w, full);
    }
  }
  // Panels never push the table off the screen: what does not fit is counted.
  const int room = std::max(1, ctx.height - static_cast<int>(f.lines.size()) - table_min);
  if (static_cast<int>(panels.size()) > room) {
    const auto hidden = panels.size() - static_cast<std::size_t>(room - 1);
    panels.resize(static_cast<std::size_t>(room - 1));
    panels.push_back(plain_line(w, fmt::format("... {} more lines of GPUs: a taller terminal shows them", hidden), Style::Dim));
  }
  for (auto& l : panels) f.lines.push_back(std::move(l));

  // Verdicts: at most three lines.
  const auto verdicts = model.verdicts();
  const std::size_t shown = std::min<std::size_t>(verdicts.size(), static_cast<int>(f.lines.size()) + table_min + 3 <= ctx.height ? 3 : 1);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto& v = verdicts[i];
    const Style s = v.severity == diagnose::Severity::Critical ? Style::Bad
                    : v.severity == diagnose::Severity::Warning ? Style::Warn
                                                                 : Style::Dim;
    std::string text = "! " + v.text;
    if (i + 1 == shown && verdicts.size() > shown) text += fmt::format("  (+{} more)", verdicts.size() - shown);
    f.lines.push_back(plain_line(w, text, s));
  }

  // The process table.
  const auto cols = table_columns(w, model.hosts().size() > 1,
                                  std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.mig.has_value(); }));
  view.hits.header_columns.clear();
  {
    Builder b(w);
    int x = 0;
    for (const auto& c : cols) {
      std::string title = column_title(c.column);
      if (c.column == view.table.sort) title += view.ascii ? (view.table.descending ? "v" : "^") : (view.table.descending ? "\u25bc" : "\u25b2");
      view.hits.header_columns.push_back({x, c.column});
      const std::string text = right_aligned(c.column) ? fmt::format("{:>{}}", fit(title, c.width, false), c.width) : fit(title, c.width);
      b.add(text, Style::Header).add(" ", Style::Header);
      x += c.width + 1;
    }
    b.pad_to(w, Style::Header);
    view.hits.header_line = static_cast<int>(f.lines.size());
    f.lines.push_back(b.done());
  }
  const int visible = std::max(1, ctx.height - static_cast<int>(f.lines.size()) - 1);
  view.hits.page = visible;
  if (!rows.empty()) view.selected = std::min(view.selected, rows.size() - 1);
  if (view.selected < view.scroll) view.scroll = view.selected;
  if (view.selected >= view.scroll + static_cast<std::size_t>(visible)) view.scroll = view.selected - static_cast<std::size_t>(visible) + 1;
  if (view.scroll > 0 && view.scroll + static_cast<std::size_t>(visible) > rows.size()) {
    view.scroll = rows.size() > static_cast<std::size_t>(visible) ? rows.size() - static_cast<std::size_t>(visible) : 0;
  }
  view.hits.first_row_line = static_cast<int>(f.lines.size());
  view.hits.first_row_index = view.scroll;
  view.hits.rows_shown = 0;
  if (rows.empty()) {
    const bool filtered = !view.table.text.empty() || view.table.only_mine || view.table.gpu;
    f.lines.push_back(plain_line(w, filtered ? "  no process matches the filters (Esc clears them)" : "  no GPU processes", Style::Dim));
  }
  for (std::size_t i = view.scroll; i < rows.size() && static_cast<int>(i - view.scroll) < visible; ++i) {
    const Row& r = rows[i];
    Builder b(w);
    for (const auto& c : cols) {
      const std::string text = util::terminal_text(cell(r, c.column, rows, i, view.ascii));
      const std::string shown_text = right_aligned(c.column) ? fmt::format("{:>{}}", fit(text, c.width, false), c.width) : fit(text, c.width);
      Style s = c.column == Column::State ? state_style(r) : Style::Plain;
      if (c.column == Column::Sm && !r.sm_pct) s = Style::Dim;
      if (r.others && !r.launcher) s = Style::Dim;
      if (r.launcher && c.column == Column::Command) s = Style::Bold;
      b.add(shown_text, s);
      if (c.column != Column::Command) b.add(" ");
    }
    if (i == view.selected && view.mode != Mode::Dialog) b.all(Style::Selected);
    f.lines.push_back(b.done());
    ++view.hits.rows_shown;
  }
  if (unbounded) return f;
  while (static_cast<int>(f.lines.size()) < ctx.height - 1) f.lines.emplace_back();

  // Footer.
  {
    Builder b(w);
    if (view.mode == Mode::Confirm) {
      b.add(view.confirm_text, Style::Warn).add("   Enter cancel it   any other key keeps it", Style::Bold);
    } else if (view.mode == Mode::Prompt) {
      b.add("filter: ", Style::Bold).add(view.prompt).add("_", Style::Bold).add("   Enter keep  Esc cancel", Style::Dim);
    } else if (!view.message.empty()) {
      b.add(view.message, Style::Warn);
    } else {
      std::string filters;
      if (!view.table.text.empty()) filters += " [/" + view.table.text + "]";
      if (view.table.only_mine) filters += " [mine]";
      if (view.table.gpu) {
        filters += fmt::format(" [{}GPU {}]", host_prefix(model, view.table.gpu->first), view.table.gpu->second);
      }
      if (view.table.tree) filters += " [tree]";
      if (!filters.empty()) b.add(filters.substr(1) + "  ", Style::Bold);
      b.add(view.readonly ? "Enter detail  d doctor  t tree  / filter  u mine  g GPU  s sort  h help  q quit"
                          : "k signal  Enter detail  d doctor  c cancel job  t tree  / filter  u mine  g GPU  s sort  h help  q quit",
            Style::Dim);
    }
    f.lines.push_back(b.done());
  }
  if (view.mode == Mode::Dialog) {
    // A dialog that cannot be shown whole is not opened: Enter must never send what was not read.
    if (ctx.height < 10 || ctx.width < 24) {
      view.mode = Mode::Main;
      view.target.reset();
      view.message = "the terminal is too small for the signal dialog: nothing sent";
      f.lines.back() = plain_line(w, view.message, Style::Warn);
    } else {
      detail::dialog_overlay(f, view, ctx);
    }
  }
  if (static_cast<int>(f.lines.size()) > ctx.height) f.lines.resize(static_cast<std::size_t>(std::max(0, ctx.height)));
  return f;
}

std::string frame_text(const Frame& frame, bool color) {
  std::string out;
  for (const auto& line : frame.lines) {
    std::string text;
    for (const auto& s : line.spans) {
      if (!color || s.style == Style::Plain) {
        text += s.text;
        continue;
      }
      const char* code = "";
      switch (s.style) {
        case Style::Plain: break;
        case Style::Dim: code = "2"; break;
        case Style::Bold:
        case Style::Title: code = "1"; break;
        case Style::Good: code = "32"; break;
        case Style::Warn: code = "33"; break;
        case Style::Bad: code = "31"; break;
        case Style::Header:
        case Style::Selected: code = "7"; break;
      }
      text += fmt::format("\033[{}m{}\033[0m", code, s.text);
    }
    if (!color) {
      while (!text.empty() && text.back() == ' ') text.pop_back();
    }
    out += text;
    out += '\n';
  }
  return out;
}

}  // namespace tarmac::tui
