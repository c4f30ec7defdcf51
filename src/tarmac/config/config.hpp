// tarmac's configuration (PRODUCT.md §10): TOML at /etc/tarmac/tarmac.toml, then
// $XDG_CONFIG_HOME/tarmac/tarmac.toml (each key of the later file overrides the earlier), or the
// one file `--config` names. Every key has a documented default (docs/configuration.md); an
// unknown key is a warning that names its line, a bad value an error that names its line.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tarmac/agent/agent.hpp"
#include "tarmac/alerts/rules.hpp"
#include "tarmac/backfill/settings.hpp"
#include "tarmac/sched/settings.hpp"
#include "tarmac/diagnose/doctor.hpp"
#include "tarmac/gpu/activity.hpp"
#include "tarmac/reap/rules.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::config {

// Which clock the agent stamps its samples with.
enum class AgentClock { Real, Sim };

// Slurm's prolog and epilog (docs/slurm.md).
struct SlurmSettings {
  std::string job_map_dir = "/run/tarmac/hpc-jobs";  // the HPC job mapping directory, dcgm-exporter's format
  long long epilog_grace_ms = 3000;                   // SIGTERM to SIGKILL for what a job left behind
  std::string idle_job_action = "off";                // off, notify, cancel (docs/slurm.md)
  long long idle_job_warn_after_ms = 60LL * 60 * 1000;
  long long idle_job_cancel_after_ms = 4LL * 60 * 60 * 1000;
  bool idle_job_cancel_interactive = false;
};

// Kubernetes (docs/kubernetes.md): where the kubelet says which pods it allocated the GPUs to.
struct KubernetesSettings {
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";  // "" for none
  long long refresh_ms = 5000;  // between two questions to the kubelet
};

// The endpoint beyond http.listen (docs/fleet.md "Scraping across the network").
struct HttpSettings {
  std::string web_config_file;        // TLS and passwords, in Prometheus exporters' format; "" for none
  bool insecure = false;              // serve beyond loopback without TLS and authentication
  bool expose_command_lines = false;  // beyond loopback, whole command lines rather than programs' names
  std::string hostname_label = "Hostname";  // the host label's name on DCGM_FI_* series
  std::string hostname;  // the host label's value; "" for the machine's name (TARMAC_HOSTNAME overrides both)
};

struct Config {
  gpu::ActivityThresholds activity;
  diagnose::DoctorThresholds doctor;
  // The agent's cadences and state directory (its thresholds come from `activity`, its retention
  // from `retention`).
  agent::AgentOptions agent;
  AgentClock agent_clock = AgentClock::Real;
  store::Retention retention;
  // The agent's HTTP endpoint (docs/metrics.md): "host:port", or "" for none.
  std::string http_listen = "127.0.0.1:9478";
  HttpSettings http;
  SlurmSettings slurm;
  KubernetesSettings kubernetes;
  // The agent's alert rules and sinks (docs/alerts.md); also `tarmac alerts`.
  alerts::AlertConfig alerts;
  // The agentless scheduler's lock directory (docs/scheduler.md); "" for /run/tarmac/locks.
  std::string scheduler_lock_dir;
  // The agent's scheduler: socket, backfill, fairness, caps, idle leases (docs/scheduler.md).
  sched::SchedulerConfig scheduler;
  // `tarmac reap`'s rules and defaults (docs/reap.md).
  reap::ReaperConfig reaper;
  // The LLM servers batches are sent to, [backfill.server.NAME] (docs/backfill.md).
  backfill::BackfillConfig backfill;
};

// The kinds of value a key takes, as written in the file.
enum class Kind {
  Percent,   // integer 0-100
  Celsius,   // integer
  Count,     // a whole number
  Duration,  // "500ms", "3s", "10m", or a number of seconds
  Size,      // "2GiB", "512MiB"
  Path,      // a string: a file or directory; "" for the default
  Choice,    // one of a few words
  Address,   // "host:port" to listen on, "" for none
  Text,      // any string (a URL, a command line)
  Bool,      // true or false
};

// One documented key: "section.name".
struct KeyInfo {
  std::string_view section;
  std::string_view name;
  Kind kind;
  std::string_view doc;  // one sentence
};

// Every key, in documentation order.
[[nodiscard]] const std::vector<KeyInfo>& keys();

// A key's value in `config`, written as it would be in the file ("30", "\"10m\"", "\"2GiB\"").
[[nodiscard]] std::string value_text(const Config& config, const KeyInfo& key);

// The keys of each [backfill.server.NAME] table (their section is "backfill.server.NAME"), in
// documentation order, and one of them's value in `server`, written as in the file.
[[nodiscard]] const std::vector<KeyInfo>& server_keys();
[[nodiscard]] std::string server_value_text(const backfill::ServerConfig& server, const KeyInfo& key);
// Whether `key` says something of `server` as written back (`tarmac config`): an external server
// has no managed keys, a managed one no url, and command, preset and binary only when set; what is
// written back then reads back the same.
[[nodiscard]] bool server_key_applies(const backfill::ServerConfig& server, const KeyInfo& key);

// "127.0.0.1:9478" -> ("127.0.0.1", 9478); "[::1]:80" -> ("::1", 80); nullopt when it is not host:port.
[[nodiscard]] std::optional<std::pair<std::string, unsigned>> split_address(std::string_view text);

// The agent's state directory: agent.state_dir when set, else $STATE_DIRECTORY (systemd's
// StateDirectory=), else /var/lib/tarmac for root, else $XDG_STATE_HOME/tarmac (~/.local/state/tarmac).
[[nodiscard]] std::string state_dir(const Config& config);

// Applies the keys of TOML `text` (from `file`, for messages) over `base`. Unknown keys and
// sections append "file:line: ..." to `warnings`; a syntax error or a bad value fails with
// "file:line:column: ..." and changes nothing.
[[nodiscard]] Result<Config> parse(std::string_view text, const std::string& file, const Config& base,
                                   std::vector<std::string>& warnings);

// The files read when no --config is given, in order: those that exist of /etc/tarmac/tarmac.toml
// and $XDG_CONFIG_HOME/tarmac/tarmac.toml (~/.config when XDG_CONFIG_HOME is unset).
[[nodiscard]] std::vector<std::string> default_files();

struct Loaded {
  Config config;
  std::vector<std::string> files;     // read, in order
  std::vector<std::string> warnings;  // "file:line: unknown key ..."
};

// Loads `explicit_file` (which must exist) or else the default files over the defaults. As root,
// each file, and every directory above it, must be one only root can change
// (util::read_trusted_file); any other is refused with an error naming it and why.
[[nodiscard]] Result<Loaded> load(const std::optional<std::string>& explicit_file);

}  // namespace tarmac::config
