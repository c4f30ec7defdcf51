// The grounded-fleet report (PRODUCT.md §1, §3): for a time range, per GPU the hours in each
// activity class, utilization, the cost of idle and holding time at a price, a heat map of
// utilization by day and hour, who used the GPU-hours, the longest idle windows (where backfill
// would fit) and holding incidents. Computed from the store's spans and hourly rollups only, so a
// week of 8 GPUs reads a few thousand rows.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/store/reader.hpp"
#include "tarmac/store/rows.hpp"

namespace tarmac::report {

// Hours in each class, indexed like gpu::kActivities, plus the hours nothing was recorded.
struct ClassHours {
  std::array<double, gpu::kActivities.size()> hours{};
  double unrecorded = 0;

  [[nodiscard]] double of(gpu::Activity a) const;
  [[nodiscard]] double recorded() const;
  // idle + reserved-idle: the GPU was available and nobody used it.
  [[nodiscard]] double idle() const;
};

struct GpuReport {
  unsigned gpu = 0;
  std::string name;
  std::string uuid;
  ClassHours hours;
  std::optional<double> util_avg_pct;      // over the recorded hours
  std::optional<double> mem_used_avg_mib;
  std::optional<double> idle_cost;         // idle hours x price
  std::optional<double> holding_cost;      // holding hours x price
};

// One day of the heat map: the fleet's mean utilization in each UTC hour; nullopt where nothing
// was recorded.
struct HeatDay {
  long long day_start_ms = 0;  // 00:00 UTC
  std::array<std::optional<double>, 24> util_pct{};
};

// Who used GPU-hours: a user, a command, a container or a Slurm job.
struct Consumer {
  std::string name;
  double gpu_hours = 0;
  std::size_t processes = 0;
};

// A stretch of time one GPU sat idle (idle or reserved-idle) without a break.
struct IdleWindow {
  unsigned gpu = 0;
  long long start_ms = 0;
  long long end_ms = 0;
};

// A GPU held by processes at 0 % (holding), with the processes seen on it then.
struct HoldingIncident {
  unsigned gpu = 0;
  long long start_ms = 0;
  long long end_ms = 0;
  std::vector<store::ProcessSpan> processes;
  // The holder, when the process that held the most memory then is a well-known kind
  // (host::well_known_holder: "Jupyter kernel", "Ollama server"...), and its user.
  std::string holder;
  std::string holder_user;
};

// Holding time by well-known holder (a Jupyter kernel of bob): every holding run in the range whose
// biggest process is one, added up. "Jupyter kernels of bob held GPUs for 12 h" is what a fleet
// owner acts on.
struct HolderHours {
  std::string holder;  // "Jupyter kernel"
  std::string user;
  double gpu_hours = 0;
  std::size_t incidents = 0;
};

// One holder the reaper acted on (a "reap" event: the agent's or `tarmac reap --kill`'s).
struct ZombieAction {
  unsigned gpu = 0;
  long long ts_ms = 0;
  unsigned pid = 0;
  std::string user;
  std::string command;
  std::string outcome;                      // reap's words: "ended", "killed", "survived", ...
  std::optional<std::uint64_t> freed_bytes; // the memory the driver gave back
};

// Zombies found and reaped (docs/reap.md "As a service"): found = the holders the agent's reaper
// warned about (its "hold" events, one per process and GPU each time it sat at 0 % for
// reaper.warn_after), reaped = the "reap" events whose memory the driver freed.
struct Zombies {
  std::size_t found = 0;
  std::size_t actions = 0;          // every "reap" event, whatever its outcome
  std::size_t reaped = 0;           // ... whose memory was freed
  std::uint64_t freed_bytes = 0;    // summed over those
  std::vector<ZombieAction> recent; // the actions, newest first, at most 20
};

// Idle hours turned into work (docs/backfill.md): the agent's "backfill" events, one per stint of a
// batch's sending (started or sent again, until done or stopped), recorded at its end.
struct BackfillWork {
  std::size_t batches = 0;          // distinct batches
  long long requests = 0;           // answered, errors included
  long long failed = 0;             // ... with an error
  long long prompt_tokens = 0;
  long long completion_tokens = 0;
  double busy_hours = 0;            // sending, summed over the stints
  double gpu_hours = 0;             // busy hours x the GPUs of the server, where tarmac knows them
};

// One Slurm job's GPUs over the range (from the HPC job mapping the agent read: table job_gpu):
// GPU-hours in each class the GPUs were in while the job held them. held_idle() is what
// Princeton's job_defense_shield flags: GPU-hours the job held at 0 % (reserved-idle: nothing ran;
// holding: processes kept memory and did nothing).
struct JobUse {
  std::string job;
  std::string user;       // "" when unknown
  std::string partition;  // "" when unknown
  std::vector<unsigned> gpus;
  long long first_ms = 0;
  long long last_ms = 0;
  ClassHours hours;       // unrecorded: held, but no class recorded then
  std::optional<double> idle_cost;  // held_idle() x price

  [[nodiscard]] double gpu_hours() const { return hours.recorded() + hours.unrecorded; }
  [[nodiscard]] double held_idle() const { return hours.idle() + hours.of(gpu::Activity::Holding); }
};

// One MIG device over the range (docs/mig.md), from its class spans (table mig_activity): hours
// per class, and its idle hours weighed by its share of the board (slices / 7): what it cost. A
// GPU instance id that held other profiles over the range is one row per profile.
struct MigUse {
  unsigned gpu = 0;
  unsigned gpu_instance = 0;
  std::string profile;
  unsigned slices = 0;
  ClassHours hours;
  double unmeasured_hours = 0;  // of hours, those classified from process presence (no GPM)
  // idle + reserved-idle hours x slices / 7: board-hours left idle on this MIG device.
  double idle_slice_hours = 0;
  std::optional<double> idle_cost;  // idle slice-hours x price
};

struct Report {
  long long since_ms = 0;
  long long until_ms = 0;
  std::optional<double> price_per_gpu_hour;  // USD
  std::vector<GpuReport> gpus;
  ClassHours fleet;                          // summed over the GPUs
  std::optional<double> fleet_util_avg_pct;
  std::optional<double> idle_cost;
  std::optional<double> holding_cost;
  std::vector<HeatDay> heat;
  std::vector<Consumer> users;       // most GPU-hours first (at most 10 each)
  std::vector<Consumer> commands;
  std::vector<Consumer> containers;
  std::vector<Consumer> slurm_jobs;
  std::vector<JobUse> jobs;          // every Slurm job that held a GPU, most held-idle GPU-hours first
  std::vector<IdleWindow> idle_windows;   // longest first, at most 10
  std::vector<HoldingIncident> holding;   // longest first, at most 20
  std::vector<HolderHours> holders;       // most hours first, every holding run counted
  std::size_t fault_events = 0;           // fault, lost, throttle-start events in the range
  Zombies zombies;
  BackfillWork backfill;
  std::vector<MigUse> mig;  // every MIG device recorded, by GPU and GPU instance
  double mig_idle_slice_hours = 0;   // summed: board-hours idle on MIG devices
  std::optional<double> mig_idle_cost;
};

struct ReportOptions {
  store::TimeRange range;
  std::optional<double> price_per_gpu_hour;
  std::vector<unsigned> gpus;  // empty: every GPU
};

// What the report is computed from: the store's rows for the range.
struct ReportInput {
  std::vector<store::GpuInfo> gpus;
  std::vector<store::ActivitySpan> activity;
  std::vector<store::Rollup> hours;
  std::vector<store::ProcessSpan> processes;
  std::vector<store::Event> events;
  std::vector<store::JobSpan> jobs;
  std::vector<store::MigSpan> mig;
};

// Pure: the report of `input` for `options`.
[[nodiscard]] Report compute(const ReportInput& input, const ReportOptions& options);

// Reads the input from the store and computes the report.
[[nodiscard]] Result<Report> build(store::Reader& reader, const ReportOptions& options);

// Renderings: the terminal's text, one self-contained HTML page (inline SVG, no external
// resources), and JSON (schema in docs/report.md).
[[nodiscard]] std::string render_text(const Report& report, bool color);
[[nodiscard]] std::string render_html(const Report& report);
[[nodiscard]] std::string render_json(const Report& report);
// The heat map as shaded characters, a line a day (text reports: this one and the fleet's).
[[nodiscard]] std::string render_heat_text(const std::vector<HeatDay>& heat);
// `tarmac report --by job`: every Slurm job that held a GPU, most held-idle GPU-hours first.
[[nodiscard]] std::string render_jobs_text(const Report& report, bool color);
[[nodiscard]] std::string render_jobs_json(const Report& report);

}  // namespace tarmac::report
