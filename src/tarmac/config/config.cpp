// The one translation unit of the product that includes toml++ (header-only).
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

#include "tarmac/config/config.hpp"
#include "tarmac/config/keys.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <unistd.h>

#include "tarmac/alerts/sinks.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/trusted_file.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::config {

namespace detail {

Key text_key(std::string_view section, std::string_view name, Kind kind, std::string_view doc,
             std::vector<std::string_view> choices, std::function<void(Config&, const std::string&)> set,
             std::function<std::string(const Config&)> get,
             std::function<std::optional<std::string>(const std::string&)> check) {
  Key k{{section, name, kind, doc}, 0,      0, nullptr, nullptr, std::move(set), std::move(get), std::move(choices),
        std::move(check)};
  return k;
}

bool is_text(const Key& k) {
  return k.info.kind == Kind::Path || k.info.kind == Kind::Choice || k.info.kind == Kind::Address ||
         k.info.kind == Kind::Text;
}

// A value as the file has it: a string quoted so that both TOML and JSON read it back, control
// characters (a "\u001b" written in the file) as \u escapes, so that `tarmac config` neither prints
// them raw nor writes what --json cannot parse; a number in its kind's unit.
std::string quoted_text(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F) {
      quoted += fmt::format("\\u{:04x}", byte);
      continue;
    }
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string number_text(Kind kind, long long v) {
  switch (kind) {
    case Kind::Duration: return fmt::format("\"{}\"", util::format_duration_ms(v));
    case Kind::Size: {
      const auto bytes = static_cast<std::uint64_t>(v);
      if (bytes % util::kGiB == 0) return fmt::format("\"{}GiB\"", bytes / util::kGiB);
      if (bytes % util::kMiB == 0) return fmt::format("\"{}MiB\"", bytes / util::kMiB);
      return fmt::format("\"{}KiB\"", bytes / 1024);
    }
    case Kind::Bool: return v != 0 ? "true" : "false";
    default: return std::to_string(v);
  }
}

}  // namespace detail

namespace {

using detail::is_text;
using detail::Key;
using detail::number_text;
using detail::quoted_text;
using detail::text_key;
using detail::find_server_key;
using detail::ServerKey;
using detail::check_server;
using detail::url_port;
using detail::valid_server_name;

// A configuration file is a few kilobytes; a larger one is a mistake or an attack.
constexpr std::size_t kMaxFileBytes = 1 << 20;

template <typename T, typename Part>
Key key(std::string_view section, std::string_view name, Kind kind, std::string_view doc, long long min,
        long long max, Part Config::*part, T Part::*member, long long scale = 1) {
  return Key{{section, name, kind, doc},
             min,
             max,
             [=](Config& c, long long v) { (c.*part).*member = static_cast<T>(v / scale); },
             [=](const Config& c) { return static_cast<long long>((c.*part).*member) * scale; },
             nullptr,
             nullptr,
             {},
             nullptr};
}

// A [reaper] key holding a comma-separated list.
Key list_key(std::string_view name, std::string_view doc, std::vector<std::string> reap::ReaperConfig::*member) {
  return text_key("reaper", name, Kind::Text, doc, {},
                  [member](Config& c, const std::string& v) { c.reaper.*member = reap::parse_list(v); },
                  [member](const Config& c) { return reap::list_text(c.reaper.*member); });
}

const std::vector<Key>& table() {
  using diagnose::DoctorThresholds;
  using gpu::ActivityThresholds;
  constexpr long long kDay = 86400LL * 1000;
  constexpr long long kTiB = 1LL << 40;
  constexpr long long kYear = 366 * kDay;
  using agent::AgentOptions;
  using store::Retention;
  using alerts::AlertConfig;
  using sched::SchedulerConfig;
  using reap::ReaperConfig;
  constexpr long long kAlertForMax = 30 * kDay;
  static const std::vector<Key> keys = {
      key("activity", "busy_util_pct", Kind::Percent,
          "GPU utilization at or above which a GPU is busy", 1, 100, &Config::activity,
          &ActivityThresholds::busy_util_pct),
      key("activity", "starved_mem_pct", Kind::Percent,
          "share of memory held by processes, below busy utilization, at or above which a GPU is starved", 1,
          100, &Config::activity, &ActivityThresholds::starved_mem_pct),
      key("activity", "holding_after", Kind::Duration,
          "how long processes must hold memory at 0 % before the GPU counts as holding", 0, 30 * kDay,
          &Config::activity, &ActivityThresholds::holding_after_s, 1000),
      key("doctor", "window", Kind::Duration, "how long doctor samples when --window is not given", 0, kDay,
          &Config::doctor, &DoctorThresholds::window_ms),
      key("doctor", "interval", Kind::Duration, "time between doctor's samples", 50, 60 * 1000, &Config::doctor,
          &DoctorThresholds::interval_ms),
      key("doctor", "sustain_pct", Kind::Percent,
          "share of the window a condition must hold without a break to be reported (brief spikes are not)", 1,
          100, &Config::doctor, &DoctorThresholds::sustain_pct),
      key("doctor", "thermal_c", Kind::Celsius, "GPU temperature at or above which doctor reports thermal", 40,
          120, &Config::doctor, &DoctorThresholds::thermal_c),
      key("doctor", "near_oom_pct", Kind::Percent, "memory used (of total) at or above which doctor reports near-oom",
          50, 100, &Config::doctor, &DoctorThresholds::near_oom_pct),
      key("doctor", "imbalance_pct", Kind::Percent,
          "spread of memory used across one job's GPUs, (max - min) / max, at or above which doctor reports "
          "memory-imbalance",
          1, 100, &Config::doctor, &DoctorThresholds::imbalance_pct),
      key("doctor", "imbalance_min", Kind::Size, "the least memory difference that counts as memory-imbalance", 0,
          kTiB, &Config::doctor, &DoctorThresholds::imbalance_min_bytes),
      key("doctor", "holding_min", Kind::Size, "the least memory held at 0 % that doctor reports as holding", 0,
          kTiB, &Config::doctor, &DoctorThresholds::holding_min_bytes),
      key("agent", "interval", Kind::Duration, "time between the agent's samples of every GPU's fast values", 100,
          60 * 1000, &Config::agent, &AgentOptions::interval_ms),
      key("agent", "process_interval", Kind::Duration,
          "time between the agent's reads of the processes on each GPU (with who runs them)", 100, 3600 * 1000,
          &Config::agent, &AgentOptions::process_interval_ms),
      key("agent", "slow_interval", Kind::Duration,
          "time between reads of the slow values (PCIe throughput, GPM); 0 turns them off", 0, 3600 * 1000,
          &Config::agent, &AgentOptions::slow_interval_ms),
      key("agent", "flush", Kind::Duration,
          "real time between writes to the store: the most a crash or kill -9 can lose", 100, 3600 * 1000,
          &Config::agent, &AgentOptions::flush_interval_ms),
      text_key("agent", "clock", Kind::Choice,
               "\"real\", or \"sim\" to stamp samples with the NVML simulator's clock (tarmac sim --speed)",
               {"real", "sim"},
               [](Config& c, const std::string& v) { c.agent_clock = v == "sim" ? AgentClock::Sim : AgentClock::Real; },
               [](const Config& c) { return std::string(c.agent_clock == AgentClock::Sim ? "sim" : "real"); }),
      text_key("agent", "state_dir", Kind::Path,
               "where the store (tarmac.db) lives; \"\" for /var/lib/tarmac (root) or $XDG_STATE_HOME/tarmac", {},
               [](Config& c, const std::string& v) { c.agent.state_dir = v; },
               [](const Config& c) { return c.agent.state_dir; }),
      key("retention", "samples", Kind::Duration,
          "how long raw samples (GPU, process, slow) are kept; 0 keeps them forever", 0, 10 * kYear,
          &Config::retention, &Retention::samples_ms),
      key("retention", "minutes", Kind::Duration, "how long the 1-minute rollups are kept; 0 keeps them forever", 0,
          10 * kYear, &Config::retention, &Retention::minutes_ms),
      key("retention", "hours", Kind::Duration,
          "how long the 1-hour rollups, activity spans and process spans are kept; 0 keeps them forever", 0,
          10 * kYear, &Config::retention, &Retention::hours_ms),
      key("retention", "events", Kind::Duration, "how long events are kept; 0 keeps them forever", 0, 10 * kYear,
          &Config::retention, &Retention::events_ms),
      text_key("http", "listen", Kind::Address,
               "where the agent serves /metrics, its API and its dashboard, as \"host:port\"; \"\" for nowhere", {},
               [](Config& c, const std::string& v) { c.http_listen = v; },
               [](const Config& c) { return c.http_listen; }),
      text_key("http", "web_config_file", Kind::Path,
               "TLS and basic-auth passwords for the endpoint, in the web.config.file format of Prometheus' "
               "exporters (docs/fleet.md); \"\" for plain HTTP",
               {}, [](Config& c, const std::string& v) { c.http.web_config_file = v; },
               [](const Config& c) { return c.http.web_config_file; }),
      key("http", "insecure", Kind::Bool,
          "serve on an address beyond loopback without TLS and authentication (refused otherwise)", 0, 1,
          &Config::http, &HttpSettings::insecure),
      key("http", "expose_command_lines", Kind::Bool,
          "on an address beyond loopback, show processes' whole command lines, not only their programs' names", 0, 1,
          &Config::http, &HttpSettings::expose_command_lines),
      text_key("http", "hostname_label", Kind::Choice,
               "the host label's name on DCGM_FI_* series: Hostname (dcgm-exporter's releases) or hostname",
               {"Hostname", "hostname"}, [](Config& c, const std::string& v) { c.http.hostname_label = v; },
               [](const Config& c) { return c.http.hostname_label; }),
      text_key("slurm", "job_map_dir", Kind::Path,
               "the HPC job mapping directory `tarmac slurm prolog` writes and the agent reads for hpc_job labels "
               "(dcgm-exporter's --hpc-job-mapping-dir format: one file per GPU index, one job id per line)",
               {}, [](Config& c, const std::string& v) { c.slurm.job_map_dir = v; },
               [](const Config& c) { return c.slurm.job_map_dir; }),
      key("slurm", "epilog_grace", Kind::Duration,
          "how long `tarmac slurm epilog` waits after SIGTERM before SIGKILL for the processes a job left on its GPUs",
          0, 60 * 1000, &Config::slurm, &SlurmSettings::epilog_grace_ms),
      key("alerts", "starvation_for", Kind::Duration,
          "how long a GPU must stay starved (as activity.busy_util_pct and activity.starved_mem_pct define it) before "
          "the starvation alert fires",
          0,
          kAlertForMax, &Config::alerts, &AlertConfig::starvation_for_ms),
      key("alerts", "idle_for", Kind::Duration,
          "how long a GPU must stay idle or reserved-idle before the idle alert fires", 0, kAlertForMax,
          &Config::alerts, &AlertConfig::idle_for_ms),
      key("alerts", "holding_for", Kind::Duration,
          "how long a GPU must stay in class holding (already activity.holding_after at 0 %) before the holding "
          "alert fires",
          0, kAlertForMax, &Config::alerts, &AlertConfig::holding_for_ms),
      key("alerts", "thermal_c", Kind::Celsius, "GPU temperature at or above which the thermal alert's condition holds",
          40, 120, &Config::alerts, &AlertConfig::thermal_c),
      key("alerts", "thermal_for", Kind::Duration,
          "how long the temperature (or a thermal clock slowdown) must last before the thermal alert fires", 0,
          kAlertForMax, &Config::alerts, &AlertConfig::thermal_for_ms),
      key("alerts", "near_oom_pct", Kind::Percent, "memory used (of total) at or above which a GPU is near OOM", 50,
          100, &Config::alerts, &AlertConfig::near_oom_pct),
      key("alerts", "near_oom_for", Kind::Duration, "how long a GPU must stay near OOM before the alert fires", 0,
          kAlertForMax, &Config::alerts, &AlertConfig::near_oom_for_ms),
      key("alerts", "imbalance_pct", Kind::Percent,
          "spread of utilization, in points, across one job's GPUs above which the job is imbalanced", 1, 100,
          &Config::alerts, &AlertConfig::imbalance_pct),
      key("alerts", "imbalance_for", Kind::Duration, "how long a job must stay imbalanced before the alert fires", 0,
          kAlertForMax, &Config::alerts, &AlertConfig::imbalance_for_ms),
      key("alerts", "fault_for", Kind::Duration, "how long a GPU must stay in class fault (or lost) before the alert fires",
          0, kAlertForMax, &Config::alerts, &AlertConfig::fault_for_ms),
      text_key("alerts", "disabled", Kind::Text,
               "rules turned off, comma-separated: starvation, idle, holding, thermal, near_oom, imbalance, fault", {},
               [](Config& c, const std::string& v) { c.alerts.disabled = alerts::parse_rule_list(v).value_or(std::vector<alerts::Rule>{}); },
               [](const Config& c) { return alerts::rule_list_text(c.alerts.disabled); },
               [](const std::string& v) -> std::optional<std::string> {
                 std::string bad;
                 if (alerts::parse_rule_list(v, &bad)) return std::nullopt;
                 return fmt::format("'{}' is not a rule (starvation, idle, holding, thermal, near_oom, imbalance, fault)",
                                    bad);
               }),
      text_key("alerts", "webhook", Kind::Text,
               "http[s]://host[:port]/path that gets each firing and resolved alert as JSON with a Slack-compatible "
               "text (a Slack, Teams or Discord webhook); \"\" for none",
               {}, [](Config& c, const std::string& v) { c.alerts.webhook = v; },
               [](const Config& c) { return c.alerts.webhook; },
               [](const std::string& v) -> std::optional<std::string> {
                 if (v.empty()) return std::nullopt;
                 auto url = alerts::check_webhook_url(v);
                 if (url.ok()) return std::nullopt;
                 return url.error().message;
               }),
      text_key("alerts", "webhook_ca", Kind::Path,
               "a PEM file of the certificate authorities an https webhook's certificate is checked against; \"\" "
               "for the system's",
               {}, [](Config& c, const std::string& v) { c.alerts.webhook_ca = v; },
               [](const Config& c) { return c.alerts.webhook_ca; }),
      text_key("alerts", "command", Kind::Text,
               "a command run for each firing and resolved alert, split on spaces and run without a shell, with the "
               "alert's JSON on stdin and TARMAC_ALERT_* in its environment; \"\" for none",
               {}, [](Config& c, const std::string& v) { c.alerts.command = v; },
               [](const Config& c) { return c.alerts.command; }),
      text_key("scheduler", "lock_dir", Kind::Path,
               "the directory of the per-GPU lease files that keep agentless pick and run race-free: root's and "
               "1777, or the caller's own (docs/scheduler.md); \"\" for /run/tarmac/locks",
               {}, [](Config& c, const std::string& v) { c.scheduler_lock_dir = v; },
               [](const Config& c) { return c.scheduler_lock_dir; }),
      text_key("scheduler", "socket", Kind::Path,
               "the agent's Unix socket for run, jobs, cancel, reserve, release and extend; \"\" for "
               "/run/tarmac/agent.sock (root) or $XDG_RUNTIME_DIR/tarmac/agent.sock; TARMAC_SOCKET overrides it",
               {}, [](Config& c, const std::string& v) { c.scheduler.socket = v; },
               [](const Config& c) { return c.scheduler.socket; }),
      key("scheduler", "backfill_idle", Kind::Duration,
          "how long a GPU must have been idle before it takes a --backfill job", 0, 30 * kDay, &Config::scheduler,
          &SchedulerConfig::backfill_idle_ms),
      key("scheduler", "fair_window", Kind::Duration,
          "the window of past GPU-hours that decides which user's waiting job goes first", 0, kYear,
          &Config::scheduler, &SchedulerConfig::fair_window_ms),
      key("scheduler", "user_gpu_cap", Kind::Count, "the most GPUs one user's jobs and leases may hold at once; 0 for no cap",
          0, 1 << 20, &Config::scheduler, &SchedulerConfig::user_gpu_cap),
      key("scheduler", "lease_idle_limit", Kind::Duration,
          "how long a lease (tarmac reserve) may sit unused before its owner is warned through the alert sinks", 1000,
          kYear, &Config::scheduler, &SchedulerConfig::lease_idle_limit_ms),
      key("scheduler", "lease_idle_grace", Kind::Duration,
          "how much longer an unused lease lives after the warning before it is reclaimed", 0, kYear,
          &Config::scheduler, &SchedulerConfig::lease_idle_grace_ms),
      key("scheduler", "connection_idle_timeout", Kind::Duration,
          "how long a connection to the agent's socket may go without a request (or without reading what it "
          "was sent) before it is closed; connections that follow a job are kept while they read",
          100, kDay, &Config::scheduler, &SchedulerConfig::connection_idle_timeout_ms),
      key("scheduler", "user_connection_cap", Kind::Count,
          "the most connections one user (root excepted) may hold open to the agent's socket; 0 for no cap", 0,
          1 << 20, &Config::scheduler, &SchedulerConfig::user_connection_cap),
      key("scheduler", "user_queued_cap", Kind::Count,
          "the most queued jobs one user (root excepted) may have; more are refused; 0 for no cap", 0, 1 << 24,
          &Config::scheduler, &SchedulerConfig::user_queued_cap),
      key("scheduler", "max_hold", Kind::Duration,
          "the longest a `tarmac pick --hold` lease holds GPUs: longer is refused, and every pick and the agent "
          "count another user's such lease as gone this long after it was written, whatever it names; 0 for no bound",
          0, kYear, &Config::scheduler, &SchedulerConfig::max_hold_ms),
      key("scheduler", "max_grace", Kind::Duration,
          "the longest --grace (SIGTERM to SIGKILL) a job may ask for; longer is refused; at least the default 10s",
          10 * 1000, 30 * kDay, &Config::scheduler, &SchedulerConfig::max_grace_ms),
      key("scheduler", "backfill_batches_per_user", Kind::Count,
          "the most unfinished backfill batches one user (root excepted) may have; each holds its output open; 0 for "
          "no cap",
          0, 1 << 20, &Config::scheduler, &SchedulerConfig::backfill_batches_per_user),
      key("scheduler", "backfill_store_per_user", Kind::Size,
          "the most request bodies one user's (root excepted) unfinished backfill batches may keep in the agent's "
          "store; 0 for no cap",
          0, kTiB, &Config::scheduler, &SchedulerConfig::backfill_store_per_user),
      key("scheduler", "backfill_store_total", Kind::Size,
          "the most request bodies all unfinished backfill batches together, root's too, may keep in the agent's "
          "store; 0 for no cap",
          0, kTiB, &Config::scheduler, &SchedulerConfig::backfill_store_total),
      key("scheduler", "backfill_input_per_minute", Kind::Size,
          "the most backfill input one user (root excepted) may hand the agent to parse per minute; 0 for no cap", 0,
          kTiB, &Config::scheduler, &SchedulerConfig::backfill_input_per_minute),
      key("reaper", "idle_for", Kind::Duration,
          "how long a process must hold GPU memory at 0 % before tarmac reap takes it for a candidate (--idle-for)",
          0, 30 * kDay, &Config::reaper, &ReaperConfig::idle_for_ms),
      key("reaper", "min_memory", Kind::Size, "the least GPU memory a candidate holds (--min-memory)", 0, kTiB,
          &Config::reaper, &ReaperConfig::min_memory_bytes),
      key("reaper", "grace", Kind::Duration, "time between SIGTERM and SIGKILL (--grace)", 0, 3600 * 1000,
          &Config::reaper, &ReaperConfig::grace_ms),
      key("reaper", "min_age", Kind::Duration, "a process younger than this is never a candidate", 0, 30 * kDay,
          &Config::reaper, &ReaperConfig::min_age_ms),
      key("reaper", "max_kills", Kind::Count, "the most holders one reap --kill ends; 0 ends none", 0, 1 << 20,
          &Config::reaper, &ReaperConfig::max_kills),
      text_key("reaper", "kill_switch", Kind::Path, "while this file exists, tarmac reap --kill ends nothing", {},
               [](Config& c, const std::string& v) { c.reaper.kill_switch = v.empty() ? ReaperConfig{}.kill_switch : v; },
               [](const Config& c) { return c.reaper.kill_switch; }),
      list_key("allow_users", "users whose processes are never reaped, comma-separated", &ReaperConfig::allow_users),
      list_key("allow_commands",
               "globs over a process's name or program (argv[0]'s base name) that are never reaped, comma-separated",
               &ReaperConfig::allow_commands),
      list_key("allow_containers",
               "containers whose processes are never reaped, comma-separated: a container id (or its prefix) or a pod uid",
               &ReaperConfig::allow_containers),
      key("reaper", "enabled", Kind::Bool,
          "the agent ends a holder idle for reaper.idle_for (false: it only warns; docs/reap.md \"As a service\")", 0, 1,
          &Config::reaper, &ReaperConfig::enabled),
      key("reaper", "warn_after", Kind::Duration,
          "how long a holder sits at 0 % before the agent warns its owner; less than reaper.idle_for", 0, 30 * kDay,
          &Config::reaper, &ReaperConfig::warn_after_ms),
      key("reaper", "notify_tty", Kind::Bool, "the agent's warning is also written on the holder's own terminal", 0, 1,
          &Config::reaper, &ReaperConfig::notify_tty),
      key("reaper", "interval", Kind::Duration, "the time between the agent's reaper passes; at least 10s", 10 * 1000,
          kDay, &Config::reaper, &ReaperConfig::interval_ms),
  };
  return keys;
}

// Keys an older tarmac read, with the key that now decides what they did.
struct RetiredKey {
  std::string_view section;
  std::string_view name;
  std::string_view instead;
};
constexpr RetiredKey kRetired[] = {
    // One definition of starved (gpu::is_starved): the alert follows the class.
    {"alerts", "starvation_util_pct", "activity.busy_util_pct"},
    {"alerts", "starvation_mem_pct", "activity.starved_mem_pct"},
};

const RetiredKey* find_retired(std::string_view section, std::string_view name) {
  for (const auto& r : kRetired) {
    if (r.section == section && r.name == name) return &r;
  }
  return nullptr;
}

const char* kind_example(Kind kind) {
  switch (kind) {
    case Kind::Percent: return "an integer percentage, like 30";
    case Kind::Celsius: return "an integer in degrees Celsius, like 85";
    case Kind::Count: return "a whole number, like 4";
    case Kind::Duration: return "a duration, like \"500ms\", \"3s\" or \"10m\" (or a number of seconds)";
    case Kind::Size: return "a size with its unit, like \"2GiB\" or \"512MiB\"";
    case Kind::Path: return "a path in quotes, like \"/var/lib/tarmac\"";
    case Kind::Choice: return "one of the listed words, in quotes";
    case Kind::Address: return "\"host:port\" in quotes, like \"127.0.0.1:9478\" or \"[::1]:9478\", or \"\"";
    case Kind::Text: return "a string in quotes";
    case Kind::Bool: return "true or false";
  }
  return "a value";
}

// The value of `node` in the key's unit, or why it cannot be.
Result<long long> read_value(const toml::node& node, const Key& k) {
  std::optional<long long> value;
  switch (k.info.kind) {
    case Kind::Percent:
    case Kind::Celsius:
    case Kind::Count:
      if (const auto* i = node.as_integer()) value = i->get();
      break;
    case Kind::Bool:
      if (const auto* b = node.as_boolean()) value = b->get() ? 1 : 0;
      break;
    case Kind::Duration:
      if (const auto* s = node.as_string()) {
        value = util::parse_duration_ms(s->get());
      } else if (const auto* i = node.as_integer()) {
        if (i->get() >= 0) value = i->get() * 1000;
      } else if (const auto* f = node.as_floating_point()) {
        value = util::parse_duration_ms(fmt::format("{}", f->get()));
      }
      break;
    case Kind::Path:
    case Kind::Choice:
    case Kind::Address:
    case Kind::Text: break;  // text keys: read_text
    case Kind::Size:
      if (const auto* s = node.as_string()) {
        const std::string text = s->get();
        // A bare number would be ambiguous (bytes? MiB?): sizes carry their unit.
        if (text.find_first_not_of("0123456789. ") != std::string::npos) {
          if (auto bytes = util::parse_size_bytes(text)) value = static_cast<long long>(*bytes);
        }
      }
      break;
  }
  if (!value) return make_error(Error::Code::Invalid, fmt::format("expected {}", kind_example(k.info.kind)));
  if (*value < k.min || *value > k.max) {
    const auto show = [&](long long v) {
      switch (k.info.kind) {
        case Kind::Duration: return util::format_duration_ms(v);
        case Kind::Size: return util::format_bytes(static_cast<std::uint64_t>(v));
        default: return std::to_string(v);
      }
    };
    return make_error(Error::Code::Invalid, fmt::format("{} is out of range ({} to {})", show(*value), show(k.min),
                                                        show(k.max)));
  }
  return *value;
}

// The value of a text key, or why it cannot be.
Result<std::string> read_text(const toml::node& node, const Key& k) {
  const auto* s = node.as_string();
  if (s == nullptr) {
    if (k.info.kind == Kind::Choice) {
      return make_error(Error::Code::Invalid, fmt::format("expected one of \"{}\"", fmt::join(k.choices, "\", \"")));
    }
    return make_error(Error::Code::Invalid, fmt::format("expected {}", kind_example(k.info.kind)));
  }
  std::string text = s->get();
  if (k.info.kind == Kind::Choice && std::find(k.choices.begin(), k.choices.end(), text) == k.choices.end()) {
    return make_error(Error::Code::Invalid,
                      fmt::format("'{}' is not one of \"{}\"", text, fmt::join(k.choices, "\", \"")));
  }
  if (k.info.kind == Kind::Path && !text.empty() && text.front() != '/') {
    return make_error(Error::Code::Invalid, fmt::format("'{}' is not an absolute path", text));
  }
  if (k.info.kind == Kind::Address && !text.empty() && !split_address(text)) {
    return make_error(Error::Code::Invalid,
                      fmt::format("'{}' is not host:port with a port from 1 to 65535", text));
  }
  if (k.check) {
    if (auto why = k.check(text)) return make_error(Error::Code::Invalid, *why);
  }
  return text;
}

const Key* find_key(std::string_view section, std::string_view name) {
  for (const auto& k : table()) {
    if (k.info.section == section && k.info.name == name) return &k;
  }
  return nullptr;
}

bool known_section(std::string_view section) {
  for (const auto& k : table()) {
    if (k.info.section == section) return true;
  }
  return false;
}

// Rules that tie two keys: the owner is warned before the holder is ended, never after. A
// warn_after nobody set follows a short idle_for (half of it) instead of refusing the file.
Result<void> check_reaper(reap::ReaperConfig& reaper, bool warn_after_set, const std::string& file) {
  if (reaper.warn_after_ms < reaper.idle_for_ms) return {};
  if (!warn_after_set) {
    reaper.warn_after_ms = reaper.idle_for_ms / 2;
    return {};
  }
  return make_error(Error::Code::Invalid,
                    fmt::format("{}: reaper.warn_after ({}) must be less than reaper.idle_for ({}): the owner is warned "
                                "before the agent ends the holder",
                                file, util::format_duration_ms(reaper.warn_after_ms),
                                util::format_duration_ms(reaper.idle_for_ms)));
}

// A managed server's `command`: a non-empty array of strings, its program an absolute path (the agent's
// PATH is not the user's, and no shell reads it).
Result<std::vector<std::string>> read_command(const toml::node& value, const std::string& file, const std::string& name) {
  const auto at = value.source().begin;
  const auto bad = [&](std::string_view why) {
    return make_error(Error::Code::Invalid,
                      fmt::format("{}:{}:{}: backfill.server.{}.command: {}", file, at.line, at.column, name, why));
  };
  const auto* array = value.as_array();
  if (array == nullptr || array->empty() || array->size() > 256) return bad("expected an array of 1 to 256 strings");
  std::vector<std::string> argv;
  for (const auto& word : *array) {
    const auto* text = word.as_string();
    if (text == nullptr || text->get().size() > 4096 || text->get().find('\0') != std::string::npos) {
      return bad("each word must be a string (at most 4096 bytes)");
    }
    argv.push_back(text->get());
  }
  if (argv.front().empty() || argv.front().front() != '/') return bad("the program (its first word) must be an absolute path");
  return argv;
}

// A server's `models`: an array of 1 to 1024 model names, each one word of printable ASCII not
// starting with '-' (what submit accepts as --model).
Result<std::vector<std::string>> read_models(const toml::node& value, const std::string& file, const std::string& name) {
  const auto at = value.source().begin;
  const auto bad = [&](std::string_view why) {
    return make_error(Error::Code::Invalid,
                      fmt::format("{}:{}:{}: backfill.server.{}.models: {}", file, at.line, at.column, name, why));
  };
  const auto* array = value.as_array();
  if (array == nullptr || array->empty() || array->size() > 1024) return bad("expected an array of 1 to 1024 strings");
  std::vector<std::string> models;
  for (const auto& word : *array) {
    const auto* text = word.as_string();
    const bool printable = text != nullptr && std::all_of(text->get().begin(), text->get().end(), [](char c) {
      return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
    });
    if (!printable || text->get().empty() || text->get().size() > 1024 || text->get().front() == '-') {
      return bad("each model must be a string of printable ASCII without spaces, not starting with '-'");
    }
    models.push_back(text->get());
  }
  return models;
}

// One [backfill.server.NAME] table over `server`; an error names the line, a warning an unknown key.
Result<void> parse_server(const toml::table& table, const std::string& file, const std::string& name,
                          backfill::ServerConfig& server, std::vector<std::pair<std::size_t, std::string>>& found) {
  for (const auto& [key, value] : table) {
    const auto at = value.source().begin;
    if (key.str() == "command") {
      TARMAC_TRY_ASSIGN(server.command, read_command(value, file, name));
      continue;
    }
    if (key.str() == "models") {
      TARMAC_TRY_ASSIGN(server.models, read_models(value, file, name));
      continue;
    }
    const ServerKey* k = find_server_key(key.str());
    if (k == nullptr) {
      found.emplace_back(key.source().begin.line, fmt::format("{}:{}: unknown key 'backfill.server.{}.{}' (ignored)",
                                                              file, key.source().begin.line, name, key.str()));
      continue;
    }
    const auto bad = [&](const Error& e) {
      return make_error(Error::Code::Invalid, fmt::format("{}:{}:{}: backfill.server.{}.{}: {}", file, at.line,
                                                          at.column, name, key.str(), e.message));
    };
    if (is_text(k->key)) {
      auto t = read_text(value, k->key);
      if (!t.ok()) return bad(t.error());
      k->set_text(server, *t);
    } else {
      auto v = read_value(value, k->key);
      if (!v.ok()) return bad(v.error());
      k->set(server, *v);
    }
  }
  return {};
}

// The [backfill] section: only server tables, each merged over the same server of an earlier file.
Result<void> parse_backfill(const toml::table& section, const std::string& file, backfill::BackfillConfig& out,
                            std::vector<std::pair<std::size_t, std::string>>& found) {
  for (const auto& [key, value] : section) {
    const auto line = key.source().begin.line;
    const auto* servers = value.as_table();
    if (key.str() != "server" || servers == nullptr) {
      found.emplace_back(line, fmt::format("{}:{}: unknown key 'backfill.{}' (ignored; servers are "
                                           "[backfill.server.NAME] tables)",
                                           file, line, key.str()));
      continue;
    }
    for (const auto& [name, table] : *servers) {
      const auto at = name.source().begin;
      const auto* t = table.as_table();
      if (t == nullptr || !valid_server_name(name.str())) {
        return make_error(Error::Code::Invalid,
                          fmt::format("{}:{}:{}: backfill.server.{}: a server is a [backfill.server.NAME] table, its "
                                      "NAME 1 to 64 letters, digits, - and _",
                                      file, at.line, at.column, name.str()));
      }
      const std::string server_name(name.str());
      backfill::ServerConfig& server = out.servers[server_name];
      TARMAC_TRY(parse_server(*t, file, server_name, server, found));
      TARMAC_TRY(check_server(server, fmt::format("{}:{}:{}: backfill.server.{}", file, at.line, at.column, server_name)));
      if (server.kind == backfill::ServerKind::External && server.server_user.empty() &&
          net::is_loopback_url(server.url) && url_port(server.url) > 1023) {
        found.emplace_back(at.line, fmt::format("{}:{}: backfill.server.{}: any local user who listens on port {} "
                                                "while the server is down gets the prompts sent to it: set "
                                                "server_user (docs/backfill.md \"Who the server is\")",
                                                file, at.line, server_name, url_port(server.url)));
      }
      if (server.kind == backfill::ServerKind::Managed && server.models.empty()) {
        found.emplace_back(at.line, fmt::format("{}:{}: backfill.server.{}: its account opens whatever model path "
                                                "a batch names: list the models meant for it (models = [...])",
                                                file, at.line, server_name));
      }
    }
  }
  return {};
}

}  // namespace

const std::vector<KeyInfo>& keys() {
  static const std::vector<KeyInfo> infos = [] {
    std::vector<KeyInfo> out;
    for (const auto& k : table()) out.push_back(k.info);
    return out;
  }();
  return infos;
}

std::string value_text(const Config& config, const KeyInfo& info) {
  const Key* k = find_key(info.section, info.name);
  if (k == nullptr) return "";
  return is_text(*k) ? quoted_text(k->get_text(config)) : number_text(info.kind, k->get(config));
}

Result<Config> parse(std::string_view text, const std::string& file, const Config& base,
                     std::vector<std::string>& warnings) {
  toml::parse_result parsed = toml::parse(text, file);
  if (!parsed) {
    const auto& err = parsed.error();
    return make_error(Error::Code::Invalid, fmt::format("{}:{}:{}: {}", file, err.source().begin.line,
                                                        err.source().begin.column, err.description()));
  }
  Config out = base;
  bool warn_after_set = base.reaper.warn_after_ms != reap::ReaperConfig{}.warn_after_ms;
  std::vector<std::pair<std::size_t, std::string>> found;  // by line: toml++ keeps keys sorted, not in file order
  for (const auto& [section, node] : parsed.table()) {
    const auto line = section.source().begin.line;
    const auto* sub = node.as_table();
    if (sub != nullptr && section.str() == "backfill") {
      TARMAC_TRY(parse_backfill(*sub, file, out.backfill, found));
      continue;
    }
    if (sub == nullptr || !known_section(section.str())) {
      found.emplace_back(line, fmt::format("{}:{}: unknown {} '{}' (ignored)", file, line, sub ? "section" : "key",
                                           section.str()));
      continue;
    }
    for (const auto& [name, value] : *sub) {
      const Key* k = find_key(section.str(), name.str());
      const auto at = name.source().begin;
      if (const RetiredKey* r = k == nullptr ? find_retired(section.str(), name.str()) : nullptr) {
        found.emplace_back(at.line, fmt::format("{}:{}: '{}.{}' is no longer read: {} decides it for the GPU class, "
                                                "the alert and doctor alike (ignored)",
                                                file, at.line, section.str(), name.str(), r->instead));
        continue;
      }
      if (k == nullptr) {
        found.emplace_back(at.line, fmt::format("{}:{}: unknown key '{}.{}' (ignored)", file, at.line, section.str(),
                                                name.str()));
        continue;
      }
      warn_after_set = warn_after_set || (section.str() == "reaper" && name.str() == "warn_after");
      const auto vat = value.source().begin;
      const auto bad = [&](const Error& e) {
        return make_error(Error::Code::Invalid, fmt::format("{}:{}:{}: {}.{}: {}", file, vat.line, vat.column,
                                                            section.str(), name.str(), e.message));
      };
      if (is_text(*k)) {
        auto t = read_text(value, *k);
        if (!t.ok()) return bad(t.error());
        k->set_text(out, *t);
        continue;
      }
      auto v = read_value(value, *k);
      if (!v.ok()) return bad(v.error());
      k->set(out, *v);
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [line, message] : found) warnings.push_back(std::move(message));
  TARMAC_TRY(check_reaper(out.reaper, warn_after_set, file));
  return out;
}

std::optional<std::pair<std::string, unsigned>> split_address(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string host(text.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || host.find_first_of(" /[]") != std::string::npos) return std::nullopt;
  const auto port = util::parse_int(text.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) return std::nullopt;
  return std::make_pair(host, static_cast<unsigned>(*port));
}

std::string state_dir(const Config& config) {
  if (!config.agent.state_dir.empty()) return config.agent.state_dir;
  if (const char* sd = std::getenv("STATE_DIRECTORY"); sd != nullptr && *sd == '/') {
    std::string first(sd);
    return first.substr(0, first.find(':'));  // systemd lists several, separated by ':'
  }
  if (geteuid() == 0) return "/var/lib/tarmac";
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg != nullptr && *xdg == '/') {
    return std::string(xdg) + "/tarmac";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    return std::string(home) + "/.local/state/tarmac";
  }
  return "/var/lib/tarmac";
}

std::vector<std::string> default_files() {
  std::vector<std::string> candidates = {"/etc/tarmac/tarmac.toml"};
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg == '/') {
    candidates.push_back(std::string(xdg) + "/tarmac/tarmac.toml");
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    candidates.push_back(std::string(home) + "/.config/tarmac/tarmac.toml");
  }
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& c : candidates) {
    if (std::filesystem::is_regular_file(c, ec)) out.push_back(std::move(c));
  }
  return out;
}

Result<Loaded> load(const std::optional<std::string>& explicit_file) {
  Loaded loaded;
  loaded.files = explicit_file ? std::vector<std::string>{*explicit_file} : default_files();
  // Root (the agent, whose alerts.command it runs) must not take orders from a file a user can
  // change: `sudo -E` hands it the user's XDG_CONFIG_HOME.
  const bool as_root = geteuid() == 0;
  for (const auto& file : loaded.files) {
    auto text = util::read_trusted_file(file, as_root ? util::Writers::OwnerOnly : util::Writers::Anyone, 0,
                                        kMaxFileBytes);
    if (!text.ok()) {
      if (text.error().code == Error::Code::Invalid) {
        return make_error(Error::Code::Invalid,
                          fmt::format("refusing the configuration file {}; as root, tarmac reads only configuration "
                                      "that no one but root can change (sudo -E passes on a user's XDG_CONFIG_HOME: "
                                      "use sudo without -E, or --config)",
                                      text.error().message));
      }
      return make_error(Error::Code::NotFound,
                        fmt::format("cannot read the configuration file {}", text.error().message));
    }
    TARMAC_TRY_ASSIGN(loaded.config, parse(*text, file, loaded.config, loaded.warnings));
  }
  return loaded;
}

}  // namespace tarmac::config
