// `tarmac fleet` (docs/fleet.md): one row per node and GPU of a whole fleet, from a Prometheus that
// scrapes the agents or straight from the agents' JSON APIs, with the grounded GPUs first. Pure:
// the rows are built from the answers' text, sorted and rendered here, and tested on fixed
// answers; sources.cpp asks for them.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::fleet {

struct Row {
  std::string host;
  unsigned gpu = 0;
  std::string uuid;
  std::string model;
  std::optional<gpu::Activity> activity;  // nullopt: the source had no class for it
  std::optional<double> util_pct;
  std::optional<double> mem_used_mib;
  std::optional<double> mem_total_mib;
  std::optional<double> idle_seconds;  // idle or reserved-idle without a break, for this long
  std::set<std::string> users;         // of the processes on it
  std::set<std::string> jobs;          // Slurm jobs (the HPC job mapping)
  std::set<std::string> pods;          // "NAMESPACE/NAME", the kubelet's allocations
};

struct Fleet {
  std::string source;                  // "Prometheus URL", or "agents"
  std::vector<Row> rows;
  std::vector<std::string> problems;   // what did not answer (an agent, a target Prometheus has down)
};

// Grounded first: holding, reserved-idle, idle, then fault, starved, busy, unknown; the longest
// idle first within a class; then by host and GPU.
void sort_grounded_first(std::vector<Row>& rows);

// One agent's rows from its /api/v1/gpus and /api/v1/processes answers; the host is the agent's
// own name (its "hostname"), else `address`.
[[nodiscard]] Result<std::vector<Row>> rows_from_agent(std::string_view gpus_json, std::string_view processes_json,
                                                       const std::string& address);

// The instant queries asked of Prometheus, and their answers' text. Each keeps only the labels it
// is read for (and one series per GPU where jobs or pods split one): a third of the bytes to encode,
// send and parse at a thousand nodes.
struct PromQueries {
  static constexpr const char* kActivity = "max by (instance, uuid, gpu, hostname, class) (tarmac_gpu_activity == 1)";
  static constexpr const char* kUtil = "max by (instance, UUID, modelName) (DCGM_FI_DEV_GPU_UTIL)";
  static constexpr const char* kUsed = "max by (instance, UUID) (DCGM_FI_DEV_FB_USED)";
  static constexpr const char* kFree = "max by (instance, UUID) (DCGM_FI_DEV_FB_FREE)";
  static constexpr const char* kIdle = "max by (instance, uuid) (tarmac_gpu_idle_seconds > 0)";
  static constexpr const char* kJobs = "count by (instance, uuid, slurm_job) (tarmac_gpu_job_info)";
  static constexpr const char* kPods = "count by (instance, uuid, pod, namespace) (tarmac_gpu_pod_info)";
  static constexpr const char* kUsers = "count by (instance, uuid, user) (tarmac_process_info)";
  // Down targets of the scrape jobs that have agents (not every exporter Prometheus scrapes), told
  // by the agents' one series each (not their GPUs' six).
  static constexpr const char* kDown = "up == 0 and on (job) count by (job) (tarmac_agent_samples_total)";
  static constexpr const char* kAll[] = {kActivity, kUtil, kUsed, kFree, kIdle, kJobs, kPods, kUsers, kDown};
};
using PromAnswers = std::vector<std::string>;  // in PromQueries::kAll's order

// The fleet from Prometheus' answers: a row per GPU with a tarmac_gpu_activity series (an agent's),
// joined with the others by scrape target (instance) and UUID.
[[nodiscard]] Result<Fleet> fleet_from_prometheus(const PromAnswers& answers);

// "12 GPUs on 3 hosts: 5 grounded (...)" and the table, for a terminal.
[[nodiscard]] std::string render_text(const Fleet& fleet);
[[nodiscard]] std::string render_json(const Fleet& fleet);

}  // namespace tarmac::fleet
