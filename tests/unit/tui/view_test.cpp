#include "tarmac/tui/view.hpp"

#include <gtest/gtest.h>

#include <csignal>

#include "fixtures.hpp"

namespace tarmac::tui {
namespace {

std::vector<Row> rows_of(const Model& m, const ViewState& v) { return m.rows(v.table, 2000, 1); }

Command press(ViewState& v, const std::vector<Row>& rows, int key) { return handle_input(Input{key}, v, rows, {}); }

TEST(TuiView, ArrowsAndPagesMoveTheSelectionWithinTheRows) {
  Model m;
  m.update(m.add_host("", false), test::torchrun_job(), 1);
  ViewState v;
  const auto rows = rows_of(m, v);
  (void)press(v, rows, kKeyDown);
  (void)press(v, rows, kKeyDown);
  EXPECT_EQ(v.selected, 2U);
  (void)press(v, rows, kKeyUp);
  EXPECT_EQ(v.selected, 1U);
  v.hits.page = 10;
  (void)press(v, rows, kKeyPageDown);
  EXPECT_EQ(v.selected, rows.size() - 1);
  (void)press(v, rows, kKeyHome);
  EXPECT_EQ(v.selected, 0U);
  (void)press(v, rows, kKeyUp);
  EXPECT_EQ(v.selected, 0U);
  (void)press(v, rows, kKeyEnd);
  EXPECT_EQ(v.selected, rows.size() - 1);
}

TEST(TuiView, SortKeysAndAClickOnATitle) {
  ViewState v;
  const std::vector<Row> rows;
  EXPECT_EQ(v.table.sort, Column::Mem);
  (void)press(v, rows, 'M');  // the same column again: reversed
  EXPECT_FALSE(v.table.descending);
  (void)press(v, rows, 'P');
  EXPECT_EQ(v.table.sort, Column::Cpu);
  EXPECT_TRUE(v.table.descending);
  (void)press(v, rows, 'N');
  EXPECT_EQ(v.table.sort, Column::Pid);
  EXPECT_FALSE(v.table.descending);
  (void)press(v, rows, 's');
  EXPECT_EQ(v.table.sort, Column::User);
  (void)press(v, rows, 'S');
  EXPECT_EQ(v.table.sort, Column::Pid);
  (void)press(v, rows, 'r');
  EXPECT_TRUE(v.table.descending);
  v.hits.header_line = 7;
  v.hits.header_columns = {{0, Column::Gpu}, {4, Column::Pid}, {12, Column::User}, {22, Column::Mem}};
  (void)handle_input(Input{kKeyClick, 14, 7}, v, rows, {});
  EXPECT_EQ(v.table.sort, Column::User);
}

TEST(TuiView, TheFilterPromptFiltersAsYouTypeAndEscapeClearsEverything) {
  ViewState v;
  const std::vector<Row> rows;
  (void)press(v, rows, '/');
  EXPECT_EQ(v.mode, Mode::Prompt);
  for (char c : std::string("bobx")) (void)press(v, rows, c);
  (void)press(v, rows, kKeyBackspace);
  EXPECT_EQ(v.table.text, "bob");
  (void)press(v, rows, 'q');  // typed, not quit
  (void)press(v, rows, kKeyBackspace);
  (void)press(v, rows, kKeyEnter);
  EXPECT_EQ(v.mode, Mode::Main);
  EXPECT_EQ(v.table.text, "bob");
  // Esc in the prompt drops what was typed and keeps the filter there was.
  (void)press(v, rows, '/');
  (void)press(v, rows, 'x');
  EXPECT_EQ(v.table.text, "bobx");
  (void)press(v, rows, kKeyEscape);
  EXPECT_EQ(v.mode, Mode::Main);
  EXPECT_EQ(v.table.text, "bob");
  (void)press(v, rows, 'u');
  EXPECT_TRUE(v.table.only_mine);
  (void)press(v, rows, kKeyEscape);
  EXPECT_TRUE(v.table.text.empty());
  EXPECT_FALSE(v.table.only_mine);
}

TEST(TuiView, GpuFilterCyclesThroughEveryGpuThenAll) {
  ViewState v;
  const std::vector<Row> rows;
  const std::vector<std::pair<std::size_t, unsigned>> gpus = {{0, 0}, {0, 1}};
  (void)handle_input(Input{'g'}, v, rows, gpus);
  EXPECT_EQ(v.table.gpu, gpus[0]);
  (void)handle_input(Input{'g'}, v, rows, gpus);
  EXPECT_EQ(v.table.gpu, gpus[1]);
  (void)handle_input(Input{'g'}, v, rows, gpus);
  EXPECT_FALSE(v.table.gpu);
}

TEST(TuiView, TheDialogSendsTheChosenSignalToTheSelectedProcess) {
  Model m;
  m.update(m.add_host("", false), test::gpu0_only(), 1);
  ViewState v;
  const auto rows = rows_of(m, v);
  (void)press(v, rows, 'k');
  ASSERT_EQ(v.mode, Mode::Dialog);
  ASSERT_TRUE(v.target);
  EXPECT_EQ(v.target->pid, 4242U);
  (void)press(v, rows, kKeyTab);
  EXPECT_EQ(kDialogSignals[v.signal_choice], SIGKILL);
  const auto c = press(v, rows, kKeyEnter);
  EXPECT_EQ(c.kind, CommandKind::SendSignal);
  EXPECT_EQ(c.signal, SIGKILL);
  EXPECT_EQ(c.row.pid, 4242U);
  EXPECT_EQ(v.mode, Mode::Main);
}

TEST(TuiView, EscapeCancelsTheDialogAndReadOnlyNeverOpensIt) {
  Model m;
  m.update(m.add_host("", false), test::gpu0_only(), 1);
  ViewState v;
  const auto rows = rows_of(m, v);
  (void)press(v, rows, kKeyF9);
  ASSERT_EQ(v.mode, Mode::Dialog);
  EXPECT_EQ(press(v, rows, kKeyEscape).kind, CommandKind::None);
  EXPECT_EQ(v.mode, Mode::Main);
  EXPECT_EQ(v.message, "nothing sent");
  v.readonly = true;
  EXPECT_EQ(press(v, rows, 'k').kind, CommandKind::None);
  EXPECT_EQ(v.mode, Mode::Main);
  EXPECT_NE(v.message.find("read-only"), std::string::npos);
}

TEST(TuiView, AnotherHostsProcessCannotBeSignalled) {
  Model m;
  m.update(m.add_host("b:9478", true), test::gpu0_only(), 1);
  ViewState v;
  const auto rows = rows_of(m, v);
  (void)press(v, rows, 'k');
  EXPECT_EQ(v.mode, Mode::Main);
  EXPECT_NE(v.message.find("another host"), std::string::npos);
}

TEST(TuiView, EnterOpensTheDetailOfTheSelectedProcessAndQuitQuits) {
  Model m;
  m.update(m.add_host("", false), test::gpu0_only(), 1);
  ViewState v;
  const auto rows = rows_of(m, v);
  const auto c = press(v, rows, kKeyEnter);
  EXPECT_EQ(c.kind, CommandKind::OpenDetail);
  EXPECT_EQ(c.row.pid, 4242U);
  EXPECT_EQ(press(v, rows, 'q').kind, CommandKind::Quit);
  EXPECT_EQ(press(v, rows, kKeyInterrupt).kind, CommandKind::Quit);
}

TEST(TuiView, DoctorAndCancelAskForTheSelectedProcessButNotOnAnotherHostOrReadOnly) {
  Model m;
  m.update(m.add_host("", false), test::gpu0_only(), 1);
  ViewState v;
  const auto rows = rows_of(m, v);
  auto c = press(v, rows, 'd');
  EXPECT_EQ(c.kind, CommandKind::RunDoctor);
  EXPECT_EQ(c.row.pid, 4242U);
  c = press(v, rows, 'c');
  EXPECT_EQ(c.kind, CommandKind::CancelJob);
  v.readonly = true;
  EXPECT_EQ(press(v, rows, 'c').kind, CommandKind::None);
  EXPECT_NE(v.message.find("read-only"), std::string::npos);
  EXPECT_EQ(press(v, rows, 'd').kind, CommandKind::RunDoctor);  // looking is not acting
  Model remote;
  remote.update(remote.add_host("b:9478", true), test::gpu0_only(), 1);
  ViewState r;
  const auto remote_rows = rows_of(remote, r);
  EXPECT_EQ(press(r, remote_rows, 'd').kind, CommandKind::None);
  EXPECT_EQ(press(r, remote_rows, 'c').kind, CommandKind::None);
  // What doctor said closes with any key.
  r.mode = Mode::Report;
  (void)press(r, remote_rows, 'x');
  EXPECT_EQ(r.mode, Mode::Main);
}

TEST(TuiView, DownMovesPastAProcessOnTwoGpus) {
  Model m;
  auto data = test::gpu0_only();
  auto twice = data.snapshot->devices[0].processes[0];
  data.snapshot->devices[1].processes.push_back(twice);
  m.update(m.add_host("", false), data, 1);
  ViewState v;
  v.table.sort = Column::Pid;
  auto rows = rows_of(m, v);
  ASSERT_EQ(rows.size(), 2U);
  (void)press(v, rows, kKeyDown);
  const auto before = key_of(rows[v.selected]);
  rows = rows_of(m, v);
  follow_selection(v, rows, before);
  EXPECT_EQ(v.selected, 1U);
}

TEST(TuiView, TheSelectionFollowsItsProcessWhenRowsMove) {
  Model m;
  m.update(m.add_host("", false), test::torchrun_job(), 1);
  ViewState v;
  auto rows = rows_of(m, v);
  v.selected = 0;  // 104, the most memory
  const auto before = key_of(rows[0]);
  v.table.descending = false;
  rows = rows_of(m, v);
  follow_selection(v, rows, before);
  EXPECT_EQ(rows[v.selected].pid, 104U);
}

}  // namespace
}  // namespace tarmac::tui
