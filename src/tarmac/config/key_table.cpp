// The fixed sections' keys of tarmac.toml: each key's section, name, kind, documentation, bounds and
// where it lives in Config (docs/configuration.md lists them). config.cpp reads and writes the file
// through this table; backfill_servers.cpp has the [backfill.server.NAME] keys.
#include <fmt/format.h>
#include <functional>

#include "tarmac/config/config.hpp"
#include "tarmac/config/keys.hpp"
#include "tarmac/alerts/sinks.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::config::detail {

namespace {

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

}  // namespace

const std::vector<Key>& fixed_table() {
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
      text_key("http", "hostname", Kind::Text,
               "the host label's value on the agent's series and API, \"\" for the machine's name; the environment "
               "variable TARMAC_HOSTNAME overrides it (a Kubernetes pod's own name is not its node's: docs/kubernetes.md)",
               {}, [](Config& c, const std::string& v) { c.http.hostname = v; },
               [](const Config& c) { return c.http.hostname; }),
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
      text_key("slurm", "idle_job_action", Kind::Choice,
               "what the agent does about a Slurm job whose GPUs all sit idle (idle, reserved-idle or holding): off, "
               "notify (the alert sinks, after idle_job_warn_after) or cancel (also scancel after "
               "idle_job_cancel_after)",
               {"off", "notify", "cancel"}, [](Config& c, const std::string& v) { c.slurm.idle_job_action = v; },
               [](const Config& c) { return c.slurm.idle_job_action; }),
      key("slurm", "idle_job_warn_after", Kind::Duration,
          "how long a Slurm job's GPUs must all sit idle before the agent warns (slurm.idle_job_action)", 1000,
          30LL * 86400 * 1000, &Config::slurm, &SlurmSettings::idle_job_warn_after_ms),
      key("slurm", "idle_job_cancel_after", Kind::Duration,
          "how long a Slurm job's GPUs must all sit idle before the agent cancels it (idle_job_action = \"cancel\"; "
          "longer than idle_job_warn_after)",
          1000, 30LL * 86400 * 1000, &Config::slurm, &SlurmSettings::idle_job_cancel_after_ms),
      key("slurm", "idle_job_cancel_interactive", Kind::Bool,
          "also cancel interactive jobs (salloc, srun --pty), whose users may be at the keyboard; they are only warned "
          "otherwise",
          0, 1, &Config::slurm, &SlurmSettings::idle_job_cancel_interactive),
      text_key("kubernetes", "pod_resources_socket", Kind::Path,
               "the kubelet's pod-resources socket the agent asks which pods the GPUs are allocated to (pod, "
               "namespace and container labels; reserved-idle pods), or \"\" for none",
               {}, [](Config& c, const std::string& v) { c.kubernetes.pod_resources_socket = v; },
               [](const Config& c) { return c.kubernetes.pod_resources_socket; }),
      key("kubernetes", "refresh", Kind::Duration, "how often the agent asks the kubelet for the pods' GPUs", 1000,
          10 * 60 * 1000, &Config::kubernetes, &KubernetesSettings::refresh_ms),
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

}  // namespace tarmac::config::detail
