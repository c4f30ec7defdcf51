// Alert rules (PRODUCT.md §7, docs/alerts.md): what each rule watches, its thresholds and `for`
// durations (configuration, [alerts] in docs/configuration.md), and the Evaluator, the state
// machine that turns a stream of snapshots into "firing" and "resolved" notices.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"

namespace tarmac::alerts {

// LeaseIdle is not evaluated here: the agent's scheduler raises it for a lease nobody uses
// (docs/scheduler.md), and it goes out through the same sinks (Alerter::announce). Reaper is
// likewise the agent's reaper's: a holder warned about (firing) or acted on (resolved; docs/reap.md).
enum class Rule { Starvation, Idle, Holding, Thermal, NearOom, Imbalance, Fault, LeaseIdle, Reaper, SlurmIdleJob };

inline constexpr std::array<Rule, 7> kRules = {Rule::Starvation, Rule::Idle,      Rule::Holding, Rule::Thermal,
                                               Rule::NearOom,    Rule::Imbalance, Rule::Fault};

enum class Severity { Info, Warning, Critical };

// "starvation", "idle", "holding", "thermal", "near_oom", "imbalance", "fault": the names used in
// the configuration (alerts.disabled), the JSON and the log.
[[nodiscard]] const char* to_string(Rule rule);
[[nodiscard]] std::optional<Rule> rule_from_name(std::string_view name);
[[nodiscard]] const char* to_string(Severity severity);
// The fixed severity of each rule (docs/alerts.md).
[[nodiscard]] Severity severity_of(Rule rule);

// Every rule's thresholds and `for` duration, with the documented defaults. Durations in
// milliseconds; a condition must hold without a break for its rule's `for` before it fires.
struct AlertConfig {
  // starvation: gpu::is_starved with the [activity] thresholds (the class's own definition), and
  // the GPU not in class holding or fault.
  long long starvation_for_ms = 10 * 60 * 1000;
  // idle: activity class idle or reserved-idle.
  long long idle_for_ms = 60 * 60 * 1000;
  // holding: activity class holding (which itself needs activity.holding_after at 0 %).
  long long holding_for_ms = 0;
  // thermal: temperature >= thermal_c, or a thermal slowdown clock-event reason.
  unsigned thermal_c = 85;
  long long thermal_for_ms = 60 * 1000;
  // near_oom: memory used >= near_oom_pct of total.
  unsigned near_oom_pct = 98;  // training with a caching allocator routinely holds 95 % (a100x4-balanced)
  long long near_oom_for_ms = 60 * 1000;
  // imbalance: one job's GPUs differ in utilization by more than imbalance_pct points.
  unsigned imbalance_pct = 40;
  long long imbalance_for_ms = 5 * 60 * 1000;
  // fault: activity class fault, or the GPU is lost.
  long long fault_for_ms = 0;
  // Rules turned off (alerts.disabled = "idle,thermal").
  std::vector<Rule> disabled;
  // Sinks besides the log: "http[s]://host[:port]/path" ("" for none) and a command line ("" for none).
  std::string webhook;
  std::string webhook_ca;  // a PEM file of the CAs the webhook's certificate is checked against; "": the system's
  std::string command;

  [[nodiscard]] bool enabled(Rule rule) const;
  [[nodiscard]] long long for_ms(Rule rule) const;
  // The longest `for` of the enabled rules.
  [[nodiscard]] long long longest_for_ms() const;
};

// "idle,thermal" as rules; fails naming the first word that is not a rule.
[[nodiscard]] std::optional<std::vector<Rule>> parse_rule_list(std::string_view text, std::string* bad = nullptr);
// The inverse of parse_rule_list.
[[nodiscard]] std::string rule_list_text(const std::vector<Rule>& rules);

// One alert: a rule whose condition holds for one GPU or one job.
struct Alert {
  Rule rule = Rule::Fault;
  Severity severity = Severity::Warning;
  std::string key;                 // "gpu:3" or "job:<job>": what the alert is about
  std::optional<unsigned> gpu;     // the GPU's index (the first of a job's GPUs for imbalance)
  std::string uuid;                // the GPU's UUID when known
  std::vector<unsigned> gpus;      // every GPU the alert covers (one, or a job's)
  std::optional<unsigned> pid;     // the process it is about, when one is
  std::string user;
  std::string command;
  std::string job;                 // the job key (imbalance), else ""
  long long since_ms = 0;          // when the condition started holding
  std::string summary;             // one line for people
};

// The alert's summary with its process's command cut to the program's name ("python3 (bob, pid
// 7) holds ..."), for readers beyond the host (http.expose_command_lines).
[[nodiscard]] std::string summary_without_arguments(const Alert& alert);

// A change worth telling someone about.
struct Notice {
  enum class Kind { Firing, Resolved };
  Kind kind = Kind::Firing;
  Alert alert;
  long long ts_ms = 0;  // when it fired or resolved

  // "FIRING [warning] holding: GPU 3 ..." or "RESOLVED holding: GPU 3 ... (after 25m)".
  [[nodiscard]] std::string text() const;
};

[[nodiscard]] const char* to_string(Notice::Kind kind);

// The job a GPU process belongs to: its Slurm job, else its container, else its user and command
// line with digits blurred (so the ranks of one torchrun, "--local-rank 0" and "--local-rank 1",
// are one job). "" when nothing identifies it.
[[nodiscard]] std::string job_key(const host::ProcessInfo& process);

// The per-(rule, key) state machine: a condition that starts is pending; once it has held for
// its rule's `for` it fires, announced once; when it clears, a Resolved notice (only for one that
// fired). Feed it every sample in time order.
class Evaluator {
 public:
  // `activity`: the class thresholds ([activity]), which also say what starved is.
  Evaluator(AlertConfig config, gpu::ActivityThresholds activity);

  // Evaluates every rule on `merged` (each device with its latest values and processes) and its
  // activity classes by GPU index, at `ts_ms`; returns what fired or resolved now.
  [[nodiscard]] std::vector<Notice> observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes,
                                            long long ts_ms);
  // The alerts firing now, by rule then key.
  [[nodiscard]] std::vector<Alert> firing() const;
  [[nodiscard]] const AlertConfig& config() const { return config_; }

 private:
  struct State {
    long long since_ms = 0;
    bool firing = false;
    Alert alert;
  };
  // The alerts whose condition holds at one sample, by rule and key.
  using AlertsNow = std::map<std::pair<Rule, std::string>, Alert>;

  // Notes since when a GPU's processes have sat at 0 % (the holding alert's time).
  void track_zero_utilization(const gpu::Device& device, long long ts_ms);
  // Moves each rule and key on: pending from its first sample, firing after the rule's `for`,
  // resolved (when it fired) at the first sample it no longer holds.
  [[nodiscard]] std::vector<Notice> advance(AlertsNow now, long long ts_ms);

  AlertConfig config_;
  gpu::ActivityThresholds activity_;
  std::map<std::pair<Rule, std::string>, State> states_;
  std::map<unsigned, long long> zero_since_ms_;  // by GPU: processes present at 0 % since
};

}  // namespace tarmac::alerts
