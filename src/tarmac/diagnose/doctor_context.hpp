// Internal to diagnose/: the window of samples as doctor's checks see it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tarmac/diagnose/doctor.hpp"

namespace tarmac::diagnose::detail {

// A group of GPU processes that belong together: the --pid tree, or processes grouped by Slurm
// job, container, or parent and command line (torchrun's workers share both).
struct JobView {
  std::string label;
  std::set<unsigned> pids;
  std::map<unsigned, std::set<unsigned>> pids_by_gpu;        // GPU index -> the job's PIDs seen on it
  std::map<unsigned, std::uint64_t> mem_median_by_gpu;       // the job's memory on each GPU, median
  [[nodiscard]] std::vector<unsigned> gpus() const;
};

class Context {
 public:
  explicit Context(const DoctorInput& input);

  const DoctorInput& in;
  std::vector<unsigned> indices;  // GPU indices, ascending (from the last sample)
  std::size_t need = 1;           // consecutive samples that make a condition sustained
  std::vector<JobView> jobs;      // multi-process or multi-GPU groups (without --pid), or the --pid job
  bool scoped = false;            // jobs holds exactly the --pid job

  [[nodiscard]] std::size_t samples() const { return in.samples.size(); }
  [[nodiscard]] const gpu::Device* device(std::size_t sample, unsigned index) const;
  [[nodiscard]] const gpu::Device* last(unsigned index) const { return device(samples() - 1, index); }
  // Whether `pred` holds on `index` for at least `need` consecutive samples.
  [[nodiscard]] bool sustained(unsigned index, const std::function<bool(const gpu::Device&)>& pred) const;
  // The median of a value over the samples where it is present.
  [[nodiscard]] std::optional<double> median(unsigned index,
                                             const std::function<std::optional<double>(const gpu::Device&)>& get) const;
  [[nodiscard]] std::optional<unsigned> max(unsigned index,
                                            const std::function<std::optional<unsigned>(const gpu::Device&)>& get) const;
  // Distinct processes seen on the GPU during the window (the last sample's facts for each PID).
  [[nodiscard]] std::vector<const gpu::GpuProcess*> processes(unsigned index) const;

 private:
  std::vector<std::map<unsigned, const gpu::Device*>> by_index_;
};

// Per-sample conditions shared by several checks.
[[nodiscard]] bool is_busy(const gpu::Device& d, const DoctorInput& in);
[[nodiscard]] bool is_empty(const gpu::Device& d, const DoctorInput& in);  // no process, not busy
[[nodiscard]] std::uint64_t process_memory(const gpu::Device& d);

// Text and evidence helpers.
[[nodiscard]] std::string gpus_text(const std::vector<unsigned>& gpus);  // "GPU 2", "GPUs 0-3"
[[nodiscard]] double pct(std::uint64_t part, std::uint64_t whole);
[[nodiscard]] long long now_s(const Context& c);  // the last sample's time
void add_process_facts(const Context& c, unsigned index, Finding& f);  // one fact per process on the GPU
[[nodiscard]] GpuEvidence gpu_evidence(const Context& c, unsigned index);
[[nodiscard]] std::string process_line(const gpu::GpuProcess& p, long long now_unix_s);

// The checks, each appending its findings (docs/doctor.md describes each code).
void check_no_gpus(const Context& c, std::vector<Finding>& out);
void check_visible_devices(const Context& c, std::vector<Finding>& out);
// CUDA_VISIBLE_DEVICES against the MIG layout: a GPU in MIG mode named whole, a MIG-UUID that is
// no MIG device here, a multi-GPU job on MIG devices (docs/mig.md).
void check_mig(const Context& c, std::vector<Finding>& out);
void check_device_order(const Context& c, std::vector<Finding>& out);
void check_single_gpu_active(const Context& c, std::vector<Finding>& out);
void check_memory_imbalance(const Context& c, std::vector<Finding>& out);
void check_process_count(const Context& c, std::vector<Finding>& out);
void check_starved_and_holding(const Context& c, std::vector<Finding>& out);
void check_thermal(const Context& c, std::vector<Finding>& out);
void check_near_oom(const Context& c, std::vector<Finding>& out);
void check_topology(const Context& c, std::vector<Finding>& out);
void check_gpu_fault(const Context& c, std::vector<Finding>& out);
void check_environment(const Context& c, std::vector<Finding>& out);

}  // namespace tarmac::diagnose::detail
