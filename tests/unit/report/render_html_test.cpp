#include <gtest/gtest.h>

#include <algorithm>
#include <fmt/format.h>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/report/report.hpp"

namespace tarmac::report {
namespace {

constexpr long long kMonday = 1736121600000;  // 2025-01-06 00:00 UTC
constexpr long long kHourMs = 3600LL * 1000;
constexpr long long kDayMs = 24 * kHourMs;
constexpr const char* kEvilCommand = R"(python evil.py <script>alert(1)</script>&"x")";

std::size_t count(std::string_view text, std::string_view needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

void set(ClassHours& h, gpu::Activity a, double hours) {
  h.hours[static_cast<std::size_t>(std::find(gpu::kActivities.begin(), gpu::kActivities.end(), a) -
                                   gpu::kActivities.begin())] = hours;
}

// Three GPUs over two days (48 h each): GPU g busy 10·(g+1) h, holding 2 h on GPU 2, the rest
// idle, 6 h not recorded; the heat map misses the first three hours of each day.
Report sample(std::optional<double> price) {
  Report r;
  r.since_ms = kMonday;
  r.until_ms = kMonday + 2 * kDayMs;
  r.price_per_gpu_hour = price;
  for (unsigned i = 0; i < 3; ++i) {
    GpuReport g;
    g.gpu = i;
    g.name = i == 1 ? "GPU <b>&co</b>" : "NVIDIA H100 80GB HBM3";
    g.uuid = "GPU-0000000" + std::to_string(i);
    const double busy = 10.0 * (i + 1);
    const double holding = i == 2 ? 2 : 0;
    set(g.hours, gpu::Activity::Busy, busy);
    set(g.hours, gpu::Activity::Holding, holding);
    set(g.hours, gpu::Activity::Idle, 42 - busy - holding);
    g.hours.unrecorded = 6;
    g.util_avg_pct = 20.0 * (i + 1);
    if (price) {
      g.idle_cost = g.hours.idle() * *price;
      g.holding_cost = holding * *price;
    }
    for (std::size_t c = 0; c < g.hours.hours.size(); ++c) r.fleet.hours[c] += g.hours.hours[c];
    r.fleet.unrecorded += g.hours.unrecorded;
    r.gpus.push_back(g);
  }
  r.fleet_util_avg_pct = 40;
  if (price) {
    r.idle_cost = 1234.56;
    r.holding_cost = 2 * *price;
  }
  for (int d = 0; d < 2; ++d) {
    HeatDay day;
    day.day_start_ms = kMonday + d * kDayMs;
    for (std::size_t h = 3; h < 24; ++h) day.util_pct[h] = static_cast<double>(h) * 4;
    r.heat.push_back(day);
  }
  r.users = {{"alice", 40, 3}, {"<bob>", 20, 1}};
  r.commands = {{kEvilCommand, 30, 2}};
  r.idle_windows = {{0, kMonday + 3 * kHourMs, kMonday + 20 * kHourMs}};
  store::ProcessSpan p;
  p.gpu = 2;
  p.pid = 4242;
  p.user = "mallory";
  p.command = kEvilCommand;
  p.mem_used_mib_max = 20480;
  r.holding = {{2, kMonday + 30 * kHourMs, kMonday + 32 * kHourMs, {p}}};
  return r;
}

TEST(RenderHtml, EscapesTextFromTheData) {
  const std::string html = render_html(sample(std::nullopt));
  EXPECT_EQ(html.find("<script"), std::string::npos) << "the page has no script, and no data may inject one";
  EXPECT_EQ(html.find("<b>"), std::string::npos);
  EXPECT_EQ(html.find("<bob>"), std::string::npos);
  const std::string escaped = "python evil.py &lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;x&quot;";
  EXPECT_EQ(count(html, escaped), 2u) << "in the commands table and the holding incident";
  EXPECT_NE(html.find("GPU &lt;b&gt;&amp;co&lt;/b&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;bob&gt;"), std::string::npos);
}

TEST(RenderHtml, FetchesNothing) {
  for (const auto& r : {sample(2.5), Report{}}) {
    const std::string html = render_html(r);
    EXPECT_EQ(html.find("http://"), std::string::npos);
    EXPECT_EQ(html.find("https://"), std::string::npos);
    EXPECT_EQ(html.find("src="), std::string::npos);
    EXPECT_EQ(html.find("@import"), std::string::npos);
    EXPECT_EQ(html.find("<link"), std::string::npos);
    // url() only for the page's own SVG fragments (the hatch pattern, clip paths, gradient).
    EXPECT_EQ(count(html, "url("), count(html, "url(#"));
  }
}

TEST(RenderHtml, IsOnePageForPhones) {
  const std::string html = render_html(sample(2.5));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find(R"(<meta name="viewport" content="width=device-width, initial-scale=1">)"), std::string::npos);
  // Elements that are never self-closing (<rect/> and <line/> often are).
  for (std::string_view tag : {"html", "svg", "table", "section", "tr", "td", "g", "text", "title"}) {
    EXPECT_EQ(count(html, fmt::format("<{}>", tag)) + count(html, fmt::format("<{} ", tag)),
              count(html, fmt::format("</{}>", tag)))
        << tag << " is not closed";
  }
}

TEST(RenderReport, ZombiesInTextJsonAndHtmlWithTheirTextEscaped) {
  Report r = sample(std::nullopt);
  r.zombies.found = 3;
  r.zombies.actions = 2;
  r.zombies.reaped = 1;
  r.zombies.freed_bytes = 38ULL << 30;
  r.zombies.recent = {{3, kMonday + kHourMs, 4242, "alice", kEvilCommand, "ended", 38ULL << 30},
                      {1, kMonday, 7, "bob\x1b[2J", "x", "survived", std::nullopt}};
  const std::string html = render_html(r);
  EXPECT_NE(html.find("3 found), and those it ended: 1 reaped, 38.0 GiB freed"), std::string::npos);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  const std::string text = render_text(r, false);
  EXPECT_NE(text.find("Zombies (docs/reap.md): 3 found, 1 reaped, 38.0 GiB freed (1 actions did not free memory)"),
            std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  const std::string json = render_json(r);
  EXPECT_NE(json.find("\"reaped\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"freed_bytes\": 40802189312"), std::string::npos);
  EXPECT_NE(json.find("\"outcome\": \"survived\""), std::string::npos);
}

TEST(RenderHtml, SectionsComeInOrder) {
  const std::string html = render_html(sample(2.5));
  std::size_t last = 0;
  for (std::string_view mark :
       {"fleet idle", "GPU-hours recorded", "Idle cost", "<svg class=\"chart-classes\"", "<table class=\"gpus\"",
        "<svg class=\"chart-heatmap\"", "Who used the GPU-hours", "Longest idle windows", "Holding incidents",
        "Zombies found / reaped", "</main>"}) {
    const auto at = html.find(mark);
    ASSERT_NE(at, std::string::npos) << mark;
    EXPECT_GT(at, last) << mark << " is out of order";
    last = at;
  }
}

TEST(RenderHtml, DrawsOneStackedBarPerGpu) {
  const std::string html = render_html(sample(std::nullopt));
  EXPECT_EQ(count(html, "<svg class=\"chart-classes\""), 1u);
  EXPECT_EQ(count(html, "<g class=\"bar\""), 3u);
  for (unsigned i = 0; i < 3; ++i) EXPECT_NE(html.find(fmt::format("data-gpu=\"{}\"", i)), std::string::npos);
  EXPECT_EQ(count(html, "class=\"seg seg-busy\""), 3u);
  EXPECT_EQ(count(html, "class=\"seg seg-idle\""), 3u);
  EXPECT_EQ(count(html, "class=\"seg seg-holding\""), 1u) << "only GPU 2 held memory";
  EXPECT_EQ(count(html, "class=\"seg seg-unrecorded\""), 3u);
  EXPECT_EQ(count(html, "class=\"seg seg-fault\""), 0u) << "no zero-width segments";
}

TEST(RenderHtml, BarLengthsAreProportionalToHours) {
  const std::string html = render_html(sample(std::nullopt));
  const std::regex busy(R"re(class="seg seg-busy" x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)")re");
  std::vector<double> widths;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), busy); it != std::sregex_iterator(); ++it) {
    widths.push_back(std::stod((*it)[1]));
  }
  ASSERT_EQ(widths.size(), 3u);
  EXPECT_GT(widths[0], 0);
  EXPECT_NEAR(widths[1] / widths[0], 2.0, 0.01);  // 20 h against 10 h
  EXPECT_NEAR(widths[2] / widths[0], 3.0, 0.01);
}

TEST(RenderHtml, HeatMapHas24CellsPerDay) {
  const std::string html = render_html(sample(std::nullopt));
  EXPECT_EQ(count(html, "<svg class=\"chart-heatmap\""), 1u);
  EXPECT_EQ(count(html, "<rect class=\"cell"), 48u);
  EXPECT_EQ(count(html, "<rect class=\"cell empty\""), 6u) << "three hours without data each day";
  EXPECT_NE(html.find(">Mon 01-06<"), std::string::npos);
  EXPECT_NE(html.find(">Tue 01-07<"), std::string::npos);
  EXPECT_NE(html.find(">00<"), std::string::npos);
  EXPECT_NE(html.find(">23<"), std::string::npos);
  EXPECT_NE(html.find("heat-gradient"), std::string::npos) << "a colour scale legend";
  EXPECT_NE(html.find("Tue 01-07 23:00 UTC: 92.0 % utilization"), std::string::npos);
}

TEST(RenderHtml, HotterHoursAreDarker) {
  const std::string html = render_html(sample(std::nullopt));
  const std::regex cell(R"re(<rect class="cell" [^>]*fill="#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})")re");
  std::vector<int> brightness;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), cell); it != std::sregex_iterator(); ++it) {
    int sum = 0;
    for (int c = 1; c <= 3; ++c) sum += std::stoi((*it)[c], nullptr, 16);
    brightness.push_back(sum);
  }
  ASSERT_EQ(brightness.size(), 42u);
  for (std::size_t i = 1; i < 21; ++i) EXPECT_LT(brightness[i], brightness[i - 1]) << "hour " << i + 3;
}

TEST(RenderHtml, ShowsCostsOnlyWhenPriced) {
  const std::string priced = render_html(sample(2.5));
  EXPECT_NE(priced.find("$1,234.56"), std::string::npos);
  EXPECT_NE(priced.find("at $2.50 per GPU-hour"), std::string::npos);
  EXPECT_NE(priced.find("<th class=\"num\">Idle cost</th>"), std::string::npos);
  EXPECT_NE(priced.find("<th class=\"num\">Holding cost</th>"), std::string::npos);
  EXPECT_NE(priced.find("$5.00"), std::string::npos) << "GPU 2's holding cost";

  const std::string unpriced = render_html(sample(std::nullopt));
  EXPECT_EQ(unpriced.find('$'), std::string::npos);
  EXPECT_EQ(unpriced.find("Idle cost"), std::string::npos);
  EXPECT_EQ(unpriced.find("Holding cost"), std::string::npos);
}

TEST(RenderHtml, SkipsEmptyConsumerTables) {
  const std::string html = render_html(sample(std::nullopt));
  EXPECT_NE(html.find("<h3>Users</h3>"), std::string::npos);
  EXPECT_NE(html.find("<h3>Commands</h3>"), std::string::npos);
  EXPECT_EQ(html.find("<h3>Containers</h3>"), std::string::npos);
  EXPECT_EQ(html.find("<h3>Slurm jobs</h3>"), std::string::npos);
}

TEST(RenderHtml, ListsIdleWindowsAndHoldingProcesses) {
  const std::string html = render_html(sample(std::nullopt));
  EXPECT_NE(html.find("<td>2025-01-06 03:00</td><td>2025-01-06 20:00</td>"), std::string::npos);
  EXPECT_NE(html.find("17.0 h"), std::string::npos);
  EXPECT_NE(html.find("pid 4242"), std::string::npos);
  EXPECT_NE(html.find("mallory"), std::string::npos);
  EXPECT_NE(html.find("20.0 GiB"), std::string::npos);
  EXPECT_NE(html.find("2025-01-07 06:00"), std::string::npos);
}

TEST(RenderHtml, HeaderNamesRangeGpusAndIdleShare) {
  const std::string html = render_html(sample(std::nullopt));
  EXPECT_NE(html.find("2025-01-06 00:00 → 2025-01-08 00:00 UTC"), std::string::npos);
  EXPECT_NE(html.find("<div class=\"v\">3</div><div class=\"k\">GPUs</div>"), std::string::npos);
  // Idle: (32 + 22 + 10) of 126 recorded hours.
  EXPECT_NE(html.find("50.8 %</div><div class=\"k\">fleet idle"), std::string::npos);
}

TEST(RenderHtml, EmptyReportSaysThereIsNoData) {
  const std::string html = render_html(Report{});
  EXPECT_NE(html.find("No data"), std::string::npos);
  EXPECT_NE(html.find("No telemetry was recorded"), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);

  Report no_gpus = sample(2.5);
  no_gpus.gpus.clear();
  no_gpus.fleet = {};
  EXPECT_NE(render_html(no_gpus).find("No data"), std::string::npos);
}

}  // namespace
}  // namespace tarmac::report
