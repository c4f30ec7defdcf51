#include <algorithm>
#include <csignal>
#include <fmt/format.h>
#include <iterator>

#include "tarmac/tui/layout_support.hpp"
#include "tarmac/util/escape.hpp"

// The screens besides the main one: help, a process's detail, what doctor said, and the signal
// dialog drawn over the main screen.
namespace tarmac::tui::detail {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;

}  // namespace

std::string bytes_short(std::optional<std::uint64_t> bytes) {
  if (!bytes) return "?";
  const auto b = static_cast<double>(*bytes);
  if (b >= kGiB) return fmt::format("{:.1f}G", b / kGiB);
  return fmt::format("{:.0f}M", b / kMiB);
}

void help_screen(Frame& f, const FrameContext& ctx) {
  static const char* const kLines[] = {
      "tarmac top: keys (docs/top.md)",
      "",
      "  Up/Down PgUp/PgDn Home/End   select a process (the mouse too; the wheel scrolls)",
      "  Enter                        details: command line, environment, parents, history",
      "  k  F9                        send a signal (TERM, KILL, INT) to the selected process",
      "  d                            tarmac doctor on the selected process's job (5 s), in a panel",
      "  c                            cancel the tarmac job the selected process runs in (tarmac cancel)",
      "  t                            tree: ranks under their launcher (torchrun, accelerate...)",
      "  s  S                         sort by the next / previous column (a click on a title too)",
      "  r                            reverse the order",
      "  M  U  P  N  T                sort by GPU memory, SM %, CPU %, PID, age",
      "  /                            filter by text (user, command, PID, container); Enter keeps it",
      "  u                            only my processes",
      "  g                            one GPU after the other, then all",
      "  Esc                          clear the filters",
      "  f                            layout: auto, compact, full",
      "  h  ?                         this help (any key closes it)",
      "  q  Ctrl-C                    quit",
      "",
      "SM% '?' is unknown (the driver did not say), never 0. STATE: busy, holding (memory held at",
      "0 % SM, since when this view first saw it), starved (the GPU waits for data), unknown,",
      "no /proc (the process is in another PID namespace). Dimmed rows are other users'.",
  };
  for (const char* l : kLines) f.lines.push_back(plain_line(ctx.width, l, l == kLines[0] ? Style::Title : Style::Plain));
}

void detail_screen(Frame& f, const Model& model, const ViewState& view, const FrameContext& ctx) {
  const Detail& d = *view.detail;
  const Row& r = d.row;
  const int w = ctx.width;
  f.lines.push_back(plain_line(w, fmt::format("Process {} ({}){}  user {}  {}", r.pid, r.name,
                                              r.gpu ? fmt::format(" on GPU {}", *r.gpu) : std::string(),
                                              r.user.empty() ? "?" : r.user, r.state),
                               Style::Title));
  f.lines.emplace_back();
  f.lines.push_back(plain_line(w, "Command line:", Style::Bold));
  // The whole command line, over as many lines as it takes (at most 8).
  const std::string cmd = util::terminal_text(r.command);
  const int per = std::max(10, w - 2);
  std::size_t at = 0;
  for (int n = 0; at < cmd.size() && n < 8; ++n) {
    std::string piece = fit(std::string_view(cmd).substr(at), per, false);
    if (piece.empty()) break;
    std::size_t bytes = piece.size();
    if (piece.back() == '~' && at + bytes < cmd.size()) --bytes;  // fit's cut mark
    f.lines.push_back(plain_line(w, "  " + std::string(std::string_view(cmd).substr(at, bytes))));
    at += bytes;
  }
  f.lines.emplace_back();
  f.lines.push_back(plain_line(w, fmt::format("GPU memory {}  SM {}  CPU {}  RSS {}  age {}  where {}", bytes_short(r.mem_bytes),
                                              r.sm_pct ? fmt::format("{}%", *r.sm_pct) : std::string("unknown"),
                                              r.cpu_pct ? fmt::format("{:.0f}%", *r.cpu_pct) : std::string("-"),
                                              r.rss_bytes ? bytes_short(r.rss_bytes) : std::string("-"),
                                              r.age_s ? short_age(*r.age_s) : std::string("-"),
                                              r.where.empty() ? std::string("-") : r.where)));
  f.lines.emplace_back();
  f.lines.push_back(plain_line(w, "Environment:", Style::Bold));
  if (d.environment_problem) {
    f.lines.push_back(plain_line(w, "  " + *d.environment_problem, Style::Dim));
  } else if (d.environment.empty()) {
    f.lines.push_back(plain_line(w, "  none of CUDA_VISIBLE_DEVICES, RANK, LOCAL_RANK, WORLD_SIZE, TARMAC_JOB_ID", Style::Dim));
  }
  for (const auto& [k, v] : d.environment) f.lines.push_back(plain_line(w, "  " + k + "=" + v));
  f.lines.emplace_back();
  f.lines.push_back(plain_line(w, "Parents:", Style::Bold));
  if (d.parents.empty()) f.lines.push_back(plain_line(w, "  -", Style::Dim));
  for (const auto& p : d.parents) f.lines.push_back(plain_line(w, "  " + p));
  f.lines.emplace_back();
  const ProcessHistory* h = model.process_history(r.host, r.pid);
  const int graph = std::max(10, w - 14);
  const std::deque<double> none;
  double mem_top = 0;
  if (h) {
    for (double p : h->mem_mib.points()) mem_top = std::max(mem_top, p);
  }
  Builder sm(w);
  sm.add("SM %      ", Style::Dim).add(sparkline(h ? h->sm_pct.points() : none, graph, 100, view.ascii), Style::Good);
  f.lines.push_back(sm.done());
  Builder mem(w);
  mem.add("GPU mem   ", Style::Dim).add(sparkline(h ? h->mem_mib.points() : none, graph, mem_top, view.ascii), Style::Good);
  f.lines.push_back(mem.done());
  f.lines.emplace_back();
  f.lines.push_back(plain_line(w, view.readonly ? "Esc back" : "Esc back   k send a signal", Style::Dim));
}

// The dialog, drawn over the middle of the main screen.
void dialog_overlay(Frame& f, const ViewState& view, const FrameContext& ctx) {
  if (!view.target) return;
  const Row& r = *view.target;
  const int inner = std::min(ctx.width - 4, 64);
  if (inner < 20) return;
  std::vector<std::string> body;
  body.push_back(fmt::format("Send a signal to PID {} ({})", r.pid, r.name.empty() ? "?" : r.name));
  body.push_back(fmt::format("user {}{}", r.user.empty() ? "?" : r.user, r.gpu ? fmt::format(", GPU {}", *r.gpu) : std::string()));
  body.push_back(r.command);
  body.emplace_back();
  std::string choices;
  for (std::size_t i = 0; i < std::size(kDialogSignals); ++i) {
    const std::string name = signal_name(kDialogSignals[i]);
    choices += i == view.signal_choice ? "[" + name + "]" : " " + name + " ";
    choices += " ";
  }
  body.push_back("Signal: " + choices);
  body.push_back("Enter send   Tab/arrows change   Esc cancel");
  const std::string h = view.ascii ? "-" : "\u2500";
  const std::string v = view.ascii ? "|" : "\u2502";
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  std::vector<Line> box;
  const int left = std::max(0, (ctx.width - inner - 4) / 2);
  const std::string pad(static_cast<std::size_t>(left), ' ');
  box.push_back(plain_line(ctx.width, pad + (view.ascii ? "+" : "\u250c") + repeat(h, inner + 2) + (view.ascii ? "+" : "\u2510"), Style::Bold));
  for (std::size_t i = 0; i < body.size(); ++i) {
    Builder b(ctx.width);
    b.add(pad).add(v + " ", Style::Bold).add(fit(util::terminal_text(body[i]), inner), i == 0 ? Style::Title : Style::Plain);
    b.add(" " + v, Style::Bold);
    box.push_back(b.done());
  }
  box.push_back(plain_line(ctx.width, pad + (view.ascii ? "+" : "\u2514") + repeat(h, inner + 2) + (view.ascii ? "+" : "\u2518"), Style::Bold));
  const std::size_t top = f.lines.size() > box.size() ? (f.lines.size() - box.size()) / 2 : 0;
  for (std::size_t i = 0; i < box.size(); ++i) {
    if (top + i < f.lines.size()) {
      f.lines[top + i] = box[i];
    } else {
      f.lines.push_back(box[i]);
    }
  }
}

void report_screen(Frame& f, const ViewState& view, const FrameContext& ctx) {
  const int w = ctx.width;
  f.lines.push_back(plain_line(w, view.report_title, Style::Title));
  f.lines.emplace_back();
  for (const auto& l : view.report_lines) {
    if (static_cast<int>(f.lines.size()) + 2 >= ctx.height) {
      f.lines.push_back(plain_line(w, "... (a taller terminal shows the rest)", Style::Dim));
      break;
    }
    f.lines.push_back(plain_line(w, l));
  }
  f.lines.emplace_back();
  f.lines.push_back(plain_line(w, "any key: back", Style::Dim));
  if (static_cast<int>(f.lines.size()) > ctx.height) f.lines.resize(static_cast<std::size_t>(std::max(0, ctx.height)));
}

}  // namespace tarmac::tui::detail
