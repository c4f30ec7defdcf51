// One GPU's lines on the main screen (layout_support.hpp): compact (one line) or full (three, with
// graphs), then a line per MIG device. Pure, as layout.cpp.
#include <algorithm>
#include <fmt/format.h>

#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/tui/layout_support.hpp"

namespace tarmac::tui::detail {

namespace {

constexpr double kPanelGiB = 1024.0 * 1024.0 * 1024.0;  // not kGiB: screens.cpp has one in this namespace

Style class_style(gpu::Activity a) {
  switch (a) {
    case gpu::Activity::Busy: return Style::Good;
    case gpu::Activity::Starved:
    case gpu::Activity::Holding:
    case gpu::Activity::ReservedIdle: return Style::Warn;
    case gpu::Activity::Idle: return Style::Dim;
    case gpu::Activity::Fault: return Style::Bad;
  }
  return Style::Plain;
}

template <typename T>
std::string or_dash(const std::optional<T>& v, const char* suffix = "") {
  return v ? fmt::format("{}{}", *v, suffix) : "-";
}

std::string power_text(const gpu::Device& d) {
  const auto limit = d.modes.enforced_power_limit_mw ? d.modes.enforced_power_limit_mw : d.modes.power_limit_mw;
  if (!d.sample.power_mw) return limit ? fmt::format("-/{:.0f} W", *limit / 1000.0) : "- W";
  if (!limit) return fmt::format("{:.0f} W", *d.sample.power_mw / 1000.0);
  return fmt::format("{:.0f}/{:.0f} W", *d.sample.power_mw / 1000.0, *limit / 1000.0);
}

std::string events_text(const gpu::Device& d) {
  if (!d.sample.clock_event_reasons) return "-";
  std::string out;
  for (const auto& n : gpu::clock_event_names()) {
    if ((*d.sample.clock_event_reasons & n.bit) == 0 || n.bit == 0x1) continue;  // idle clocks are not news
    out += (out.empty() ? "" : ", ") + std::string(n.words);
  }
  return out.empty() ? "none" : out;
}

// Who holds the GPU: the scheduler's lease on it ("job 12 alice"), then its processes' users
// ("bob +2") but for the lease's own user.
std::string holders(const gpu::Device& d, const HostData& host) {
  const auto lease = host.leases.find(d.id.index);
  std::vector<std::string> users;
  for (const auto& p : d.processes) {
    const std::string u = p.host.user.value_or("?");
    if (std::find(users.begin(), users.end(), u) != users.end()) continue;
    if (lease != host.leases.end() && lease->second.label.size() > u.size() &&
        lease->second.label.compare(lease->second.label.size() - u.size() - 1, std::string::npos, " " + u) == 0) {
      continue;
    }
    users.push_back(u);
  }
  std::string out = lease != host.leases.end() ? lease->second.label : "";
  if (!users.empty()) {
    out += (out.empty() ? "" : ", ") + users.front();
    if (users.size() > 1) out += fmt::format(" +{}", users.size() - 1);
  }
  return out;
}

std::string mem_text(const gpu::Device& d) {
  if (!d.sample.mem_used_bytes || !d.id.mem_total_bytes) return "-";
  return fmt::format("{:.1f}/{:.1f}G", static_cast<double>(*d.sample.mem_used_bytes) / kPanelGiB,
                     static_cast<double>(*d.id.mem_total_bytes) / kPanelGiB);
}

double mem_fraction(const gpu::Device& d) {
  if (!d.sample.mem_used_bytes || !d.id.mem_total_bytes || *d.id.mem_total_bytes == 0) return 0;
  return static_cast<double>(*d.sample.mem_used_bytes) / static_cast<double>(*d.id.mem_total_bytes);
}

std::string short_name(const gpu::Device& d) {
  std::string name = d.id.name.value_or("?");
  if (name.rfind("NVIDIA ", 0) == 0) name = name.substr(7);
  return name;
}

void gpu_compact(std::vector<Line>& out, const Model& model, std::size_t host, const gpu::Device& d, gpu::Activity cls,
                 const ViewState& view, int width) {
  Builder b(width);
  b.add(host_prefix(model, host), Style::Bold).add(fmt::format("{:>2} ", d.id.index), Style::Bold);
  b.add(safe_fit(short_name(d), 16)).add(" ");
  if (d.lost) {
    b.add("lost: " + *d.lost, Style::Bad);
    out.push_back(b.done());
    return;
  }
  b.add(fit(gpu::to_string(cls), 8), class_style(cls)).add(" ");
  b.add(bar(mem_fraction(d), 12, view.ascii)).add(" ");
  b.add(fit(mem_text(d), 11)).add(" ");
  b.add(fmt::format("{:>4} ", or_dash(d.sample.util_gpu_pct, "%")));
  b.add(fmt::format("{:>4} ", or_dash(d.sample.temp_c, "C")));
  b.add(fmt::format("{:>9} ", power_text(d)));
  b.add(holders(d, model.hosts()[host]), Style::Dim);
  out.push_back(b.done());
}

void gpu_full(std::vector<Line>& out, const Model& model, std::size_t host, const gpu::Device& d, gpu::Activity cls,
              const ViewState& view, int width) {
  const std::string indent(6, ' ');
  {
    Builder b(width);
    b.add(host_prefix(model, host), Style::Bold).add(fmt::format("GPU {} ", d.id.index), Style::Bold);
    b.add(safe_fit(d.id.name.value_or("?"), 24)).add(" ");
    if (d.lost) {
      b.add("lost: " + *d.lost, Style::Bad);
      out.push_back(b.done());
      out.push_back(plain_line(width, indent + "no readings: the GPU does not answer (shown as it was last known)", Style::Dim));
      out.push_back(Line{});
      return;
    }
    b.add(fit(gpu::to_string(cls), 13), class_style(cls)).add(" MEM ");
    b.add(bar(mem_fraction(d), 22, view.ascii)).add(" ");
    b.add(fit(mem_text(d), 12)).add("  UTIL ").add(fmt::format("{:>4}", or_dash(d.sample.util_gpu_pct, "%")));
    b.add("  MBW ").add(fmt::format("{:>4}", or_dash(d.sample.util_mem_pct, "%")));
    const std::string who = holders(d, model.hosts()[host]);
    if (!who.empty()) b.add("  ").add(who, Style::Dim);
    out.push_back(b.done());
  }
  {
    Builder b(width);
    b.add(indent).add(fmt::format("{:>4}", or_dash(d.sample.temp_c, view.ascii ? "C" : "\u00b0C"))).add("  ");
    b.add(fmt::format("{:>11}", power_text(d))).add("  SM ").add(or_dash(d.sample.clock_sm_mhz, " MHz"));
    b.add("  FAN ").add(or_dash(d.sample.fan_pct, "%")).add("  ").add(d.sample.pstate ? fmt::format("P{}", *d.sample.pstate) : "P-");
    const std::string ev = events_text(d);
    b.add("  clocks: ").add(ev, ev == "none" || ev == "-" ? Style::Dim : Style::Warn);
    out.push_back(b.done());
  }
  {
    Builder b(width);
    b.add(indent);
    const GpuHistory* h = model.history(host, d.id.index);
    const int graph = std::max(4, (width - 6 - 4 * 6) / 4 - 1);
    const auto limit = d.modes.enforced_power_limit_mw ? d.modes.enforced_power_limit_mw : d.modes.power_limit_mw;
    const double power_top = limit ? *limit / 1000.0 : 0;
    struct G {
      const char* label;
      const Series* s;
      double top;
    };
    const std::deque<double> none;
    const G graphs[] = {{"util ", h ? &h->util_pct : nullptr, 100},
                        {"mem ", h ? &h->mem_pct : nullptr, 100},
                        {"pwr ", h ? &h->power_w : nullptr, power_top},
                        {"temp ", h ? &h->temp_c : nullptr, 100}};
    for (const auto& g : graphs) {
      double top = g.top;
      if (g.s && (top <= 0 || !g.s->points().empty())) {
        for (double p : g.s->points()) top = std::max(top, p);
      }
      b.add(g.label, Style::Dim).add(sparkline(g.s ? g.s->points() : none, graph, top, view.ascii), Style::Good).add(" ");
    }
    out.push_back(b.done());
  }
}

// One line per MIG device of a GPU in MIG mode, under its panel (docs/mig.md): its profile, class,
// memory, GPM where measured (MIG mode gives no utilization: "-", never 0 %), and its processes' users.
void mig_lines(std::vector<Line>& out, const gpu::Device& d, const std::vector<gpu::MigActivity>& classes,
               const ViewState& view, int width) {
  for (std::size_t k = 0; k < d.mig.size(); ++k) {
    const gpu::MigDevice& m = d.mig[k];
    Builder b(width);
    const bool last = k + 1 == d.mig.size();
    b.add(view.ascii ? (last ? "   `- " : "   |- ") : (last ? "   \u2514\u2500 " : "   \u251c\u2500 "), Style::Dim);
    b.add(fmt::format("MIG {} ", m.index)).add(safe_fit(m.profile.value_or("?"), 10)).add(" ");
    constexpr int kClassWidth = 13;  // "reserved-idle", a leased MIG device nothing runs on
    if (k < classes.size()) {
      // Without GPM a MIG device with processes is in use, its activity unmeasured: said so.
      const auto& c = classes[k];
      if (c.measured) b.add(fit(gpu::to_string(c.activity), kClassWidth), class_style(c.activity)).add(" ");
      else b.add(fit("in use", kClassWidth)).add(" ");
    } else {
      b.add(fit("-", kClassWidth)).add(" ");
    }
    gpu::Device v;
    v.id.mem_total_bytes = m.mem_total_bytes;
    v.sample.mem_used_bytes = m.mem_used_bytes;
    b.add(bar(mem_fraction(v), 12, view.ascii)).add(" ").add(fit(mem_text(v), 11)).add(" ");
    b.add(fmt::format("GPM {:>4} ", m.gpm_sm_active_pct ? fmt::format("{:.0f}%", *m.gpm_sm_active_pct) : "-"));
    std::vector<std::string> users;
    for (const auto& p : d.processes) {
      const std::string u = p.host.user.value_or("?");
      if (p.mig == k && std::find(users.begin(), users.end(), u) == users.end()) users.push_back(u);
    }
    if (!users.empty()) {
      b.add(users.front() + (users.size() > 1 ? fmt::format(" +{}", users.size() - 1) : ""), Style::Dim);
    }
    out.push_back(b.done());
  }
}

}  // namespace

std::string host_prefix(const Model& model, std::size_t host) {
  if (model.hosts().size() <= 1) return "";
  const auto& name = model.hosts()[host].name;
  return (name.empty() ? std::string("local") : name) + " ";
}

void gpu_panel(std::vector<Line>& out, const Model& model, std::size_t host, const gpu::Device& d, gpu::Activity cls,
               const std::vector<gpu::MigActivity>& mig, const ViewState& view, int width, bool full) {
  if (full) {
    gpu_full(out, model, host, d, cls, view, width);
  } else {
    gpu_compact(out, model, host, d, cls, view, width);
  }
  if (!d.lost) mig_lines(out, d, mig, view, width);
}

}  // namespace tarmac::tui::detail
