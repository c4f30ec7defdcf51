#include "tarmac/tui/model.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.hpp"

namespace tarmac::tui {
namespace {

using test::kGiB;

std::vector<unsigned> pids(const std::vector<Row>& rows) {
  std::vector<unsigned> out;
  for (const auto& r : rows) out.push_back(r.pid);
  return out;
}

TEST(TuiModel, RowsCarryTheProcessFacts) {
  Model m;
  const auto h = m.add_host("", false);
  auto data = test::gpu0_only();
  data.usage[4242] = ProcUsage{95.5, 2 * kGiB};
  m.update(h, data, 10);
  const auto rows = m.rows(TableOptions{}, 1600, 10);
  ASSERT_EQ(rows.size(), 1U);
  EXPECT_EQ(rows[0].pid, 4242U);
  EXPECT_EQ(rows[0].gpu, 0U);
  EXPECT_EQ(rows[0].user, "alice");
  EXPECT_EQ(rows[0].command, "python train.py --epochs 90");
  EXPECT_EQ(rows[0].state, "busy");
  EXPECT_EQ(rows[0].age_s, 600);
  EXPECT_DOUBLE_EQ(*rows[0].cpu_pct, 95.5);
  EXPECT_EQ(*rows[0].rss_bytes, 2 * kGiB);
}

TEST(TuiModel, UnknownUtilizationIsNeverIdle) {
  Model m;
  const auto h = m.add_host("", false);
  auto data = test::gpu0_only();
  data.snapshot->devices[0].processes[0].sm_util_pct.reset();
  m.update(h, data, 10);
  const auto rows = m.rows(TableOptions{}, 1600, 10);
  ASSERT_EQ(rows.size(), 1U);
  EXPECT_FALSE(rows[0].sm_pct);
  EXPECT_EQ(rows[0].state, "unknown");
}

TEST(TuiModel, HoldingCountsFromWhenTheViewFirstSawZero) {
  Model m;
  const auto h = m.add_host("", false);
  auto data = test::gpu0_only();
  data.snapshot->devices[0].processes[0].sm_util_pct = 0;
  m.update(h, data, 1'000);
  data.received_ms = 2;
  m.update(h, data, 181'000);
  EXPECT_EQ(m.rows(TableOptions{}, 1600, 181'000)[0].state, "holding 3m");
  // Work resets the clock.
  data.snapshot->devices[0].processes[0].sm_util_pct = 50;
  data.received_ms = 3;
  m.update(h, data, 182'000);
  data.snapshot->devices[0].processes[0].sm_util_pct = 0;
  data.received_ms = 4;
  m.update(h, data, 183'000);
  EXPECT_EQ(m.rows(TableOptions{}, 1600, 190'000)[0].state, "holding 7s");
}

TEST(TuiModel, AFailedReadKeepsTheLastDataAndSaysSinceWhen) {
  Model m;
  const auto h = m.add_host("b:9478", true);
  m.update(h, test::gpu0_only(), 1'000);
  HostData failed;
  failed.problem = "connection refused";
  m.update(h, failed, 5'000);
  m.update(h, failed, 9'000);
  ASSERT_TRUE(m.hosts()[h].snapshot);
  EXPECT_EQ(m.hosts()[h].problem, "connection refused");
  EXPECT_EQ(m.hosts()[h].problem_since_ms, 5'000);
  // An answer clears the problem.
  auto back = test::gpu0_only();
  back.received_ms = 2;
  m.update(h, back, 10'000);
  EXPECT_FALSE(m.hosts()[h].problem);
}

TEST(TuiModel, GraphsAdvanceOnePointPerReadingAndTakeAnAgentsHistoryFirst) {
  Model m;
  const auto h = m.add_host("", false);
  auto data = test::gpu0_only();
  GpuHistory older;
  older.util_pct.add(10);
  older.util_pct.add(20);
  data.history_prefill[0] = older;
  m.update(h, data, 1);
  data.received_ms = 2;
  data.history_prefill.clear();
  m.update(h, data, 2);
  const GpuHistory* g = m.history(h, 0);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(std::vector<double>(g->util_pct.points().begin(), g->util_pct.points().end()),
            (std::vector<double>{10, 20, 98, 98}));
  EXPECT_NEAR(g->mem_pct.points().back(), 95.0, 0.01);
  // Through the agent, a reading of the sample already shown adds no point; a new sample does.
  data.via_agent = true;
  m.update(h, data, 3);
  EXPECT_EQ(m.history(h, 0)->util_pct.points().size(), 4U);
  data.snapshot->timestamp_unix_ms += 1000;
  m.update(h, data, 4);
  EXPECT_EQ(m.history(h, 0)->util_pct.points().size(), 5U);
  // A failed read keeps the data, and says where the data comes from and why not the agent.
  HostData failed;
  failed.problem = "NVML: no driver";
  failed.agent_problem = "the agent's answer is not JSON";
  m.update(h, failed, 5);
  EXPECT_FALSE(m.hosts()[h].via_agent);
  EXPECT_EQ(m.hosts()[h].agent_problem, "the agent's answer is not JSON");
  EXPECT_TRUE(m.hosts()[h].snapshot.has_value());
}

TEST(TuiModel, SeriesKeepsItsNewestPoints) {
  Series s(3);
  for (int i = 0; i < 5; ++i) s.add(i);
  EXPECT_EQ(std::vector<double>(s.points().begin(), s.points().end()), (std::vector<double>{2, 3, 4}));
  Series full(3);
  full.add(9);
  full.prepend(s);
  EXPECT_EQ(std::vector<double>(full.points().begin(), full.points().end()), (std::vector<double>{3, 4, 9}));
}

TEST(TuiModel, SortsByEachColumnWithUnknownsLast) {
  Model m;
  const auto h = m.add_host("", false);
  auto data = test::torchrun_job();
  data.snapshot->devices[1].processes[0].sm_util_pct.reset();  // rank 1 unknown
  data.snapshot->devices[2].processes[0].sm_util_pct = 40;
  m.update(h, data, 1);
  TableOptions o;
  o.sort = Column::Mem;
  EXPECT_EQ(pids(m.rows(o, 2000, 1)), (std::vector<unsigned>{104, 103, 102, 101, 200}));
  o.descending = false;
  EXPECT_EQ(pids(m.rows(o, 2000, 1)), (std::vector<unsigned>{200, 101, 102, 103, 104}));
  o.sort = Column::Sm;
  o.descending = true;
  EXPECT_EQ(pids(m.rows(o, 2000, 1)), (std::vector<unsigned>{101, 104, 103, 200, 102}));
  o.descending = false;
  EXPECT_EQ(pids(m.rows(o, 2000, 1)), (std::vector<unsigned>{200, 103, 101, 104, 102}));
  o.sort = Column::User;
  EXPECT_EQ(m.rows(o, 2000, 1).back().user, "bob");
}

TEST(TuiModel, FiltersByTextUserAndGpu) {
  Model m;
  const auto h = m.add_host("", false);
  m.update(h, test::torchrun_job(), 1);
  TableOptions o;
  o.text = "NOTEBOOK";
  EXPECT_EQ(pids(m.rows(o, 2000, 1)), (std::vector<unsigned>{200}));
  o.text = "10";  // a pid
  EXPECT_EQ(pids(m.rows(o, 2000, 1)), (std::vector<unsigned>{104, 103, 102, 101}));
  o.text.clear();
  o.only_mine = true;
  o.viewer_uid = 1001;
  EXPECT_EQ(pids(m.rows(o, 2000, 1)), (std::vector<unsigned>{200}));
  o.only_mine = false;
  o.gpu = std::make_pair(std::size_t{0}, 3U);
  EXPECT_EQ(pids(m.rows(o, 2000, 1)), (std::vector<unsigned>{104, 200}));
  // Others' rows are marked for dimming.
  o.gpu.reset();
  for (const auto& r : m.rows(o, 2000, 1)) EXPECT_EQ(r.others, r.user != "bob") << r.pid;
}

TEST(TuiModel, TreeGroupsRanksUnderTheirLauncher) {
  Model m;
  const auto h = m.add_host("", false);
  m.update(h, test::torchrun_job(), 1);
  TableOptions o;
  o.tree = true;
  const auto rows = m.rows(o, 2000, 1);
  ASSERT_EQ(pids(rows), (std::vector<unsigned>{100, 104, 103, 102, 101, 200}));
  EXPECT_TRUE(rows[0].launcher);
  EXPECT_EQ(rows[0].name, "torchrun");
  EXPECT_EQ(rows[0].depth, 0U);
  EXPECT_FALSE(rows[0].gpu);
  EXPECT_EQ(*rows[0].mem_bytes, (10 + 11 + 12 + 13) * kGiB);  // its ranks' memory
  for (int i = 1; i <= 4; ++i) EXPECT_EQ(rows[i].depth, 1U);
  EXPECT_EQ(rows[5].depth, 0U);  // the notebook's shell has one GPU child: no group
}

TEST(TuiModel, HiddenHoldersAreDrawnUnderTheirParentInTheTree) {
  Model m;
  const auto h = m.add_host("", false);
  auto data = test::torchrun_job();
  data.hidden[300] = Ancestor{101, "pt_data_worker", "python -u train.py --local-rank=0", std::string("alice"), 1001};
  m.update(h, data, 1);
  TableOptions o;
  o.tree = true;
  const auto rows = m.rows(o, 2000, 1);
  ASSERT_EQ(pids(rows), (std::vector<unsigned>{100, 104, 103, 102, 101, 300, 200}));
  EXPECT_EQ(rows[5].state, "hidden holder");
  EXPECT_EQ(rows[5].depth, 2U);
  EXPECT_FALSE(rows[5].gpu);
  EXPECT_FALSE(rows[5].mem_bytes);
  // The flat table lists what the driver lists.
  o.tree = false;
  EXPECT_EQ(m.rows(o, 2000, 1).size(), 5U);
}

TEST(TuiModel, SiblingsWithoutALauncherGroupUnderTheirParent) {
  Model m;
  const auto h = m.add_host("", false);
  auto data = test::torchrun_job();
  data.ancestors[100].name = "python";
  data.ancestors[100].command = "python spawn_workers.py";
  m.update(h, data, 1);
  TableOptions o;
  o.tree = true;
  const auto rows = m.rows(o, 2000, 1);
  ASSERT_EQ(rows.size(), 6U);
  EXPECT_EQ(rows[0].pid, 100U);
  EXPECT_TRUE(rows[0].launcher);
}

TEST(TuiModel, ATreeWithoutTheParentsFactsStaysFlat) {
  // The parent ended, or /proc would not say: its ranks are listed on their own, nothing made up.
  Model m;
  const auto h = m.add_host("", false);
  auto data = test::torchrun_job();
  data.ancestors.erase(100);
  m.update(h, data, 1);
  TableOptions o;
  o.tree = true;
  const auto rows = m.rows(o, 2000, 1);
  ASSERT_EQ(rows.size(), 5U);
  for (const auto& r : rows) EXPECT_EQ(r.depth, 0U) << r.pid;
}

TEST(TuiModel, KnowsTheLaunchers) {
  EXPECT_TRUE(is_launcher("torchrun", ""));
  EXPECT_TRUE(is_launcher("python3", "python3 -m torch.distributed.run --nproc_per_node 8 x.py"));
  EXPECT_TRUE(is_launcher("python", "/usr/bin/python /opt/conda/bin/accelerate launch x.py"));
  EXPECT_TRUE(is_launcher("mpirun", "mpirun -np 4 x"));
  EXPECT_FALSE(is_launcher("python", "python train.py"));
  EXPECT_FALSE(is_launcher("bash", "bash -c torchrun"));
}

TEST(TuiModel, VerdictsNameTheirHostWhenThereAreSeveral) {
  Model one;
  one.update(one.add_host("", false), test::gpu0_only(), 1);
  ASSERT_FALSE(one.verdicts().empty());
  EXPECT_EQ(one.verdicts()[0].text.find("this host"), std::string::npos);
  Model two;
  two.update(two.add_host("a:9478", true), test::gpu0_only(), 1);
  two.add_host("b:9478", true);
  ASSERT_FALSE(two.verdicts().empty());
  EXPECT_EQ(two.verdicts()[0].text.rfind("a:9478: ", 0), 0U);
}

TEST(TuiModel, VerdictsNameLeasesAsStatusDoesAndEachBackfillBatch) {
  HostData h = test::gpu0_only();
  gpu::MigDevice m;
  m.index = 2;
  h.snapshot->devices[1].mig.push_back(m);
  h.mig_classes = {{}, {{gpu::Activity::ReservedIdle, true}}, {}, {}};
  h.mig_leases = {{}, {{"job 12 alice", ""}}, {}, {}};
  h.classes[3] = gpu::Activity::ReservedIdle;
  h.leases[3] = {"job 13 bob", "13"};  // the agent's job: `tarmac cancel` takes it
  h.backfill = {{}, {}, {{"qwen2.5-7b", "llama\x1b[2J", 120, 200}}, {}};
  Model model;
  model.update(model.add_host("", false), h, 1);
  std::vector<std::string> texts;
  for (const auto& v : model.verdicts()) texts.push_back(v.text);
  EXPECT_NE(std::find(texts.begin(), texts.end(),
                      "MIG 1:2 is reserved by job 12 alice and unused: `tarmac jobs` lists the leases"),
            texts.end());
  EXPECT_NE(std::find(texts.begin(), texts.end(),
                      "GPU 3 is reserved by job 13 bob and unused: `tarmac cancel 13` gives it back"),
            texts.end())
      << ::testing::PrintToString(texts);
  // The agent's words are made safe for the terminal.
  EXPECT_NE(std::find(texts.begin(), texts.end(),
                      "GPU 2 runs backfill: qwen2.5-7b on llama\\x1b[2J (120 of 200 requests answered); it yields to "
                      "any job"),
            texts.end())
      << ::testing::PrintToString(texts);
}

TEST(TuiModel, ShortAges) {
  EXPECT_EQ(short_age(-5), "0s");
  EXPECT_EQ(short_age(59), "59s");
  EXPECT_EQ(short_age(600), "10m");
  EXPECT_EQ(short_age(7200), "2h");
  EXPECT_EQ(short_age(3 * 86400), "3d");
}

}  // namespace
}  // namespace tarmac::tui
