// The report as one self-contained HTML page: inline CSS and SVG, no script and nothing fetched,
// so it can be mailed, attached to a ticket or opened from an air-gapped node and look the same.
// Charts carry stable class names (chart-classes, chart-heatmap, seg-*, cell) that tests and
// user style sheets can rely on.
#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "tarmac/report/format.hpp"
#include "tarmac/report/report.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::report {

namespace {

constexpr double kChartWidth = 960;  // SVG user units; the page scales it to the column

template <typename... Args>
void put(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
}

std::string percent(double part, double whole) {
  return whole > 0 ? fmt::format("{:.1f} %", 100.0 * part / whole) : std::string("–");
}

double hours_between(long long start_ms, long long end_ms) {
  return static_cast<double>(end_ms - start_ms) / util::kMsPerHour;
}

std::string_view class_of(gpu::Activity a) { return gpu::to_string(a); }

// "Reserved idle" reads better than the wire name "reserved-idle" in headings.
std::string label_of(gpu::Activity a) {
  std::string s = gpu::to_string(a);
  std::replace(s.begin(), s.end(), '-', ' ');
  s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

// One colour per class, defined once as CSS variables so the bars, the legend, the cards and the
// table headers cannot disagree. The heat map's colours are computed (heat_colour) because a
// continuous scale does not fit in a handful of variables.
constexpr std::string_view kStyle = R"css(
:root{--bg:#f5f6f8;--fg:#1c2330;--muted:#687180;--card:#fff;--line:#e2e5ea;--accent:#2f6fde;
--busy:#2e9e5b;--starved:#e3a21a;--holding:#d6453d;--idle:#a4abb5;--reserved-idle:#7590ab;--fault:#8b5cc4;
--unrecorded:#d3d8df;color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#101318;--fg:#e5e8ec;--muted:#98a1ac;--card:#181d24;
--line:#29303a;--idle:#6d7581;--unrecorded:#3a424d}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);-webkit-text-size-adjust:100%;
font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1080px;margin:0 auto;padding:28px 16px 48px}
h1{font-size:26px;line-height:1.2;margin:0 0 6px;letter-spacing:-.01em}
h2{font-size:17px;margin:0 0 4px}
h3{font-size:13px;margin:0 0 6px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted)}
p.lead{margin:0 0 12px;color:var(--muted);font-size:14px}
.kicker{font-size:12px;font-weight:700;letter-spacing:.12em;text-transform:uppercase;color:var(--accent)}
.hero{display:flex;flex-wrap:wrap;align-items:flex-end;justify-content:space-between;gap:12px 32px;
padding-bottom:18px;border-bottom:1px solid var(--line)}
.range{color:var(--muted);font-variant-numeric:tabular-nums}
.stats{display:flex;gap:28px;flex-wrap:wrap}
.stat .v{font-size:40px;font-weight:750;line-height:1;font-variant-numeric:tabular-nums}
.stat .v.idle{color:var(--holding)}
.stat .k{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.06em}
.cards{display:grid;grid-template-columns:repeat(4,1fr);gap:12px;margin:20px 0}
@media (max-width:640px){.cards{grid-template-columns:repeat(2,1fr)}.stat .v{font-size:32px}}
.card{background:var(--card);border:1px solid var(--line);border-top:4px solid var(--c,var(--line));
border-radius:10px;padding:10px 14px}
.card .k{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.06em}
.card .v{font-size:24px;font-weight:700;font-variant-numeric:tabular-nums;white-space:nowrap}
.card .n{font-size:12px;color:var(--muted)}
.card.money{--c:var(--fg)}
section{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:16px 18px;margin:16px 0}
.c-busy{--c:var(--busy)}.c-starved{--c:var(--starved)}.c-holding{--c:var(--holding)}.c-idle{--c:var(--idle)}
.c-reserved-idle{--c:var(--reserved-idle)}.c-fault{--c:var(--fault)}.c-recorded{--c:var(--accent)}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:8px 0 10px;padding:0;list-style:none;font-size:13px}
.sw{display:inline-block;width:11px;height:11px;border-radius:3px;margin-right:6px;vertical-align:-1px;
background:var(--c)}
.sw.c-unrecorded{background:repeating-linear-gradient(45deg,var(--unrecorded) 0 2px,transparent 2px 5px);
box-shadow:inset 0 0 0 1px var(--unrecorded)}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
svg.chart-classes,svg.chart-heatmap{display:block;width:100%;height:auto;min-width:600px;
font:12px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
svg text{fill:var(--fg)}svg text.m{fill:var(--muted)}svg .grid{stroke:var(--line)}
.seg-busy{fill:var(--busy)}.seg-starved{fill:var(--starved)}.seg-holding{fill:var(--holding)}
.seg-idle{fill:var(--idle)}.seg-reserved-idle{fill:var(--reserved-idle)}.seg-fault{fill:var(--fault)}
.seg-unrecorded{fill:url(#hatch)}.hatch-bg{fill:var(--card)}.hatch-line{stroke:var(--unrecorded);stroke-width:3}
.seg:hover{opacity:.8}
.cell{stroke:var(--card);stroke-width:1}.cell:hover{stroke:var(--fg);stroke-width:1.5}
.cell.empty{fill:none;stroke:var(--line);stroke-dasharray:3 2}
table{border-collapse:collapse;width:100%;font-size:13.5px;font-variant-numeric:tabular-nums}
th,td{padding:7px 8px;text-align:left;border-bottom:1px solid var(--line);white-space:nowrap;vertical-align:top}
th{white-space:normal;vertical-align:bottom;font-size:11px;color:var(--muted);font-weight:650;
text-transform:uppercase;letter-spacing:.05em}
th.num,td.num{text-align:right}td.zero{color:var(--muted)}
tbody tr:hover{background:rgba(127,127,127,.07)}
tfoot td{font-weight:700;border-top:2px solid var(--line);border-bottom:0}
td.wrap{white-space:normal;min-width:220px}
code{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;overflow-wrap:anywhere}
.bar-cell{position:relative}
.minibar{position:absolute;right:8px;bottom:3px;height:3px;max-width:calc(100% - 16px);border-radius:2px;
background:var(--c,var(--accent));opacity:.6}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:16px 24px}
.proc{margin:0 0 4px}.proc .pid{color:var(--muted)}
.good{color:var(--busy);font-weight:600}
.empty-state{text-align:center;padding:40px 18px}.empty-state h2{font-size:22px}
footer{margin-top:24px;color:var(--muted);font-size:12px;text-align:center}
)css";

// ---- header and summary cards ----

void header(std::string& out, const Report& r) {
  const double recorded = r.fleet.recorded();
  put(out, "<header class=\"hero\"><div><div class=\"kicker\">tarmac · grounded fleet report</div>"
           "<h1>How the GPUs spent their time</h1>"
           "<div class=\"range\">{} → {} UTC · {}</div></div>",
      format_utc(r.since_ms), format_utc(r.until_ms), format_hours(hours_between(r.since_ms, r.until_ms)));
  put(out, "<div class=\"stats\"><div class=\"stat\"><div class=\"v\">{}</div><div class=\"k\">GPU{}</div></div>",
      r.gpus.size(), r.gpus.size() == 1 ? "" : "s");
  // Red only when most of the fleet sits idle: the number is the report's point, not an alarm.
  const bool mostly_idle = recorded > 0 && r.fleet.idle() >= recorded / 2;
  put(out, "<div class=\"stat\"><div class=\"v{}\">{}</div><div class=\"k\">fleet idle</div></div>",
      mostly_idle ? " idle" : "", percent(r.fleet.idle(), recorded));
  if (r.fleet_util_avg_pct) {
    put(out, "<div class=\"stat\"><div class=\"v\">{:.1f} %</div><div class=\"k\">mean utilization</div></div>",
        *r.fleet_util_avg_pct);
  }
  out += "</div></header>\n";
}

void card(std::string& out, std::string_view cls, std::string_view key, const std::string& value,
          const std::string& note) {
  put(out, "<div class=\"card {}\"><div class=\"k\">{}</div><div class=\"v\">{}</div><div class=\"n\">{}</div></div>",
      cls, key, value, note);
}

void class_card(std::string& out, const Report& r, gpu::Activity a, std::string note) {
  const double h = a == gpu::Activity::Idle ? r.fleet.idle() : r.fleet.of(a);
  if (note.empty()) note = percent(h, r.fleet.recorded()) + " of recorded";
  card(out, fmt::format("c-{}", class_of(a)), label_of(a), format_hours(h), note);
}

void cards(std::string& out, const Report& r) {
  const double recorded = r.fleet.recorded();
  out += "<div class=\"cards\">";
  card(out, "c-recorded", "Recorded", format_hours(recorded),
       "GPU-hours recorded of " + format_hours(recorded + r.fleet.unrecorded));
  class_card(out, r, gpu::Activity::Busy, "");
  // Idle here includes reserved-idle: either way nobody used the GPU.
  const double reserved = r.fleet.of(gpu::Activity::ReservedIdle);
  class_card(out, r, gpu::Activity::Idle,
             percent(r.fleet.idle(), recorded) + " of recorded" +
                 (reserved > 0 ? ", " + format_hours(reserved) + " reserved" : ""));
  class_card(out, r, gpu::Activity::Holding, "");
  class_card(out, r, gpu::Activity::Starved, "");
  class_card(out, r, gpu::Activity::Fault,
             fmt::format("{} fault or throttling event{}", r.fault_events, r.fault_events == 1 ? "" : "s"));
  if (r.price_per_gpu_hour) {
    const std::string at = "at " + format_money(*r.price_per_gpu_hour) + " per GPU-hour";
    card(out, "money", "Idle cost", format_money(r.idle_cost.value_or(0)), at);
    card(out, "money", "Holding cost", format_money(r.holding_cost.value_or(0)), at);
  }
  out += "</div>\n";
}

// ---- hours per class: stacked bars ----

void class_legend(std::string& out) {
  out += "<ul class=\"legend\">";
  for (auto a : gpu::kActivities) {
    put(out, "<li><span class=\"sw c-{}\"></span>{}</li>", class_of(a), label_of(a));
  }
  out += "<li><span class=\"sw c-unrecorded\"></span>Not recorded</li></ul>\n";
}

// A round step for the hour axis: at most about eight gridlines whatever the range.
double axis_step(double max_h) {
  for (double step : {1.0, 2.0, 3.0, 6.0, 12.0, 24.0, 48.0, 72.0, 168.0, 336.0, 720.0}) {
    if (max_h / step <= 8) return step;
  }
  return std::ceil(max_h / 8 / 720) * 720;
}

struct BarLayout {
  double left = 70;    // GPU labels
  double right = 96;   // the idle share after each bar
  double top = 6;
  double row = 34;
  double bar = 22;
  double scale = 0;    // user units per hour
  [[nodiscard]] double width() const { return kChartWidth - left - right; }
};

void bar_axis(std::string& out, const BarLayout& l, double max_h, double bottom) {
  const double step = axis_step(max_h);
  for (double h = 0; h <= max_h + 1e-9; h += step) {
    const double x = l.left + h * l.scale;
    put(out, "<line class=\"grid\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\"/>", x, l.top, bottom);
    put(out, "<text class=\"m\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g} h</text>", x, bottom + 16, h);
  }
}

void bar_segment(std::string& out, const GpuReport& g, std::string_view cls, std::string_view label, double hours,
                 double x, double y, const BarLayout& l) {
  const double total = g.hours.recorded() + g.hours.unrecorded;
  put(out,
      "<rect class=\"seg seg-{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\">"
      "<title>GPU {} {}: {} ({})</title></rect>",
      cls, x, y, hours * l.scale, l.bar, g.gpu, label, format_hours(hours), percent(hours, total));
}

void bar_row(std::string& out, const GpuReport& g, double y, const BarLayout& l) {
  const double mid = y + l.bar / 2 + 4;
  put(out, "<g class=\"bar\" data-gpu=\"{}\"><title>GPU {}: {}</title>", g.gpu, g.gpu, util::html_text(g.name));
  put(out, "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" font-weight=\"600\">GPU {}</text>", l.left - 10, mid,
      g.gpu);
  // Only the bar's outer corners are rounded, so the segments are clipped to one rounded rect.
  put(out, "<clipPath id=\"bar-clip-{}\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" rx=\"5\"/>"
           "</clipPath><g clip-path=\"url(#bar-clip-{})\">",
      g.gpu, l.left, y, (g.hours.recorded() + g.hours.unrecorded) * l.scale, l.bar, g.gpu);
  double x = l.left;
  for (auto a : gpu::kActivities) {
    const double h = g.hours.of(a);
    if (h <= 0) continue;
    bar_segment(out, g, class_of(a), label_of(a), h, x, y, l);
    x += h * l.scale;
  }
  if (g.hours.unrecorded > 0) bar_segment(out, g, "unrecorded", "not recorded", g.hours.unrecorded, x, y, l);
  put(out, "</g><text class=\"m\" x=\"{:.1f}\" y=\"{:.1f}\">{} idle</text></g>", kChartWidth - l.right + 10, mid,
      percent(g.hours.idle(), g.hours.recorded()));
}

void class_chart(std::string& out, const Report& r) {
  out += "<section><h2>Hours per GPU by activity</h2>"
         "<p class=\"lead\">Each bar is one GPU's time in the range; idle counts idle and reserved-idle.</p>";
  class_legend(out);
  BarLayout l;
  double max_h = 0;
  for (const auto& g : r.gpus) max_h = std::max(max_h, g.hours.recorded() + g.hours.unrecorded);
  l.scale = max_h > 0 ? l.width() / max_h : 0;
  const double bottom = l.top + l.row * static_cast<double>(r.gpus.size());
  put(out,
      "<div class=\"scroll\"><svg class=\"chart-classes\" viewBox=\"0 0 {:g} {:.0f}\" role=\"img\" "
      "aria-label=\"Hours per GPU in each activity class\">"
      "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect class=\"hatch-bg\" width=\"6\" height=\"6\"/>"
      "<line class=\"hatch-line\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\"/></pattern></defs>",
      kChartWidth, bottom + 24);
  if (max_h > 0) bar_axis(out, l, max_h, bottom);
  double y = l.top + (l.row - l.bar) / 2;
  for (const auto& g : r.gpus) {
    bar_row(out, g, y, l);
    y += l.row;
  }
  out += "</svg></div></section>\n";
}

// ---- per-GPU table ----

std::string hours_cell(double h) {
  // What rounds to 0.0 h is muted like zero, so the eye goes to the hours that count.
  return fmt::format("<td class=\"num{}\">{}</td>", h >= 0.05 ? "" : " zero", format_hours(h));
}

std::string money_cell(const std::optional<double>& usd) {
  return fmt::format("<td class=\"num\">{}</td>", usd ? format_money(*usd) : "–");
}

std::string util_cell(const std::optional<double>& pct) {
  return pct ? fmt::format("<td class=\"num\">{:.1f} %</td>", *pct) : std::string("<td class=\"num zero\">–</td>");
}

void hours_cells(std::string& out, const ClassHours& h) {
  for (auto a : gpu::kActivities) out += hours_cell(h.of(a));
  out += hours_cell(h.unrecorded);
}

void gpu_table(std::string& out, const Report& r) {
  const bool priced = r.price_per_gpu_hour.has_value();
  out += "<section><h2>Per GPU</h2><div class=\"scroll\"><table class=\"gpus\"><thead><tr>"
         "<th class=\"num\">GPU</th><th>Name</th>";
  for (auto a : gpu::kActivities) {
    put(out, "<th class=\"num\"><span class=\"sw c-{}\"></span>{}</th>", class_of(a), label_of(a));
  }
  out += "<th class=\"num\"><span class=\"sw c-unrecorded\"></span>Not recorded</th><th class=\"num\">Util avg</th>";
  if (priced) out += "<th class=\"num\">Idle cost</th><th class=\"num\">Holding cost</th>";
  out += "</tr></thead><tbody>";
  for (const auto& g : r.gpus) {
    put(out, "<tr><td class=\"num\">{}</td><td class=\"name\" title=\"{}\">{}</td>", g.gpu, util::html_text(g.uuid),
        util::html_text(g.name));
    hours_cells(out, g.hours);
    out += util_cell(g.util_avg_pct);
    if (priced) out += money_cell(g.idle_cost) + money_cell(g.holding_cost);
    out += "</tr>";
  }
  out += "</tbody><tfoot><tr><td></td><td>Fleet</td>";
  hours_cells(out, r.fleet);
  out += util_cell(r.fleet_util_avg_pct);
  if (priced) out += money_cell(r.idle_cost) + money_cell(r.holding_cost);
  out += "</tr></tfoot></table></div></section>\n";
}

// ---- heat map ----

struct ColourStop {
  double pct;
  int red, green, blue;
};

// Pale slate for a cold GPU to deep green for a saturated one: green is "busy" everywhere else on
// the page, and idle hours, the thing to look for, stand out as the palest cells.
constexpr std::array<ColourStop, 5> kHeatScale = {{{0, 0xe6, 0xea, 0xf0},
                                                   {10, 0xc9, 0xe6, 0xcf},
                                                   {35, 0x86, 0xcb, 0x99},
                                                   {65, 0x3c, 0xa4, 0x66},
                                                   {100, 0x13, 0x5e, 0x36}}};

std::string heat_colour(double pct) {
  pct = std::clamp(pct, 0.0, 100.0);
  std::size_t i = 1;
  while (i + 1 < kHeatScale.size() && pct > kHeatScale[i].pct) ++i;
  const ColourStop& lo = kHeatScale[i - 1];
  const ColourStop& hi = kHeatScale[i];
  const double t = (pct - lo.pct) / (hi.pct - lo.pct);
  const auto mix = [t](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * t)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(lo.red, hi.red), mix(lo.green, hi.green), mix(lo.blue, hi.blue));
}

struct HeatLayout {
  double left = 96;  // day labels
  double top = 22;   // hour labels
  double cell_w = 34;
  double cell_h = 24;
  double gap = 2;
};

void heat_scale(std::string& out, double y) {
  out += "<defs><linearGradient id=\"heat-gradient\">";
  for (const auto& s : kHeatScale) {
    put(out, "<stop offset=\"{:g}%\" stop-color=\"{}\"/>", s.pct, heat_colour(s.pct));
  }
  out += "</linearGradient></defs>";
  const double x = 96;
  const double w = 260;
  put(out, "<text class=\"m\" x=\"{:g}\" y=\"{:g}\" text-anchor=\"end\">util</text>", x - 10, y + 10);
  put(out, "<rect x=\"{:g}\" y=\"{:g}\" width=\"{:g}\" height=\"12\" rx=\"3\" fill=\"url(#heat-gradient)\"/>", x, y, w);
  for (int pct = 0; pct <= 100; pct += 25) {
    put(out, "<text class=\"m\" x=\"{:g}\" y=\"{:g}\" text-anchor=\"middle\">{} %</text>", x + w * pct / 100, y + 28,
        pct);
  }
  put(out, "<rect class=\"legend-empty\" x=\"{:g}\" y=\"{:g}\" width=\"24\" height=\"12\" rx=\"3\" fill=\"none\" "
           "stroke=\"currentColor\" stroke-opacity=\".35\" stroke-dasharray=\"3 2\"/>"
           "<text class=\"m\" x=\"{:g}\" y=\"{:g}\">no data</text>",
      x + w + 40, y, x + w + 70, y + 10);
}

void heat_row(std::string& out, const HeatDay& day, double y, const HeatLayout& l) {
  const std::string label = format_day(day.day_start_ms);
  put(out, "<text x=\"{:g}\" y=\"{:g}\" text-anchor=\"end\">{}</text>", l.left - 10, y + l.cell_h / 2 + 4, label);
  for (std::size_t h = 0; h < day.util_pct.size(); ++h) {
    const double x = l.left + static_cast<double>(h) * l.cell_w;
    const auto& util = day.util_pct[h];
    const std::string title = util ? fmt::format("{} {:02}:00 UTC: {:.1f} % utilization", label, h, *util)
                                   : fmt::format("{} {:02}:00 UTC: no data", label, h);
    put(out,
        "<rect class=\"{}\" x=\"{:g}\" y=\"{:g}\" width=\"{:g}\" height=\"{:g}\" rx=\"3\"{}>"
        "<title>{}</title></rect>",
        util ? "cell" : "cell empty", x, y, l.cell_w - l.gap, l.cell_h - l.gap,
        util ? fmt::format(" fill=\"{}\"", heat_colour(*util)) : std::string(), title);
  }
}

void heat_map(std::string& out, const Report& r) {
  if (r.heat.empty()) return;
  const HeatLayout l;
  const double grid_bottom = l.top + l.cell_h * static_cast<double>(r.heat.size());
  out += "<section><h2>Fleet utilization by hour</h2>"
         "<p class=\"lead\">Mean utilization of all GPUs in each UTC hour; pale cells are GPU-hours nobody used.</p>";
  put(out,
      "<div class=\"scroll\"><svg class=\"chart-heatmap\" viewBox=\"0 0 {:g} {:g}\" role=\"img\" "
      "aria-label=\"Fleet utilization by day and UTC hour\">",
      kChartWidth, grid_bottom + 58);
  for (int h = 0; h < 24; ++h) {
    put(out, "<text class=\"m\" x=\"{:g}\" y=\"{:g}\" text-anchor=\"middle\">{:02}</text>",
        l.left + h * l.cell_w + (l.cell_w - l.gap) / 2, l.top - 8, h);
  }
  double y = l.top;
  for (const auto& day : r.heat) {
    heat_row(out, day, y, l);
    y += l.cell_h;
  }
  heat_scale(out, grid_bottom + 16);
  out += "</svg></div></section>\n";
}

// ---- who used the GPUs, idle windows, holding ----

void consumer_table(std::string& out, std::string_view title, const std::vector<Consumer>& list, bool code) {
  if (list.empty()) return;
  double most = 0;
  for (const auto& c : list) most = std::max(most, c.gpu_hours);
  put(out, "<div><h3>{}</h3><div class=\"scroll\"><table class=\"consumers\"><thead><tr><th>Name</th>"
           "<th class=\"num\">GPU-hours</th><th class=\"num\">Processes</th></tr></thead><tbody>",
      title);
  for (const auto& c : list) {
    const double share = most > 0 ? 100.0 * c.gpu_hours / most : 0;
    put(out, "<tr><td class=\"wrap\">{}{}{}</td><td class=\"num bar-cell\"><span class=\"minibar\" "
             "style=\"width:{:.0f}%\"></span>{}</td><td class=\"num\">{}</td></tr>",
        code ? "<code>" : "", util::html_text(c.name), code ? "</code>" : "", share, format_hours(c.gpu_hours), c.processes);
  }
  out += "</tbody></table></div></div>";
}

void consumers(std::string& out, const Report& r) {
  if (r.users.empty() && r.commands.empty() && r.containers.empty() && r.slurm_jobs.empty()) return;
  out += "<section><h2>Who used the GPU-hours</h2>"
         "<p class=\"lead\">GPU-hours of the processes seen on the GPUs, most first.</p><div class=\"grid2\">";
  consumer_table(out, "Users", r.users, false);
  consumer_table(out, "Commands", r.commands, true);
  consumer_table(out, "Containers", r.containers, true);
  consumer_table(out, "Slurm jobs", r.slurm_jobs, false);
  out += "</div></section>\n";
}

void idle_windows(std::string& out, const Report& r) {
  if (r.idle_windows.empty()) return;
  double longest = 0;
  for (const auto& w : r.idle_windows) longest = std::max(longest, hours_between(w.start_ms, w.end_ms));
  out += "<section><h2>Longest idle windows</h2>"
         "<p class=\"lead\">Where backfill jobs would have fit.</p><div class=\"scroll\"><table class=\"idle\">"
         "<thead><tr><th class=\"num\">GPU</th><th>Start (UTC)</th><th>End (UTC)</th><th class=\"num\">Duration</th>"
         "</tr></thead><tbody>";
  for (const auto& w : r.idle_windows) {
    const double h = hours_between(w.start_ms, w.end_ms);
    put(out, "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"num bar-cell c-idle\">"
             "<span class=\"minibar\" style=\"width:{:.0f}%\"></span>{}</td></tr>",
        w.gpu, format_utc(w.start_ms), format_utc(w.end_ms), longest > 0 ? 100 * h / longest : 0, format_hours(h));
  }
  out += "</tbody></table></div></section>\n";
}

void holding_processes(std::string& out, const HoldingIncident& incident) {
  if (!incident.holder.empty()) {
    put(out, "<div class=\"proc\"><b>an idle {} of {}</b></div>", util::html_text(incident.holder),
        incident.holder_user.empty() ? "?" : util::html_text(incident.holder_user));
  }
  if (incident.processes.empty()) {
    out += "<span class=\"pid\">no process recorded</span>";
    return;
  }
  for (const auto& p : incident.processes) {
    const auto mem = static_cast<std::uint64_t>(std::max(0LL, p.mem_used_mib_max)) * util::kMiB;
    put(out, "<div class=\"proc\"><span class=\"pid\">pid {}</span> {} · {} · <code>{}</code></div>", p.pid,
        p.user.empty() ? "?" : util::html_text(p.user), util::format_bytes(mem), util::html_text(p.command));
  }
}

void holding(std::string& out, const Report& r) {
  out += "<section><h2>Holding incidents</h2>"
         "<p class=\"lead\">GPUs whose memory was held by processes at 0 % utilization.</p>";
  for (const auto& h : r.holders) {
    put(out, "<p>{} of {}: <b>{}</b> held idle in {} incident{}</p>", util::html_text(h.holder),
        h.user.empty() ? "?" : util::html_text(h.user), format_hours(h.gpu_hours), h.incidents,
        h.incidents == 1 ? "" : "s");
  }
  if (r.holding.empty()) {
    out += "<p class=\"good\">None in this range.</p></section>\n";
    return;
  }
  out += "<div class=\"scroll\"><table class=\"holding\"><thead><tr><th class=\"num\">GPU</th><th>Start (UTC)</th>"
         "<th class=\"num\">Duration</th><th>Processes (pid · user · memory · command)</th></tr></thead><tbody>";
  for (const auto& h : r.holding) {
    put(out, "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"wrap\">", h.gpu,
        format_utc(h.start_ms), format_hours(hours_between(h.start_ms, h.end_ms)));
    holding_processes(out, h);
    out += "</td></tr>";
  }
  out += "</tbody></table></div></section>\n";
}

void zombies(std::string& out, const Report& r) {
  const auto& z = r.zombies;
  put(out, "<section><h2>Zombies found / reaped</h2><p class=\"lead\">Processes the reaper found holding memory at "
           "0 % ({} found), and those it ended: {} reaped, {} freed.</p>",
      z.found, z.reaped, util::format_bytes(z.freed_bytes));
  if (z.recent.empty()) {
    out += "</section>\n";
    return;
  }
  out += "<div class=\"scroll\"><table class=\"zombies\"><thead><tr><th class=\"num\">GPU</th><th>Time (UTC)</th>"
         "<th>Process (pid · user · command)</th><th>Outcome</th><th class=\"num\">Freed</th></tr></thead><tbody>";
  for (const auto& a : z.recent) {
    put(out, "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"wrap\"><span class=\"pid\">pid {}</span> {} · "
             "<code>{}</code></td><td>{}</td><td class=\"num\">{}</td></tr>",
        a.gpu, format_utc(a.ts_ms), a.pid, a.user.empty() ? "?" : util::html_text(a.user), util::html_text(a.command),
        util::html_text(a.outcome), a.freed_bytes ? util::format_bytes(*a.freed_bytes) : std::string("-"));
  }
  out += "</tbody></table></div></section>\n";
}

void backfill(std::string& out, const Report& r) {
  const auto& b = r.backfill;
  if (b.requests == 0) return;
  put(out, "<section><h2>Idle hours turned into work</h2><p class=\"lead\">LLM batches sent by the agent "
           "(docs/backfill.md): {} requests of {} batches answered ({} with an error), {} prompt and {} completion "
           "tokens, {} sending{}.</p></section>\n",
      b.requests, b.batches, b.failed, b.prompt_tokens, b.completion_tokens, format_hours(b.busy_hours),
      b.gpu_hours > 0 ? " on " + format_hours(b.gpu_hours) + " GPU-hours" : std::string());
}

void no_data(std::string& out, const Report& r) {
  put(out, "<section class=\"empty-state\"><h2>No data</h2><p class=\"lead\">No telemetry was recorded between {} and "
           "{} UTC. Is <code>tarmac agent</code> recording to this store?</p></section>\n",
      format_utc(r.since_ms), format_utc(r.until_ms));
}

}  // namespace

std::string render_html(const Report& r) {
  std::string out;
  out.reserve(64 * 1024);
  put(out, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
           "<meta name=\"color-scheme\" content=\"light dark\">"
           "<title>tarmac report · {} → {} UTC</title><style>{}</style></head>\n<body><main>\n",
      format_utc(r.since_ms), format_utc(r.until_ms), kStyle);
  header(out, r);
  if (r.gpus.empty()) {
    no_data(out, r);
  } else {
    cards(out, r);
    class_chart(out, r);
    gpu_table(out, r);
    heat_map(out, r);
    consumers(out, r);
    idle_windows(out, r);
    holding(out, r);
    zombies(out, r);
    backfill(out, r);
  }
  out += "<footer>Generated by tarmac from recorded telemetry. All times are UTC.</footer>\n</main></body></html>\n";
  return out;
}

}  // namespace tarmac::report
