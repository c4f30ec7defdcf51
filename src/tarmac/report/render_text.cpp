// The report on the terminal: the fleet in one paragraph, a row per GPU, the heat map as shaded
// characters, then who used the GPUs, where backfill would fit, and who held GPUs doing nothing.
#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tarmac/report/format.hpp"
#include "tarmac/report/report.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::report {

namespace {

std::string pct(double part, double whole) { return format_share(part, whole); }

// One character per hour: blank for no data, then darker with more utilization.
std::string shade(const std::optional<double>& util) {
  if (!util) return " ";
  static const char* const kLevels[] = {"·", "░", "▒", "▓", "█"};
  if (*util < 1) return kLevels[0];
  const auto level = std::min<std::size_t>(4, 1 + static_cast<std::size_t>(*util / 25.0));
  return kLevels[level];
}

void consumers(std::string& out, const char* title, const std::vector<Consumer>& list) {
  if (list.empty()) return;
  out += fmt::format("\n{}:\n", title);
  for (const auto& c : list) {
    out += fmt::format("  {:>9}  {:>3} proc  {}\n", format_hours(c.gpu_hours), c.processes, util::terminal_text(c.name));
  }
}

// A table of jobs: id, user, partition, GPUs, held, held idle, busy, the first time seen.
void jobs_table(std::string& out, const std::vector<JobUse>& jobs, bool with_cost) {
  // Slurm ids fit 12 columns; a pod's pod/NAMESPACE/NAME widens the column, up to 48.
  std::size_t width = 12;
  for (const auto& u : jobs) width = std::max(width, std::min<std::size_t>(48, util::terminal_text(u.job).size()));
  out += fmt::format("  {:<{}} {:<12} {:<10} {:<9} {:>9} {:>9} {:>7} {:>9}", "JOB", width, "USER", "PARTITION", "GPUS",
                     "GPU-TIME", "HELD IDLE", "IDLE %", "BUSY");
  if (with_cost) out += fmt::format(" {:>11}", "IDLE COST");
  out += fmt::format("  {}\n", "FROM (UTC)");
  for (const auto& u : jobs) {
    std::string gpus = fmt::format("{}", fmt::join(u.gpus, ","));
    if (gpus.size() > 9) gpus = gpus.substr(0, 8) + "+";
    out += fmt::format("  {:<{}} {:<12} {:<10} {:<9} {:>9} {:>9} {:>7} {:>9}", util::terminal_text(u.job), width,
                       u.user.empty() ? "-" : util::terminal_text(u.user),
                       u.partition.empty() ? "-" : util::terminal_text(u.partition), gpus, format_hours(u.gpu_hours()),
                       format_hours(u.held_idle()), pct(u.held_idle(), u.hours.recorded()),
                       format_hours(u.hours.of(gpu::Activity::Busy)));
    if (with_cost) out += fmt::format(" {:>11}", u.idle_cost ? format_money(*u.idle_cost) : std::string("-"));
    out += fmt::format("  {}\n", format_utc(u.first_ms));
  }
}

}  // namespace

std::string render_jobs_text(const Report& r, bool color) {
  const auto pods = static_cast<std::size_t>(
      std::count_if(r.jobs.begin(), r.jobs.end(), [](const JobUse& u) { return u.job.starts_with("pod/"); }));
  const std::size_t slurm = r.jobs.size() - pods;
  std::string counted = fmt::format("{} Slurm job{}", slurm, slurm == 1 ? "" : "s");
  if (pods > 0) counted += fmt::format(", {} pod{}", pods, pods == 1 ? "" : "s");
  std::string out = bold(fmt::format("tarmac report --by job: {} to {} UTC, {}", format_utc(r.since_ms),
                                     format_utc(r.until_ms), counted),
                         color) +
                    "\n";
  if (r.jobs.empty()) {
    return out + "No Slurm job or Kubernetes pod held a GPU in this range (the agent reads slurm.job_map_dir, which "
                 "`tarmac slurm prolog` writes, and the kubelet's kubernetes.pod_resources_socket: docs/slurm.md, "
                 "docs/kubernetes.md).\n";
  }
  out += "Most GPU-hours held idle first (reserved-idle: nothing ran; holding: memory held at 0 %).\n\n";
  jobs_table(out, r.jobs, r.price_per_gpu_hour.has_value());
  return out;
}

std::string render_heat_text(const std::vector<HeatDay>& heat) {
  std::string out = "\nUtilization by hour (UTC), fleet mean: · <1 %  ░ <25 %  ▒ <50 %  ▓ <75 %  █ 75 % and more\n";
  out += fmt::format("{:<10}", "");
  for (int h = 0; h < 24; h += 3) out += fmt::format("{:<3}", fmt::format("{:02}", h));
  out += "\n";
  for (const auto& day : heat) {
    out += fmt::format("{:<10}", format_day(day.day_start_ms));
    for (const auto& cell : day.util_pct) out += shade(cell);
    out += "\n";
  }
  return out;
}

std::string render_text(const Report& r, bool color) {
  std::string out;
  const double span_h = static_cast<double>(r.until_ms - r.since_ms) / 3600e3;
  out += bold(fmt::format("tarmac report: {} to {} UTC ({}), {} GPU{}", format_utc(r.since_ms), format_utc(r.until_ms),
                          format_hours(span_h), r.gpus.size(), r.gpus.size() == 1 ? "" : "s"),
              color) +
         "\n";
  if (r.gpus.empty()) return out + "No recorded telemetry in this range.\n";
  const double rec = r.fleet.recorded();
  out += fmt::format("Recorded {:.1f} GPU-hours: busy {} ({}), starved {}, holding {}, idle {} ({}), fault {}",
                     rec, format_hours(r.fleet.of(gpu::Activity::Busy)),
                     pct(r.fleet.of(gpu::Activity::Busy), rec), format_hours(r.fleet.of(gpu::Activity::Starved)),
                     format_hours(r.fleet.of(gpu::Activity::Holding)), format_hours(r.fleet.idle()),
                     pct(r.fleet.idle(), rec), format_hours(r.fleet.of(gpu::Activity::Fault)));
  out += r.fleet.unrecorded > 0.05 ? fmt::format("; not recorded {}.\n", format_hours(r.fleet.unrecorded)) : ".\n";
  if (r.fleet_util_avg_pct) out += fmt::format("Mean utilization {:.1f} %.\n", *r.fleet_util_avg_pct);
  if (r.price_per_gpu_hour) {
    out += bold(fmt::format("Cost of idle GPUs: {}; of GPUs held doing nothing: {} (at {} per GPU-hour).",
                            format_money(r.idle_cost.value_or(0)), format_money(r.holding_cost.value_or(0)),
                            format_money(*r.price_per_gpu_hour)),
                color) +
           "\n";
  }
  if (r.fault_events > 0) out += fmt::format("{} fault or throttling events (tarmac history --events).\n", r.fault_events);

  out += fmt::format("\n{:<4} {:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}", "GPU", "NAME", "BUSY", "STARVED",
                     "HOLDING", "IDLE", "FAULT", "NO DATA", "UTIL");
  if (r.price_per_gpu_hour) out += fmt::format(" {:>11}", "IDLE COST");
  out += "\n";
  for (const auto& g : r.gpus) {
    out += fmt::format("{:<4} {:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}", g.gpu, util::terminal_text(g.name.substr(0, 24)),
                       format_hours(g.hours.of(gpu::Activity::Busy)), format_hours(g.hours.of(gpu::Activity::Starved)),
                       format_hours(g.hours.of(gpu::Activity::Holding)), format_hours(g.hours.idle()),
                       format_hours(g.hours.of(gpu::Activity::Fault)), format_hours(g.hours.unrecorded),
                       g.util_avg_pct ? fmt::format("{:.0f} %", *g.util_avg_pct) : std::string("-"));
    if (g.idle_cost) out += fmt::format(" {:>11}", format_money(*g.idle_cost));
    out += "\n";
  }

  out += render_heat_text(r.heat);

  consumers(out, "GPU-hours by user", r.users);
  consumers(out, "GPU-hours by command", r.commands);
  consumers(out, "GPU-hours by container", r.containers);
  consumers(out, "GPU-hours by Slurm job", r.slurm_jobs);
  std::vector<JobUse> idle_jobs;
  for (const auto& u : r.jobs) {
    if (u.held_idle() > 0 && idle_jobs.size() < 10) idle_jobs.push_back(u);
  }
  if (!idle_jobs.empty()) {
    out += "\nSlurm jobs that held GPUs idle (all jobs: tarmac report --by job):\n";
    jobs_table(out, idle_jobs, r.price_per_gpu_hour.has_value());
  }

  if (!r.idle_windows.empty()) {
    out += "\nLongest idle windows (where backfill would fit):\n";
    for (const auto& w : r.idle_windows) {
      out += fmt::format("  GPU {:<3} {} to {}  {}\n", w.gpu, format_utc(w.start_ms), format_utc(w.end_ms),
                         format_hours(static_cast<double>(w.end_ms - w.start_ms) / 3600e3));
    }
  }
  if (!r.holders.empty()) {
    out += "\nHeld idle by well-known holders:\n";
    for (const auto& h : r.holders) {
      out += fmt::format("  {} of {}: {} in {} incident{}\n", h.holder, h.user.empty() ? "?" : util::terminal_text(h.user),
                         format_hours(h.gpu_hours), h.incidents, h.incidents == 1 ? "" : "s");
    }
  }
  out += "\nHolding incidents (memory held at 0 % utilization):";
  if (r.holding.empty()) out += " none";
  out += "\n";
  for (const auto& h : r.holding) {
    // "an idle Jupyter kernel of bob": the sentence a fleet owner acts on (the user's name escaped).
    const std::string who = h.holder.empty() ? std::string()
                                             : fmt::format(": an idle {} of {}", h.holder,
                                                           h.holder_user.empty() ? "?" : util::terminal_text(h.holder_user));
    out += fmt::format("  GPU {:<3} {} for {}{}\n", h.gpu, format_utc(h.start_ms),
                       format_hours(static_cast<double>(h.end_ms - h.start_ms) / 3600e3), who);
    for (const auto& p : h.processes) {
      out += fmt::format("           pid {} {} {} MiB: {}\n", p.pid, p.user.empty() ? "?" : util::terminal_text(p.user),
                         p.mem_used_mib_max, util::terminal_text(p.command));
    }
  }
  if (const auto& b = r.backfill; b.requests > 0) {
    out += fmt::format("\nIdle hours turned into work (docs/backfill.md): {} requests of {} batch{} answered ({} with "
                       "an error), {} tokens, {} sending",
                       b.requests, b.batches, b.batches == 1 ? "" : "es", b.failed, b.prompt_tokens + b.completion_tokens,
                       format_hours(b.busy_hours));
    out += b.gpu_hours > 0 ? fmt::format(", on {} of GPU time\n", format_hours(b.gpu_hours)) : "\n";
  }
  if (!r.mig.empty()) {
    // MIG devices (docs/mig.md): a slice's idle hours cost its share of the board.
    out += fmt::format("\nMIG devices (docs/mig.md): {} of board time idle on slices{}\n",
                       format_hours(r.mig_idle_slice_hours),
                       r.mig_idle_cost ? " = " + format_money(*r.mig_idle_cost) : std::string());
    for (const auto& m : r.mig) {
      out += fmt::format("  GPU {:<3} GI {:<3} {:<10} {} of 7 slices: {} idle, {} busy{}{}\n", m.gpu, m.gpu_instance,
                         util::terminal_text(m.profile), m.slices, format_hours(m.hours.idle()),
                         format_hours(m.hours.of(gpu::Activity::Busy)),
                         m.idle_cost ? ", idle " + format_money(*m.idle_cost) : std::string(),
                         m.unmeasured_hours > 0 ? fmt::format(" ({} from process presence: no GPM)",
                                                              format_hours(m.unmeasured_hours))
                                                : std::string());
    }
  }
  const auto& z = r.zombies;
  out += fmt::format("\nZombies (docs/reap.md): {} found, {} reaped, {} freed", z.found, z.reaped,
                     util::format_bytes(z.freed_bytes));
  out += z.actions > z.reaped ? fmt::format(" ({} actions did not free memory)\n", z.actions - z.reaped) : "\n";
  for (const auto& a : z.recent) {
    out += fmt::format("  GPU {:<3} {}  pid {} {} {}: {}\n", a.gpu, format_utc(a.ts_ms), a.pid,
                       a.user.empty() ? "?" : util::terminal_text(a.user),
                       a.freed_bytes ? util::format_bytes(*a.freed_bytes) + " freed" : util::terminal_text(a.outcome),
                       util::terminal_text(a.command));
  }
  return out;
}

}  // namespace tarmac::report
