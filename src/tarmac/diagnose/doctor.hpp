// `tarmac doctor`'s diagnosis (PRODUCT.md §6): findings with a stable code, a severity, the
// evidence per GPU, likely causes and concrete fixes, computed from snapshots sampled over a
// window plus what the environment says. Pure: the caller samples and reads the environment.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tarmac/diagnose/verdicts.hpp"
#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"
#include "tarmac/host/process_info.hpp"

namespace tarmac::diagnose {

// Doctor's thresholds: configuration ([doctor] in tarmac.toml) with these documented defaults
// (docs/doctor.md, docs/configuration.md).
struct DoctorThresholds {
  long long window_ms = 3000;          // how long to sample
  long long interval_ms = 500;         // between samples
  unsigned sustain_pct = 30;           // a condition must hold for this share of the window, consecutively
  unsigned thermal_c = 85;             // at or above: thermal
  unsigned near_oom_pct = 98;          // memory used of total, at or above: near-oom
  unsigned imbalance_pct = 20;         // (max - min) / max memory used across a job's GPUs, at or above
  std::uint64_t imbalance_min_bytes = 2ULL << 30;  // ... and at least this many bytes apart
  std::uint64_t holding_min_bytes = 1ULL << 30;    // memory held at 0 % that counts as holding
};

// What doctor saw of the environment it runs in (and a job started here would inherit).
struct Environment {
  std::optional<std::string> cuda_visible_devices;
  std::optional<std::string> nvidia_visible_devices;
  std::optional<std::string> cuda_device_order;
  std::optional<std::string> cuda_launch_blocking;
  std::vector<std::pair<std::string, std::string>> nccl;  // every NCCL_* variable, sorted by name
  std::optional<host::ContainerRef> container;            // of doctor itself
  bool in_container = false;                              // cgroup or /.dockerenv or /run/.containerenv
  std::vector<std::string> device_nodes;                  // /dev/nvidia* present
};

// The job under inspection (`--pid`): a process and its descendants.
struct JobScope {
  unsigned root_pid = 0;
  std::vector<unsigned> pids;  // root first
};

// One value of the evidence: numbers stay numbers in JSON, units are in the key.
using EvidenceValue = std::variant<long long, double, std::string, bool>;

struct GpuEvidence {
  unsigned gpu = 0;
  std::map<std::string, EvidenceValue> values;
};

struct Finding {
  std::string code;  // stable: docs/doctor.md
  Severity severity = Severity::Info;
  std::string summary;                   // one line for people
  std::vector<unsigned> gpus;            // the GPUs concerned, ascending
  std::vector<GpuEvidence> evidence;     // numbers per GPU
  std::vector<std::string> facts;        // other evidence, one line each
  std::vector<std::string> causes;       // likely causes
  std::vector<std::string> fixes;        // concrete changes, naming the tools people use
};

// Per-GPU statistics over the window.
struct GpuSummary {
  unsigned index = 0;
  std::optional<std::string> name;
  std::optional<gpu::Activity> activity;  // class in the last sample
  std::optional<double> util_median_pct;
  std::optional<unsigned> util_max_pct;
  std::optional<unsigned> temp_max_c;
  std::optional<std::uint64_t> mem_used_median_bytes;
  std::optional<std::uint64_t> mem_total_bytes;
  unsigned processes = 0;  // distinct PIDs seen during the window
  bool lost = false;
};

struct Diagnosis {
  std::vector<Finding> findings;  // critical first, then warning, then info; code order within
  std::vector<GpuSummary> gpus;
  std::vector<unsigned> job_gpus;  // with a JobScope: the GPUs its processes use
};

struct DoctorInput {
  std::vector<gpu::Snapshot> samples;  // in time order; at least one
  std::optional<gpu::Topology> topology;
  Environment environment;
  std::optional<JobScope> job;           // --pid
  std::optional<unsigned> expect_gpus;   // --expect-gpus: for the job, or the machine without --pid
  gpu::ActivityThresholds activity;
  DoctorThresholds thresholds;
};

// The diagnosis of a window of samples.
[[nodiscard]] Diagnosis diagnose(const DoctorInput& input);

// The finding when GPUs could not be looked at at all: NVML missing or failing (`error` says how).
[[nodiscard]] Finding no_gpus_visible(const std::string& error, const Environment& environment);

// The exit code a diagnosis deserves: 0 healthy (info only), 1 warnings, 2 a critical finding.
[[nodiscard]] int exit_code_for(const std::vector<Finding>& findings);

// Every code doctor can report, in documentation order (docs/doctor.md has a section per code).
[[nodiscard]] const std::vector<std::string>& finding_codes();

}  // namespace tarmac::diagnose
