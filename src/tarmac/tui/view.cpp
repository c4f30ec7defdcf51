#include "tarmac/tui/view.hpp"

#include <algorithm>
#include <csignal>
#include <iterator>

namespace tarmac::tui {

namespace {

void clamp_selection(ViewState& view, const std::vector<Row>& rows) {
  if (rows.empty()) {
    view.selected = 0;
    return;
  }
  view.selected = std::min(view.selected, rows.size() - 1);
}

void move_selection(ViewState& view, const std::vector<Row>& rows, long long by) {
  if (rows.empty()) return;
  const long long next = static_cast<long long>(view.selected) + by;
  view.selected = static_cast<std::size_t>(std::clamp(next, 0LL, static_cast<long long>(rows.size()) - 1));
}

// Sorting by `column`: the same column again reverses the order; a new one starts in the order
// people want first from it (most memory, most SM, A to Z).
void sort_by(ViewState& view, Column column) {
  if (view.table.sort == column) {
    view.table.descending = !view.table.descending;
    return;
  }
  view.table.sort = column;
  view.table.descending = !(column == Column::Gpu || column == Column::Pid || column == Column::User ||
                            column == Column::Command || column == Column::Host);
}

void next_sort(ViewState& view, int step) {
  const auto n = static_cast<long long>(std::size(kSortable));
  long long i = 0;
  for (; i < n; ++i) {
    if (kSortable[i] == view.table.sort) break;
  }
  i = ((i + step) % n + n) % n;
  sort_by(view, kSortable[i]);
}

void cycle_gpu(ViewState& view, const std::vector<std::pair<std::size_t, unsigned>>& choices) {
  if (choices.empty()) {
    view.table.gpu.reset();
    return;
  }
  if (!view.table.gpu) {
    view.table.gpu = choices.front();
    return;
  }
  const auto it = std::find(choices.begin(), choices.end(), *view.table.gpu);
  if (it == choices.end() || std::next(it) == choices.end()) {
    view.table.gpu.reset();
  } else {
    view.table.gpu = *std::next(it);
  }
}

Command open_dialog(ViewState& view, const std::vector<Row>& rows) {
  if (rows.empty()) return {};
  if (view.readonly) {
    view.message = "read-only (--readonly): no signals";
    return {};
  }
  const Row& row = rows[view.selected];
  if (row.remote) {
    view.message = "a process of another host: signals only on this machine";
    return {};
  }
  view.target = row;
  view.signal_choice = 0;
  view.mode = Mode::Dialog;
  return {};
}

Command main_input(const Input& in, ViewState& view, const std::vector<Row>& rows,
                   const std::vector<std::pair<std::size_t, unsigned>>& gpu_choices) {
  const long long page = std::max(1, view.hits.page);
  switch (in.key) {
    case 'q':
    case 'Q':
    case kKeyInterrupt: return Command{CommandKind::Quit, {}, 0, {}};
    case kKeyUp: move_selection(view, rows, -1); break;
    case kKeyDown: move_selection(view, rows, 1); break;
    case kKeyPageUp: move_selection(view, rows, -page); break;
    case kKeyPageDown: move_selection(view, rows, page); break;
    case kKeyHome: view.selected = 0; break;
    case kKeyEnd: view.selected = rows.empty() ? 0 : rows.size() - 1; break;
    case kKeyWheelUp: move_selection(view, rows, -3); break;
    case kKeyWheelDown: move_selection(view, rows, 3); break;
    case 'h':
    case '?': view.mode = Mode::Help; break;
    case 't': view.table.tree = !view.table.tree; break;
    case 's': next_sort(view, 1); break;
    case 'S': next_sort(view, -1); break;
    case 'r': view.table.descending = !view.table.descending; break;
    case 'M': sort_by(view, Column::Mem); break;
    case 'P': sort_by(view, Column::Cpu); break;
    case 'U': sort_by(view, Column::Sm); break;
    case 'N': sort_by(view, Column::Pid); break;
    case 'T': sort_by(view, Column::Age); break;
    case 'u': view.table.only_mine = !view.table.only_mine; break;
    case 'g': cycle_gpu(view, gpu_choices); break;
    case 'f':
      view.layout = view.layout == LayoutChoice::Auto      ? LayoutChoice::Compact
                    : view.layout == LayoutChoice::Compact ? LayoutChoice::Full
                                                           : LayoutChoice::Auto;
      break;
    case '/':
      view.mode = Mode::Prompt;
      view.prompt = view.table.text;
      view.prompt_before = view.table.text;
      break;
    case kKeyEscape:
      view.table.text.clear();
      view.table.only_mine = false;
      view.table.gpu.reset();
      break;
    case kKeyEnter:
      if (!rows.empty()) return Command{CommandKind::OpenDetail, rows[view.selected], 0, {}};
      break;
    case 'k':
    case kKeyF9: return open_dialog(view, rows);
    case 'd':
      if (rows.empty()) break;
      if (rows[view.selected].remote) {
        view.message = "a process of another host: run tarmac doctor there";
        break;
      }
      return Command{CommandKind::RunDoctor, rows[view.selected], 0, {}};
    case 'c':
      if (rows.empty()) break;
      if (view.readonly) {
        view.message = "read-only (--readonly): no cancel";
        break;
      }
      if (rows[view.selected].remote) {
        view.message = "a process of another host: cancel its job there";
        break;
      }
      return Command{CommandKind::CancelJob, rows[view.selected], 0, {}};
    case kKeyClick:
      if (in.y == view.hits.header_line) {
        Column hit = Column::Command;
        bool found = false;
        for (const auto& [x, column] : view.hits.header_columns) {
          if (in.x >= x) {
            hit = column;
            found = true;
          }
        }
        if (found && std::find(std::begin(kSortable), std::end(kSortable), hit) != std::end(kSortable)) sort_by(view, hit);
      } else if (in.y >= view.hits.first_row_line && in.y < view.hits.first_row_line + view.hits.rows_shown) {
        const std::size_t i = view.hits.first_row_index + static_cast<std::size_t>(in.y - view.hits.first_row_line);
        if (i < rows.size()) view.selected = i;
      }
      break;
    default: break;
  }
  return {};
}

}  // namespace

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "TERM";
    case SIGKILL: return "KILL";
    case SIGINT: return "INT";
    default: return "?";
  }
}

Command handle_input(const Input& in, ViewState& view, const std::vector<Row>& rows,
                     const std::vector<std::pair<std::size_t, unsigned>>& gpu_choices) {
  clamp_selection(view, rows);
  if (in.key == kKeyResize) return {};
  if (in.key != kKeyInterrupt) view.message.clear();
  switch (view.mode) {
    case Mode::Help:
    case Mode::Report:
      if (in.key == kKeyInterrupt) return Command{CommandKind::Quit, {}, 0, {}};
      view.mode = Mode::Main;  // any key closes it
      return {};
    case Mode::Detail:
      if (in.key == kKeyInterrupt || in.key == 'q') return Command{CommandKind::Quit, {}, 0, {}};
      if (in.key == 'k' || in.key == kKeyF9) {
        if (view.detail) {
          view.mode = Mode::Main;
          std::vector<Row> one{view.detail->row};
          ViewState& v = view;
          const std::size_t keep = v.selected;
          v.selected = 0;
          open_dialog(v, one);
          v.selected = keep;
        }
        return {};
      }
      if (in.key == kKeyEscape || in.key == kKeyEnter || in.key == kKeyLeft || in.key == 'h') view.mode = Mode::Main;
      return {};
    case Mode::Dialog: {
      const std::size_t n = std::size(kDialogSignals);
      if (in.key == kKeyInterrupt) return Command{CommandKind::Quit, {}, 0, {}};
      if (in.key == kKeyEscape || in.key == 'n' || in.key == 'q') {
        view.mode = Mode::Main;
        view.target.reset();
        view.message = "nothing sent";
      } else if (in.key == kKeyTab || in.key == kKeyRight || in.key == kKeyDown) {
        view.signal_choice = (view.signal_choice + 1) % n;
      } else if (in.key == kKeyLeft || in.key == kKeyUp) {
        view.signal_choice = (view.signal_choice + n - 1) % n;
      } else if (in.key >= '1' && in.key < '1' + static_cast<int>(n)) {
        view.signal_choice = static_cast<std::size_t>(in.key - '1');
      } else if ((in.key == kKeyEnter || in.key == 'y') && view.target) {
        Command c{CommandKind::SendSignal, *view.target, kDialogSignals[view.signal_choice], {}};
        view.mode = Mode::Main;
        view.target.reset();
        return c;
      }
      return {};
    }
    case Mode::Confirm:
      if (in.key == kKeyInterrupt) return Command{CommandKind::Quit, {}, 0, {}};
      view.mode = Mode::Main;
      if (in.key == kKeyEnter || in.key == 'y') return Command{CommandKind::CancelConfirmed, {}, 0, view.confirm_job};
      view.message = "nothing cancelled";
      return {};
    case Mode::Prompt:
      if (in.key == kKeyInterrupt) return Command{CommandKind::Quit, {}, 0, {}};
      if (in.key == kKeyEnter) {
        view.table.text = view.prompt;
        view.mode = Mode::Main;
        view.selected = 0;
        return {};
      } else if (in.key == kKeyEscape) {
        view.mode = Mode::Main;
        view.table.text = view.prompt_before;  // what was typed is dropped
        return {};
      } else if (in.key == kKeyBackspace) {
        if (!view.prompt.empty()) {
          // Back one character, not one byte.
          std::size_t cut = view.prompt.size() - 1;
          while (cut > 0 && (static_cast<unsigned char>(view.prompt[cut]) & 0xC0) == 0x80) --cut;
          view.prompt.resize(cut);
        }
      } else if (in.key >= 0x20 && in.key < 0x7F && view.prompt.size() < 200) {
        view.prompt += static_cast<char>(in.key);
      }
      // The table follows what is typed.
      view.table.text = view.prompt;
      return {};
    case Mode::Main: return main_input(in, view, rows, gpu_choices);
  }
  return {};
}

RowKey key_of(const Row& row) { return RowKey{row.host, row.pid, row.gpu, row.depth}; }

void follow_selection(ViewState& view, const std::vector<Row>& rows, const std::optional<RowKey>& before) {
  if (before) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (key_of(rows[i]) == *before) {
        view.selected = i;
        return;
      }
    }
  }
  clamp_selection(view, rows);
}

}  // namespace tarmac::tui
