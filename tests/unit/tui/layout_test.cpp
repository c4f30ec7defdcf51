#include "tarmac/tui/layout.hpp"

#include <gtest/gtest.h>

#include "fixtures.hpp"

namespace tarmac::tui {
namespace {

struct Screen {
  Model model;
  ViewState view;
  FrameContext ctx;
  std::vector<Row> rows;

  explicit Screen(HostData data, int width = 120, int height = 40) {
    model.update(model.add_host("", false), std::move(data), 1);
    ctx.width = width;
    ctx.height = height;
    ctx.now_ms = 1;
    ctx.now_unix_s = 2000;
    ctx.title_host = "gpu-box";
  }
  std::vector<std::string> lines() {
    rows = model.rows(view.table, ctx.now_unix_s, ctx.now_ms);
    const Frame f = render(model, rows, view, ctx);
    std::vector<std::string> out;
    for (const auto& l : f.lines) out.push_back(l.text());
    return out;
  }
  std::string text() {
    std::string out;
    for (const auto& l : lines()) out += l + "\n";
    return out;
  }
};

int line_of(const std::vector<std::string>& lines, const std::string& needle) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find(needle) != std::string::npos) return static_cast<int>(i);
  }
  return -1;
}

TEST(TuiLayout, EveryLineFitsTheTerminalAtEverySize) {
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{80, 24}, {120, 40}, {300, 80}, {40, 10}, {200, 50}}) {
    Screen s(test::torchrun_job(), w, h);
    for (const bool ascii : {false, true}) {
      s.view.ascii = ascii;
      const auto lines = s.lines();
      EXPECT_EQ(static_cast<int>(lines.size()), h) << w << "x" << h;
      for (const auto& l : lines) EXPECT_LE(text_width(l), w) << w << "x" << h << ": " << l;
    }
  }
}

TEST(TuiLayout, FullLayoutShowsEveryValueOfAGpuAndItsGraphs) {
  Screen s(test::gpu0_only(), 140, 40);
  const auto lines = s.lines();
  const int gpu0 = line_of(lines, "GPU 0 NVIDIA A100-SXM4-40GB");
  ASSERT_GE(gpu0, 0) << s.text();
  EXPECT_NE(lines[gpu0].find("busy"), std::string::npos);
  EXPECT_NE(lines[gpu0].find("38.0/40.0G"), std::string::npos);
  EXPECT_NE(lines[gpu0].find("UTIL  98%"), std::string::npos);
  EXPECT_NE(lines[gpu0].find("MBW  49%"), std::string::npos);
  EXPECT_NE(lines[gpu0].find("alice"), std::string::npos);
  EXPECT_NE(lines[gpu0 + 1].find("256/400 W"), std::string::npos);
  EXPECT_NE(lines[gpu0 + 1].find("SM 1410 MHz"), std::string::npos);
  EXPECT_NE(lines[gpu0 + 1].find("P0"), std::string::npos);
  EXPECT_NE(lines[gpu0 + 2].find("util"), std::string::npos);
  EXPECT_NE(lines[gpu0 + 2].find("\u2588"), std::string::npos);  // 98 % is a full block
  EXPECT_GE(line_of(lines, "GPUs 1-3 idle while GPU 0 works"), 0) << s.text();
}

TEST(TuiLayout, CompactLayoutIsOneLinePerGpuIn80x24) {
  Screen s(test::gpu0_only(), 80, 24);
  const auto lines = s.lines();
  const int gpu0 = line_of(lines, " 0 A100-SXM4-40GB");
  ASSERT_GE(gpu0, 0) << s.text();
  EXPECT_NE(lines[gpu0 + 1].find(" 1 A100-SXM4-40GB"), std::string::npos) << s.text();
  EXPECT_GE(line_of(lines, "python train.py"), 0) << s.text();
  EXPECT_GE(line_of(lines, "k signal"), 0) << s.text();
}

TEST(TuiLayout, TheTableDropsColumnsBeforeTheCommandLine) {
  Screen wide(test::gpu0_only(), 200, 40);
  const auto header = wide.lines()[static_cast<std::size_t>(wide.view.hits.header_line)];
  for (const char* t : {"GPU", "PID", "USER", "WHERE", "GPU-MEM", "SM%", "CPU%", "RSS", "AGE", "STATE", "COMMAND"}) {
    EXPECT_NE(header.find(t), std::string::npos) << t;
  }
  Screen narrow(test::gpu0_only(), 80, 24);
  const auto small = narrow.lines()[static_cast<std::size_t>(narrow.view.hits.header_line)];
  EXPECT_EQ(small.find("WHERE"), std::string::npos);
  EXPECT_NE(small.find("COMMAND"), std::string::npos);
}

TEST(TuiLayout, TheSortedColumnIsMarked) {
  Screen s(test::gpu0_only());
  s.view.ascii = true;
  EXPECT_GE(line_of(s.lines(), "GPU-MEMv"), 0);
  s.view.table.descending = false;
  EXPECT_GE(line_of(s.lines(), "GPU-MEM^"), 0);
}

TEST(TuiLayout, AsciiFramesHaveNoBlockOrBoxCharacters) {
  Screen s(test::torchrun_job(), 140, 40);
  s.view.ascii = true;
  s.view.table.tree = true;
  s.view.mode = Mode::Dialog;
  s.view.target = s.model.rows(s.view.table, 2000, 1)[1];
  for (const auto& l : s.lines()) {
    for (unsigned char c : l) EXPECT_LT(c, 0x80) << l;
  }
}

TEST(TuiLayout, TreeRowsAreDrawnUnderTheirLauncher) {
  Screen s(test::torchrun_job(), 200, 40);
  s.view.table.tree = true;
  const auto lines = s.lines();
  const int launcher = line_of(lines, "torchrun --nproc-per-node 4");
  ASSERT_GE(launcher, 0) << s.text();
  EXPECT_NE(lines[launcher + 1].find("\u251c\u2500 python -u train.py --local-rank=3"), std::string::npos) << s.text();
  EXPECT_NE(lines[launcher + 4].find("\u2514\u2500 python -u train.py --local-rank=0"), std::string::npos) << s.text();
}

TEST(TuiLayout, EachMigDeviceHasALineUnderItsGpuAndItsProcessesSayWhichOne) {
  auto data = test::gpu0_only();
  gpu::Device& d = data.snapshot->devices[1];
  d.modes.mig_mode_current = true;
  d.sample.util_gpu_pct.reset();  // MIG mode: NVML gives none
  for (unsigned k = 0; k < 3; ++k) {
    gpu::MigDevice m;
    m.index = k;
    m.profile = k == 0 ? "3g.20gb" : "1g.5gb";
    m.mem_total_bytes = (k == 0 ? 20 : 5) * test::kGiB;
    m.mem_used_bytes = k == 2 ? 2 * test::kGiB : 0;
    if (k == 1) m.gpm_sm_active_pct = 42.4;
    d.mig.push_back(m);
  }
  auto p = test::process(777, "carol", 1002, "python serve.py", 2 * test::kGiB, std::nullopt);
  p.mig = 2U;
  d.processes.push_back(p);
  data.mig_classes = {{}, {{gpu::Activity::Idle, true}, {gpu::Activity::Idle, true}, {gpu::Activity::Busy, false}}, {}, {}};
  Screen s(data, 140, 40);
  const auto lines = s.lines();
  const int gpu = line_of(lines, "GPU 1 ");
  ASSERT_GE(gpu, 0) << s.text();
  const int first = line_of(lines, "MIG 0 3g.20gb");
  const int third = line_of(lines, "MIG 2 1g.5gb");
  ASSERT_GT(first, gpu) << s.text();
  ASSERT_GT(third, first) << s.text();
  EXPECT_GT(line_of(lines, "GPU 2 "), third) << "under GPU 1, before GPU 2: " << s.text();
  EXPECT_NE(lines[first].find("idle"), std::string::npos) << lines[first];
  EXPECT_NE(lines[first + 1].find("GPM  42%"), std::string::npos) << lines[first + 1];
  EXPECT_NE(lines[third].find("in use"), std::string::npos) << "no GPM: in use, not busy: " << lines[third];
  EXPECT_NE(lines[third].find("carol"), std::string::npos) << lines[third];
  EXPECT_NE(lines[0].find("3 MIG devices"), std::string::npos) << lines[0];
  const int row = line_of(lines, " 777 ");
  ASSERT_GE(row, 0) << s.text();
  EXPECT_NE(lines[row].find("1:2"), std::string::npos) << lines[row];
  EXPECT_NE(lines[row].find("in use"), std::string::npos) << lines[row];
}

TEST(TuiLayout, ALostGpuIsShownAsLost) {
  auto data = test::gpu0_only();
  data.snapshot->devices[2].lost = "GPU is lost";
  Screen s(data, 140, 40);
  const auto lines = s.lines();
  const int lost = line_of(lines, "GPU 2 ");
  ASSERT_GE(lost, 0);
  EXPECT_NE(lines[lost].find("lost: GPU is lost"), std::string::npos) << s.text();
}

TEST(TuiLayout, AHostThatStoppedAnsweringSaysSoWithTheAgeOfItsData) {
  Model m;
  const auto a = m.add_host("a:9478", true);
  const auto b = m.add_host("b:9478", true);
  m.update(a, test::gpu0_only(), 1'000);
  m.update(b, test::gpu0_only(), 1'000);
  HostData failed;
  failed.problem = "connection refused";
  m.update(b, failed, 5'000);
  ViewState v;
  FrameContext ctx;
  ctx.width = 160;
  ctx.height = 50;
  ctx.now_ms = 21'000;
  const auto rows = m.rows(v.table, 2000, ctx.now_ms);
  const Frame f = render(m, rows, v, ctx);
  std::string all;
  for (const auto& l : f.lines) all += l.text() + "\n";
  EXPECT_NE(all.find("b:9478: connection refused (for 16s; its data is 20s old)"), std::string::npos) << all;
  EXPECT_NE(all.find("a:9478 GPU 0"), std::string::npos) << all;
  EXPECT_NE(all.find("b:9478 GPU 0"), std::string::npos) << all;
  EXPECT_EQ(rows.size(), 2U);
}

TEST(TuiLayout, OthersTextCannotReachTheTerminal) {
  auto data = test::gpu0_only();
  data.snapshot->devices[0].processes[0].host.command_line = "python \x1b]0;owned\x07\x1b[2J x";
  Screen s(data);
  for (const auto& l : s.lines()) EXPECT_EQ(l.find('\x1b'), std::string::npos) << l;
}

TEST(TuiLayout, TheDialogNamesTheProcessAndTheSignal) {
  Screen s(test::gpu0_only());
  s.view.mode = Mode::Dialog;
  s.view.target = s.model.rows(s.view.table, 2000, 1)[0];
  const std::string text = s.text();
  EXPECT_NE(text.find("Send a signal to PID 4242 (python)"), std::string::npos) << text;
  EXPECT_NE(text.find("[TERM]"), std::string::npos) << text;
}

TEST(TuiLayout, OnceFramesAreAsTallAsTheyNeed) {
  Screen s(test::torchrun_job(), 120, 0);
  const auto lines = s.lines();
  EXPECT_LT(lines.size(), 30U);
  EXPECT_GE(line_of(lines, "notebook.py"), 0);
  EXPECT_EQ(line_of(lines, "k signal"), -1);
}

TEST(TuiLayout, FitCutsWithAMarkAndPads) {
  EXPECT_EQ(fit("abcdef", 4), "abc~");
  EXPECT_EQ(fit("ab", 4), "ab  ");
  EXPECT_EQ(fit("ab", 4, false), "ab");
  EXPECT_EQ(fit("\u2588\u2588\u2588", 2), "\u2588~");
  EXPECT_EQ(text_width("\u2588x"), 2);
}

TEST(TuiLayout, SparklinesScaleToTheirTop) {
  const std::deque<double> points = {0, 50, 100};
  EXPECT_EQ(sparkline(points, 4, 100, true), "  :#");
  EXPECT_EQ(sparkline(points, 2, 100, true), ":#");
  EXPECT_EQ(sparkline(points, 3, 100, false), " \u2584\u2588");
  EXPECT_EQ(bar(0.5, 6, true), "[##--]");
}

TEST(TuiLayout, FrameTextColoursOnlyWhenAsked) {
  Frame f;
  f.lines.push_back(Line{{{"ok", Style::Good}, {"  ", Style::Plain}}});
  EXPECT_EQ(frame_text(f, false), "ok\n");
  EXPECT_EQ(frame_text(f, true), "\033[32mok\033[0m  \n");
}

}  // namespace
}  // namespace tarmac::tui
