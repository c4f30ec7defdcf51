// What the person at `tarmac top` chose (sort, filter, tree, selection, the screen open) and how
// each key and click changes it. Pure: the actions a key asks for (a signal, reading a process's
// environment) come back as a Command for the caller to carry out.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tarmac/tui/model.hpp"

namespace tarmac::tui {

// Keys beyond the printable ones (which are their own code).
enum Key : int {
  kKeyUp = 0x110000,
  kKeyDown,
  kKeyLeft,
  kKeyRight,
  kKeyPageUp,
  kKeyPageDown,
  kKeyHome,
  kKeyEnd,
  kKeyEnter,
  kKeyEscape,
  kKeyBackspace,
  kKeyTab,
  kKeyResize,
  kKeyClick,      // a left click at (x, y)
  kKeyWheelUp,
  kKeyWheelDown,
  kKeyInterrupt,  // Ctrl-C
  kKeyF9,         // htop's kill key
};

struct Input {
  int key = 0;
  int x = -1;  // column and line of a click
  int y = -1;
};

enum class Mode { Main, Help, Detail, Dialog, Prompt, Report, Confirm };
enum class LayoutChoice { Auto, Compact, Full };

// The signals the dialog offers, in its order.
inline constexpr int kDialogSignals[] = {15, 9, 2};  // TERM, KILL, INT

// The detail screen's facts that the model does not keep (read when it opens).
struct Detail {
  Row row;
  std::vector<std::pair<std::string, std::string>> environment;  // the variables that matter
  std::optional<std::string> environment_problem;                 // why they could not be read
  std::vector<std::string> parents;                               // "4200 torchrun", nearest first
};

// Where the table and its header landed on the last frame, for clicks.
struct HitMap {
  int header_line = -1;
  std::vector<std::pair<int, Column>> header_columns;  // start column of each title
  int first_row_line = -1;
  std::size_t first_row_index = 0;
  int rows_shown = 0;
  int page = 10;
};

struct ViewState {
  TableOptions table;
  std::size_t selected = 0;  // index into the rows
  std::size_t scroll = 0;    // the first row shown
  Mode mode = Mode::Main;
  LayoutChoice layout = LayoutChoice::Auto;
  bool readonly = false;
  bool ascii = false;
  bool color = true;
  double interval_s = 1.0;
  std::optional<Row> target;  // the dialog's process
  std::size_t signal_choice = 0;
  std::string prompt;  // the filter being typed
  std::string prompt_before;  // the filter when `/` was pressed: Esc puts it back
  std::string message;  // one line of news (what a signal did), until the next key
  std::optional<Detail> detail;
  // The Confirm line: a cancel asked for, and the job it would end.
  std::string confirm_text;
  std::string confirm_job;
  // The Report screen: what a background command (doctor) said.
  std::string report_title;
  std::vector<std::string> report_lines;
  HitMap hits;
};

enum class CommandKind { None, Quit, SendSignal, OpenDetail, RunDoctor, CancelJob, CancelConfirmed };

struct Command {
  CommandKind kind = CommandKind::None;
  Row row;         // the process a signal, the detail screen, doctor or the cancel is for
  int signal = 0;  // SendSignal
  std::string job;  // CancelConfirmed: the job's id
};

// Applies one input to `view` given the rows now shown (after the filters); the Command says what
// the caller must do. `gpu_choices` are the (host, GPU) pairs the GPU filter cycles through.
[[nodiscard]] Command handle_input(const Input& input, ViewState& view, const std::vector<Row>& rows,
                                   const std::vector<std::pair<std::size_t, unsigned>>& gpu_choices);

// Which row is which across refreshes: host, pid, GPU (a process on two GPUs has two rows) and
// whether it is a launcher's or a hidden holder's row.
struct RowKey {
  std::size_t host = 0;
  unsigned pid = 0;
  std::optional<unsigned> gpu;
  unsigned depth = 0;
  friend bool operator==(const RowKey&, const RowKey&) = default;
};
[[nodiscard]] RowKey key_of(const Row& row);

// Keeps the selection on the same row across refreshes (rows move when they are sorted): `before`
// names the selected row before the new rows were built.
void follow_selection(ViewState& view, const std::vector<Row>& rows, const std::optional<RowKey>& before);

[[nodiscard]] const char* signal_name(int signal);

}  // namespace tarmac::tui
