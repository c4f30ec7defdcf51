// doctor's checks, one function per finding code (docs/doctor.md explains each).
#include <algorithm>
#include <fmt/format.h>
#include <set>

#include "tarmac/diagnose/doctor_context.hpp"
#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/gpu/cuda_visible.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::diagnose::detail {

namespace {

std::string gpus_text(const std::vector<unsigned>& gpus) {
  return fmt::format("{} {}", gpus.size() == 1 ? "GPU" : "GPUs", format_index_list(gpus));
}

double pct(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

long long now_s(const Context& c) { return c.in.samples.back().timestamp_unix_ms / 1000; }

void add_process_facts(const Context& c, unsigned index, Finding& f) {
  for (const auto* p : c.processes(index)) {
    f.facts.push_back(fmt::format("GPU {}: {}", index, process_line(*p, now_s(c))));
  }
}

const std::vector<gpu::Device>& all_devices(const Context& c) { return c.in.samples.back().devices; }

std::optional<std::string> env_value(const Environment& env, std::string_view name) {
  for (const auto& [k, v] : env.nccl) {
    if (k == name) return v;
  }
  return std::nullopt;
}

bool truthy(const std::optional<std::string>& v) { return v && !v->empty() && *v != "0"; }

bool has_nvlink(const gpu::Topology& t, unsigned a, unsigned b) {
  return a < t.links.size() && b < t.links[a].size() && t.links[a][b] == gpu::Link::NvLink;
}

}  // namespace

void check_no_gpus(const Context& c, std::vector<Finding>& out) {
  const auto& env = c.in.environment;
  if (c.indices.empty()) {
    Finding f = no_gpus_visible("the driver answers, but it reports 0 GPUs", env);
    f.summary = "The NVIDIA driver answers but shows no GPU";
    out.push_back(std::move(f));
    return;
  }
  if (!env.cuda_visible_devices) return;
  const auto view = gpu::cuda_view(all_devices(c), env.cuda_visible_devices, env.cuda_device_order);
  if (!view.gpu_of_cuda.empty()) return;
  Finding f;
  f.code = "no-gpus-visible";
  f.severity = Severity::Critical;
  f.summary = fmt::format("CUDA_VISIBLE_DEVICES={} hides every GPU: CUDA programs started here see none",
                          *env.cuda_visible_devices);
  f.facts.push_back(fmt::format("the machine has {} GPU{}; CUDA_VISIBLE_DEVICES='{}'", c.indices.size(),
                                c.indices.size() == 1 ? "" : "s", *env.cuda_visible_devices));
  if (view.problem) f.facts.push_back(*view.problem);
  f.causes = {"CUDA_VISIBLE_DEVICES is empty, -1, or names GPUs that do not exist (CUDA stops at the first "
              "invalid entry)",
              "a job script or scheduler prolog set it for another machine"};
  f.fixes = {"unset CUDA_VISIBLE_DEVICES, or list indices that exist here (0 to " +
                 std::to_string(c.indices.size() - 1) + ") or full GPU- UUIDs",
             "let the scheduler pick: `tarmac pick -n N --format env` or `tarmac run -n N -- CMD`"};
  out.push_back(std::move(f));
}

void check_visible_devices(const Context& c, std::vector<Finding>& out) {
  const auto& env = c.in.environment;
  if (!env.cuda_visible_devices) return;
  const auto view = gpu::cuda_view(all_devices(c), env.cuda_visible_devices, env.cuda_device_order);
  if (view.gpu_of_cuda.empty()) return;  // no-gpus-visible said it
  std::set<unsigned> shown(view.gpu_of_cuda.begin(), view.gpu_of_cuda.end());
  std::vector<unsigned> hidden;
  for (unsigned i : c.indices) {
    if (!shown.contains(i)) hidden.push_back(i);
  }
  const bool too_few = c.in.expect_gpus && *c.in.expect_gpus > shown.size();
  if (hidden.empty() && !view.problem) return;
  Finding f;
  f.code = "visible-devices-restricted";
  f.severity = view.problem || too_few ? Severity::Warning : Severity::Info;
  f.gpus = hidden;
  std::string mapping;
  for (std::size_t k = 0; k < view.gpu_of_cuda.size(); ++k) {
    mapping += fmt::format("{}cuda:{} = GPU {}", k == 0 ? "" : ", ", k, view.gpu_of_cuda[k]);
  }
  f.summary = hidden.empty()
                  ? fmt::format("CUDA_VISIBLE_DEVICES={} has an entry CUDA ignores", *env.cuda_visible_devices)
                  : fmt::format("CUDA_VISIBLE_DEVICES={} hides {} of {}: CUDA programs here see {}",
                                *env.cuda_visible_devices, gpus_text(hidden), c.indices.size(), mapping);
  f.facts.push_back("a CUDA program started here sees " + mapping);
  if (view.problem) f.facts.push_back(*view.problem);
  if (too_few) {
    f.facts.push_back(fmt::format("--expect-gpus {} but only {} GPU{} visible", *c.in.expect_gpus,
                                  shown.size(), shown.size() == 1 ? " is" : "s are"));
  }
  for (unsigned i : hidden) f.evidence.push_back(gpu_evidence(c, i));
  f.causes = {"set on purpose by a scheduler (Slurm, Kubernetes, tarmac run) to give this job its GPUs",
              "left over in the shell or the job script from an earlier experiment"};
  f.fixes = {"if the job should use more GPUs: unset CUDA_VISIBLE_DEVICES or list them all",
             "ask the scheduler for the GPUs instead of setting the variable: `srun --gpus=N`, `tarmac run -n N -- CMD`"};
  out.push_back(std::move(f));
}

void check_device_order(const Context& c, std::vector<Finding>& out) {
  const auto& env = c.in.environment;
  if (env.cuda_device_order == std::string("PCI_BUS_ID")) return;
  std::set<std::string> models;
  for (const auto& d : all_devices(c)) {
    if (!d.lost && d.id.name) models.insert(*d.id.name);  // a lost GPU's unknown name is not another model
  }
  if (models.size() < 2) return;
  const auto cuda = gpu::cuda_view(all_devices(c), env.cuda_visible_devices, env.cuda_device_order);
  const auto pci = gpu::cuda_view(all_devices(c), env.cuda_visible_devices, std::string("PCI_BUS_ID"));
  if (cuda.gpu_of_cuda == pci.gpu_of_cuda) return;
  Finding f;
  f.code = "device-order";
  f.severity = Severity::Warning;
  std::string mapping;
  for (std::size_t k = 0; k < cuda.gpu_of_cuda.size(); ++k) {
    const unsigned g = cuda.gpu_of_cuda[k];
    mapping += fmt::format("{}cuda:{} = GPU {}", k == 0 ? "" : ", ", k, g);
    if (k >= pci.gpu_of_cuda.size() || pci.gpu_of_cuda[k] != g) f.gpus.push_back(g);
  }
  f.summary = "CUDA_DEVICE_ORDER is not PCI_BUS_ID on a machine of mixed GPUs: CUDA's numbers differ from "
              "nvidia-smi's and tarmac's";
  f.facts.push_back("CUDA (FASTEST_FIRST, its default) numbers them " + mapping);
  for (const auto& d : all_devices(c)) {
    f.facts.push_back(fmt::format("GPU {} (nvidia-smi's index): {}, compute capability {}", d.id.index,
                                  d.id.name.value_or("?"), d.id.cuda_capability.value_or("?")));
  }
  for (unsigned g : f.gpus) f.evidence.push_back(gpu_evidence(c, g));
  f.causes = {"CUDA sorts devices fastest first unless told otherwise; nvidia-smi, NVML and tarmac number them "
              "in PCI bus order",
              "`CUDA_VISIBLE_DEVICES=1` chosen from nvidia-smi's table then runs on a different GPU"};
  f.fixes = {"export CUDA_DEVICE_ORDER=PCI_BUS_ID (in ~/.bashrc, the job script, or the container's environment) "
             "before choosing GPUs by index",
             "or select GPUs by UUID: CUDA_VISIBLE_DEVICES=GPU-... (`tarmac pick --format uuid`)"};
  out.push_back(std::move(f));
}

void check_single_gpu_active(const Context& c, std::vector<Finding>& out) {
  const DoctorInput& in = c.in;
  std::vector<unsigned> busy;
  std::vector<unsigned> empty;
  for (unsigned i : c.indices) {
    if (c.sustained(i, [&](const gpu::Device& d) { return is_busy(d, in); })) busy.push_back(i);
    if (c.sustained(i, [&](const gpu::Device& d) { return is_empty(d, in); })) empty.push_back(i);
  }
  std::vector<unsigned> active = busy;
  if (c.scoped) active = c.jobs.front().gpus();
  const unsigned expected = in.expect_gpus.value_or(0);
  const bool single = active.size() == 1 && (!empty.empty() || expected > 1) &&
                      (c.scoped || busy.size() == 1);
  if (single) {
    const unsigned g = active.front();
    Finding f;
    f.code = "single-gpu-active";
    f.severity = Severity::Warning;
    f.gpus = {g};
    f.gpus.insert(f.gpus.end(), empty.begin(), empty.end());
    f.summary = empty.empty()
                    ? fmt::format("Only GPU {} works, but {} GPUs were expected", g, expected)
                    : fmt::format("Only GPU {} works; {} sit{} empty", g, gpus_text(empty), empty.size() == 1 ? "s" : "");
    f.evidence.push_back(gpu_evidence(c, g));
    for (unsigned i : empty) f.evidence.push_back(gpu_evidence(c, i));
    add_process_facts(c, g, f);
    f.causes = {"the script was started as `python train.py`: one process, which uses cuda:0 only",
                "accelerate's config says num_processes: 1, or DeepSpeed ran with --num_gpus=1 / --include on one GPU",
                "CUDA_VISIBLE_DEVICES names one GPU in the job script",
                "the model was moved to one device (`model.to(\"cuda\")`) without DistributedDataParallel"};
    const unsigned n = expected > 1 ? expected : static_cast<unsigned>(1 + empty.size());
    f.fixes = {fmt::format("launch one process per GPU: `torchrun --nproc_per_node={} train.py`", n),
               fmt::format("Hugging Face Accelerate: `accelerate launch --multi_gpu --num_processes {} train.py` (or "
                           "rerun `accelerate config`)",
                           n),
               fmt::format("DeepSpeed: `deepspeed --num_gpus {} train.py`", n),
               "in the script: `torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"]))`, wrap the model in "
               "DistributedDataParallel, and use a DistributedSampler",
               "a job that really needs one GPU: leave the others to someone else (`tarmac run -n 1 -- CMD`)"};
    out.push_back(std::move(f));
  } else if (!c.scoped && busy.size() >= 2 && !empty.empty()) {
    Finding f;
    f.code = "idle-gpus";
    f.severity = Severity::Info;
    f.gpus = empty;
    f.summary = fmt::format("{} idle while {} work", gpus_text(empty), gpus_text(busy));
    for (unsigned i : empty) f.evidence.push_back(gpu_evidence(c, i));
    f.causes = {"free capacity: nobody has a job for these GPUs"};
    f.fixes = {"run more work here: `tarmac run -n N -- CMD` starts it on free GPUs",
               "if a job was meant to use every GPU, check its --nproc_per_node / --num_processes"};
    out.push_back(std::move(f));
  }
}

void check_memory_imbalance(const Context& c, std::vector<Finding>& out) {
  const auto& t = c.in.thresholds;
  for (const auto& job : c.jobs) {
    if (job.mem_median_by_gpu.size() < 2) continue;
    auto [lo, hi] = std::minmax_element(job.mem_median_by_gpu.begin(), job.mem_median_by_gpu.end(),
                                        [](const auto& a, const auto& b) { return a.second < b.second; });
    const std::uint64_t spread = hi->second - lo->second;
    if (hi->second == 0 || pct(spread, hi->second) < t.imbalance_pct || spread < t.imbalance_min_bytes) continue;
    Finding f;
    f.code = "memory-imbalance";
    f.severity = Severity::Warning;
    f.summary = fmt::format("Memory is uneven across the GPUs of one job: GPU {} holds {}, GPU {} {} ({:.0f} % apart)",
                            hi->first, util::format_bytes(hi->second), lo->first, util::format_bytes(lo->second),
                            pct(spread, hi->second));
    f.facts.push_back("job: " + job.label);
    for (const auto& [gpu, bytes] : job.mem_median_by_gpu) {
      f.gpus.push_back(gpu);
      GpuEvidence e = gpu_evidence(c, gpu);
      e.values["job_mem_bytes"] = static_cast<long long>(bytes);
      e.values["job_processes"] = static_cast<long long>(job.pids_by_gpu.at(gpu).size());
      f.evidence.push_back(std::move(e));
    }
    f.causes = {"every rank also creates a CUDA context (and tensors) on cuda:0: torch.cuda.set_device is missing "
                "or comes after the first CUDA call, or torch.load without map_location",
                "rank 0 does extra work: evaluation, metrics, gathering outputs, logging",
                "DataParallel (one process) gathers outputs on GPU 0",
                "pipeline or tensor-parallel stages split unevenly; uneven sequence lengths per rank"};
    f.fixes = {"call `torch.cuda.set_device(local_rank)` before any CUDA work, and "
               "`torch.load(path, map_location=f\"cuda:{local_rank}\")` (or \"cpu\")",
               "use DistributedDataParallel (torchrun) instead of DataParallel",
               "gather metrics with torch.distributed.all_gather / all_reduce instead of on rank 0",
               "shard optimizer state and parameters: FSDP or DeepSpeed ZeRO",
               "rebalance pipeline stages (DeepSpeed partition_method, Megatron's layer split)"};
    out.push_back(std::move(f));
  }
}

void check_process_count(const Context& c, std::vector<Finding>& out) {
  const unsigned expected = c.in.expect_gpus.value_or(0);
  for (const auto& job : c.jobs) {
    std::vector<unsigned> crowded;
    for (const auto& [gpu, pids] : job.pids_by_gpu) {
      if (pids.size() > 1) crowded.push_back(gpu);
    }
    const auto used = job.gpus();
    const bool wrong_count = c.scoped && expected > 0 && used.size() != expected;
    const bool none = c.scoped && used.empty();
    if (crowded.empty() && !wrong_count && !none) continue;
    Finding f;
    f.code = "process-count";
    f.severity = Severity::Warning;
    f.facts.push_back("job: " + job.label);
    if (none) {
      f.summary = fmt::format("The job ({}) has no process on any GPU", job.label);
    } else if (!crowded.empty()) {
      std::string counts;
      for (const auto& [gpu, pids] : job.pids_by_gpu) {
        counts += fmt::format("{}GPU {}: {}", counts.empty() ? "" : ", ", gpu, pids.size());
      }
      f.summary = fmt::format("Not one process per GPU: {} run{} several processes of the same job ({})",
                              gpus_text(crowded), crowded.size() == 1 ? "s" : "", counts);
    } else {
      f.summary = fmt::format("The job uses {} GPU{}, {} expected", used.size(), used.size() == 1 ? "" : "s", expected);
    }
    if (wrong_count && !none && !crowded.empty()) {
      f.facts.push_back(fmt::format("--expect-gpus {}, the job uses {}", expected, used.size()));
    }
    for (const auto& [gpu, pids] : job.pids_by_gpu) {
      f.gpus.push_back(gpu);
      GpuEvidence e = gpu_evidence(c, gpu);
      e.values["job_processes"] = static_cast<long long>(pids.size());
      f.evidence.push_back(std::move(e));
      if (pids.size() > 1) add_process_facts(c, gpu, f);
    }
    f.causes = {"ranks pick their GPU with the global RANK instead of LOCAL_RANK, or ignore it, so two ranks land "
                "on the same GPU",
                "torch.cuda.set_device is missing: every rank also opens cuda:0",
                "the launcher started more processes than GPUs (--nproc_per_node, --num_processes)",
                "DataLoader workers touch CUDA (they should not)"};
    f.fixes = {"in the script: `local_rank = int(os.environ[\"LOCAL_RANK\"]); torch.cuda.set_device(local_rank)` "
               "before creating tensors or the model",
               "match the launcher to the GPUs: `torchrun --nproc_per_node=$(nvidia-smi -L | wc -l) train.py`",
               "keep CUDA out of DataLoader workers (no .cuda() in Dataset.__getitem__)"};
    out.push_back(std::move(f));
  }
  if (!c.scoped && expected > 0) {
    std::vector<unsigned> used;
    for (unsigned i : c.indices) {
      if (!c.processes(i).empty()) used.push_back(i);
    }
    if (used.size() != expected) {
      Finding f;
      f.code = "process-count";
      f.severity = Severity::Warning;
      f.gpus = used;
      f.summary = fmt::format("{} GPU{} in use, {} expected", used.size(), used.size() == 1 ? "" : "s", expected);
      for (unsigned i : used) f.evidence.push_back(gpu_evidence(c, i));
      f.causes = {"the launcher started fewer (or more) processes than the job needs"};
      f.fixes = {fmt::format("`torchrun --nproc_per_node={} train.py`, or `tarmac doctor --pid PID` to look at one job",
                             expected)};
      out.push_back(std::move(f));
    }
  }
}

void check_starved_and_holding(const Context& c, std::vector<Finding>& out) {
  const DoctorInput& in = c.in;
  const auto& t = in.thresholds;
  std::vector<unsigned> starved;
  std::vector<unsigned> holding;
  for (unsigned i : c.indices) {
    const bool zero = c.sustained(i, [&](const gpu::Device& d) {
      return !d.lost && !d.processes.empty() && d.sample.util_gpu_pct.value_or(1) == 0 &&
             std::max(process_memory(d), d.sample.mem_used_bytes.value_or(0)) >= t.holding_min_bytes;
    });
    if (zero) {
      holding.push_back(i);
      continue;
    }
    const bool low = c.sustained(i, [&](const gpu::Device& d) {
      const auto total = d.id.mem_total_bytes.value_or(0);
      return !d.lost && !d.processes.empty() && !is_busy(d, in) && total > 0 &&
             pct(d.sample.mem_used_bytes.value_or(0), total) >= in.activity.starved_mem_pct;
    });
    if (low) starved.push_back(i);
  }
  if (!starved.empty()) {
    Finding f;
    f.code = "starved";
    f.severity = Severity::Warning;
    f.gpus = starved;
    f.summary = fmt::format("{} hold{} memory but compute{} little: waiting for data, the CPU or other ranks",
                            gpus_text(starved), starved.size() == 1 ? "s" : "", starved.size() == 1 ? "s" : "");
    bool zero_workers = false;
    for (unsigned i : starved) {
      f.evidence.push_back(gpu_evidence(c, i));
      add_process_facts(c, i, f);
      for (const auto* p : c.processes(i)) {
        const auto cmd = p->host.command_line.value_or("");
        for (const char* flag : {"--workers 0", "--workers=0", "--num-workers 0", "--num_workers 0",
                                 "--num-workers=0", "--num_workers=0", "-j 0"}) {
          if (cmd.find(flag) != std::string::npos) zero_workers = true;
        }
      }
    }
    if (zero_workers) f.facts.push_back("the command line asks for 0 data-loader workers: loading runs in the training loop");
    f.causes = {"the DataLoader cannot keep up: num_workers=0 or too few, no pin_memory",
                "CPU-bound preprocessing or augmentation; slow storage (network filesystem, cold cache)",
                "a batch too small to fill the GPU",
                "waiting at a collective for a slower rank or a slow network",
                "synchronising every step: .item(), .cpu(), print of a tensor"};
    f.fixes = {"DataLoader(num_workers=<CPU cores per GPU>, pin_memory=True, persistent_workers=True, prefetch_factor=4)",
               "move augmentation to the GPU (NVIDIA DALI, torchvision.transforms.v2 on CUDA tensors)",
               "copy the dataset to local NVMe, or stream it in shards (WebDataset, Mosaic streaming)",
               "raise the batch size (with the learning rate) until utilization stays high",
               "find the wait: `py-spy dump --pid PID`, torch.profiler, or NCCL_DEBUG=INFO for collectives"};
    out.push_back(std::move(f));
  }
  if (!holding.empty()) {
    Finding f;
    f.code = "holding";
    f.severity = Severity::Warning;
    f.gpus = holding;
    const long long window_s = std::max<long long>(1, (c.in.samples.back().timestamp_unix_ms -
                                                       c.in.samples.front().timestamp_unix_ms) / 1000);
    f.summary = fmt::format("{} hold{} memory at 0 % utilization: a forgotten or stuck process",
                            gpus_text(holding), holding.size() == 1 ? "s" : "");
    for (unsigned i : holding) {
      GpuEvidence e = gpu_evidence(c, i);
      long long youngest = -1;
      for (const auto* p : c.processes(i)) {
        if (!p->host.start_time_unix) continue;
        const long long age = now_s(c) - *p->host.start_time_unix;
        youngest = youngest < 0 ? age : std::min(youngest, age);
      }
      if (youngest >= 0) e.values["youngest_process_age_s"] = youngest;
      f.evidence.push_back(std::move(e));
      add_process_facts(c, i, f);
      f.facts.push_back(youngest >= c.in.activity.holding_after_s
                            ? fmt::format("GPU {}: held at 0 % for the whole window; its processes are at least {} old",
                                          i, util::format_age(youngest))
                            : fmt::format("GPU {}: held at 0 % for the whole window ({}s)", i, window_s));
    }
    f.causes = {"a notebook kernel or interactive session kept alive after the work ended",
                "a rank stuck after another one crashed (a collective that never completes)",
                "a debugger paused at a breakpoint; a process waiting for input or a lock",
                "an inference server with no traffic"};
    f.fixes = {"`tarmac reap` lists processes holding memory without working (`--kill` ends them)",
               "shut down idle notebook kernels (Kernel > Shut Down), or free memory: `del model; "
               "torch.cuda.empty_cache()`",
               "let stuck ranks fail: `init_process_group(timeout=timedelta(minutes=10))` and "
               "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
               "see where it waits: `py-spy dump --pid PID`"};
    out.push_back(std::move(f));
  }
}

void check_thermal(const Context& c, std::vector<Finding>& out) {
  const auto& t = c.in.thresholds;
  constexpr std::uint64_t kHardware = 0x8 | 0x40 | 0x80;  // HW slowdown, HW thermal, HW power brake
  std::vector<unsigned> hot;
  bool hardware = false;
  for (unsigned i : c.indices) {
    const bool sustained = c.sustained(i, [&](const gpu::Device& d) {
      return !d.lost && (d.sample.temp_c.value_or(0) >= t.thermal_c ||
                         gpu::harmful_clock_events(d.sample.clock_event_reasons.value_or(0)) != 0);
    });
    if (!sustained) continue;
    hot.push_back(i);
    const bool hw = c.sustained(i, [&](const gpu::Device& d) {
      return (d.sample.clock_event_reasons.value_or(0) & kHardware) != 0 ||
             (d.id.temp_slowdown_c && d.sample.temp_c.value_or(0) >= *d.id.temp_slowdown_c);
    });
    hardware = hardware || hw;
  }
  if (hot.empty()) return;
  Finding f;
  f.code = "thermal";
  f.severity = hardware ? Severity::Critical : Severity::Warning;
  f.gpus = hot;
  f.summary = fmt::format("{} {} hot{}", gpus_text(hot), hot.size() == 1 ? "runs" : "run",
                          hardware ? ": the hardware is cutting clocks" : "");
  for (unsigned i : hot) {
    GpuEvidence e = gpu_evidence(c, i);
    const auto* d = c.last(i);
    if (auto m = c.max(i, [](const gpu::Device& x) { return x.sample.temp_c; })) e.values["temp_max_c"] = static_cast<long long>(*m);
    if (d->id.temp_slowdown_c) e.values["temp_slowdown_c"] = static_cast<long long>(*d->id.temp_slowdown_c);
    if (d->sample.clock_sm_mhz) e.values["clock_sm_mhz"] = static_cast<long long>(*d->sample.clock_sm_mhz);
    if (d->id.clock_sm_max_mhz) e.values["clock_sm_max_mhz"] = static_cast<long long>(*d->id.clock_sm_max_mhz);
    std::string reasons;
    for (const auto& key : gpu::clock_event_keys(gpu::harmful_clock_events(d->sample.clock_event_reasons.value_or(0)))) {
      reasons += (reasons.empty() ? "" : ",") + key;
    }
    if (!reasons.empty()) e.values["clock_events"] = reasons;
    f.evidence.push_back(std::move(e));
  }
  f.causes = {"poor airflow: a failed fan, blocked intake, dust, a hot aisle, neighbouring cards heating each other",
              "a power brake signalled by the chassis or power supply",
              "sustained full load in a chassis not rated for it"};
  f.fixes = {"check the cooling: `nvidia-smi -q -d TEMPERATURE,PERFORMANCE` shows the slowdown reasons and thresholds",
             "ask the administrator to inspect fans and airflow, or to lower the power limit (`nvidia-smi -pl`) "
             "to trade a little speed for steady clocks",
             "move work to cooler GPUs (`tarmac pick` prefers them) and spread jobs across the chassis",
             "hardware slowdown at normal temperatures: report it to the vendor (power supply, board)"};
  out.push_back(std::move(f));
}

void check_near_oom(const Context& c, std::vector<Finding>& out) {
  const auto& t = c.in.thresholds;
  std::vector<unsigned> full;
  for (unsigned i : c.indices) {
    if (c.sustained(i, [&](const gpu::Device& d) {
          const auto total = d.id.mem_total_bytes.value_or(0);
          return !d.lost && total > 0 && pct(d.sample.mem_used_bytes.value_or(0), total) >= t.near_oom_pct;
        })) {
      full.push_back(i);
    }
  }
  if (full.empty()) return;
  Finding f;
  f.code = "near-oom";
  f.severity = Severity::Warning;
  f.gpus = full;
  f.summary = fmt::format("{} {} nearly full: the next allocation may fail with CUDA out of memory",
                          gpus_text(full), full.size() == 1 ? "is" : "are");
  bool server = false;
  for (unsigned i : full) {
    GpuEvidence e = gpu_evidence(c, i);
    const auto* d = c.last(i);
    e.values["mem_used_pct"] = pct(d->sample.mem_used_bytes.value_or(0), d->id.mem_total_bytes.value_or(1));
    f.evidence.push_back(std::move(e));
    add_process_facts(c, i, f);
    for (const auto* p : c.processes(i)) {
      const auto cmd = p->host.command_line.value_or("");
      if (cmd.find("vllm") != std::string::npos || cmd.find("text-generation") != std::string::npos ||
          cmd.find("tritonserver") != std::string::npos) {
        server = true;
      }
    }
  }
  if (server) {
    f.facts.push_back("an inference server reserves most of the memory up front by design (vLLM's "
                      "--gpu-memory-utilization, default 0.9): full is normal for it");
  }
  f.causes = {"batch size or sequence length too large for the model on this GPU",
              "activations kept for backward in fp32; optimizer state unsharded",
              "memory fragmentation in PyTorch's caching allocator"};
  f.fixes = {"halve the batch size and use gradient accumulation to keep the effective batch",
             "train in bf16 or fp16: torch.autocast(\"cuda\", dtype=torch.bfloat16)",
             "activation checkpointing: model.gradient_checkpointing_enable() or torch.utils.checkpoint",
             "shard parameters, gradients and optimizer state: FSDP or DeepSpeed ZeRO-2/3 (with CPU offload)",
             "fine-tune with LoRA / QLoRA (PEFT) instead of all weights",
             "against fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"};
  out.push_back(std::move(f));
}

void check_topology(const Context& c, std::vector<Finding>& out) {
  if (!c.in.topology) return;
  const auto& topo = *c.in.topology;
  for (const auto& job : c.jobs) {
    const auto gpus = job.gpus();
    if (gpus.size() < 2) continue;
    bool any_nvlink = false;
    bool crosses_cpu = false;
    std::string pairs;
    for (std::size_t a = 0; a < gpus.size(); ++a) {
      for (std::size_t b = a + 1; b < gpus.size(); ++b) {
        if (gpus[a] >= topo.links.size() || gpus[b] >= topo.links[gpus[a]].size()) continue;
        const auto link = topo.links[gpus[a]][gpus[b]];
        any_nvlink = any_nvlink || link == gpu::Link::NvLink;
        crosses_cpu = crosses_cpu || link == gpu::Link::Phb || link == gpu::Link::Node || link == gpu::Link::Sys;
        pairs += fmt::format("{}{}-{} {}", pairs.empty() ? "" : ", ", gpus[a], gpus[b], gpu::to_string(link));
      }
    }
    if (any_nvlink) continue;
    Finding f;
    f.code = "pcie-only-topology";
    f.severity = crosses_cpu ? Severity::Warning : Severity::Info;
    f.gpus = gpus;
    f.summary = fmt::format("A job on {} has no NVLink between its GPUs: gradients travel over PCIe{}",
                            gpus_text(gpus), crosses_cpu ? " and through the CPU" : "");
    f.facts.push_back("job: " + job.label);
    f.facts.push_back("links (nvidia-smi topo -m): " + pairs);
    for (unsigned g : gpus) {
      GpuEvidence e = gpu_evidence(c, g);
      if (const auto* d = c.last(g); d != nullptr && d->id.numa_node) e.values["numa_node"] = static_cast<long long>(*d->id.numa_node);
      f.evidence.push_back(std::move(e));
    }
    f.causes = {"PCIe boards without NVLink bridges", "the job's GPUs sit on different PCIe switches or NUMA nodes"};
    f.fixes = {"pick GPUs under one PCIe switch and NUMA node (`tarmac pick -n N` prefers them; `nvidia-smi topo -m` "
               "shows PIX/PXB pairs)",
               "communicate less: gradient accumulation with DDP's no_sync(), larger DDP buckets (bucket_cap_mb), "
               "FSDP/ZeRO with communication overlap",
               "keep NCCL's P2P over PCIe on (do not set NCCL_P2P_DISABLE) and bind each rank to its GPU's NUMA "
               "node (`numactl --cpunodebind`)"};
    out.push_back(std::move(f));
  }
}

void check_gpu_fault(const Context& c, std::vector<Finding>& out) {
  std::vector<unsigned> faulty;
  std::vector<GpuEvidence> evidence;
  std::vector<std::string> facts;
  for (unsigned i : c.indices) {
    std::optional<std::string> reason;
    const gpu::Device* seen = nullptr;
    for (std::size_t s = 0; s < c.samples() && !reason; ++s) {
      const auto* d = c.device(s, i);
      if (d == nullptr) continue;
      if (d->lost) {
        reason = "fell off the bus: " + *d->lost;
      } else if (d->sample.ecc_uncorrected_volatile.value_or(0) > 0) {
        reason = fmt::format("{} uncorrectable ECC error{} since the driver loaded", *d->sample.ecc_uncorrected_volatile,
                             *d->sample.ecc_uncorrected_volatile == 1 ? "" : "s");
      } else if (d->sample.remapped_rows_failure == true) {
        reason = "row remapping failed";
      } else if (d->sample.retired_pages_pending == true || d->sample.remapped_rows_pending == true) {
        reason = "memory rows pending remapping or retirement: needs a GPU reset";
      }
      seen = d;
    }
    if (!reason) continue;
    faulty.push_back(i);
    facts.push_back(fmt::format("GPU {}: {}", i, *reason));
    GpuEvidence e{i, {}};
    if (seen && seen->lost) {
      e.values["lost"] = *seen->lost;
    } else if (seen) {
      if (seen->sample.ecc_uncorrected_volatile) e.values["ecc_uncorrected_volatile"] = static_cast<long long>(*seen->sample.ecc_uncorrected_volatile);
      if (seen->sample.ecc_corrected_volatile) e.values["ecc_corrected_volatile"] = static_cast<long long>(*seen->sample.ecc_corrected_volatile);
      if (seen->sample.remapped_rows_pending) e.values["remapped_rows_pending"] = *seen->sample.remapped_rows_pending;
      if (seen->sample.remapped_rows_failure) e.values["remapped_rows_failure"] = *seen->sample.remapped_rows_failure;
      if (seen->sample.retired_pages_pending) e.values["retired_pages_pending"] = *seen->sample.retired_pages_pending;
    }
    evidence.push_back(std::move(e));
  }
  if (faulty.empty()) return;
  Finding f;
  f.code = "gpu-fault";
  f.severity = Severity::Critical;
  f.gpus = faulty;
  f.summary = fmt::format("{} {} a hardware fault: jobs on {} will crash or give wrong results",
                          gpus_text(faulty), faulty.size() == 1 ? "reports" : "report", faulty.size() == 1 ? "it" : "them");
  f.evidence = std::move(evidence);
  f.facts = std::move(facts);
  f.causes = {"a GPU that fell off the bus (XID 79): power, overheating, a PCIe link or board fault",
              "uncorrectable memory errors (XID 48, 63, 64): failing HBM/GDDR rows"};
  f.fixes = {"keep jobs off these GPUs now: drain the node (`scontrol update nodename=$(hostname -s) state=drain "
             "reason=gpu-fault`) or exclude them from CUDA_VISIBLE_DEVICES",
             "see the errors: `dmesg | grep -i xid` and `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`",
             "pending row remaps take effect after a GPU reset (`nvidia-smi -r` by an administrator, with no process "
             "on it) or a reboot",
             "a lost GPU needs a reboot; if it repeats, reseat or replace the board (RMA)"};
  out.push_back(std::move(f));
}

void check_environment(const Context& c, std::vector<Finding>& out) {
  const auto& env = c.in.environment;
  const auto p2p_disable = env_value(env, "NCCL_P2P_DISABLE");
  const auto p2p_level = env_value(env, "NCCL_P2P_LEVEL");
  const bool p2p_off = truthy(p2p_disable) || (p2p_level && (*p2p_level == "LOC" || *p2p_level == "0"));
  if (p2p_off && c.in.topology) {
    std::vector<unsigned> linked;
    for (unsigned a : c.indices) {
      for (unsigned b : c.indices) {
        if (a != b && has_nvlink(*c.in.topology, a, b)) {
          linked.push_back(a);
          break;
        }
      }
    }
    if (!linked.empty()) {
      Finding f;
      f.code = "nccl-p2p-disabled";
      f.severity = Severity::Warning;
      f.gpus = linked;
      f.summary = fmt::format("NCCL peer-to-peer is switched off, but {} {} NVLink", gpus_text(linked),
                              linked.size() == 1 ? "has" : "have");
      f.facts.push_back(p2p_disable ? "NCCL_P2P_DISABLE=" + *p2p_disable : "NCCL_P2P_LEVEL=" + *p2p_level);
      f.causes = {"a workaround for a PCIe machine (or an old NCCL bug) copied into this job's environment"};
      f.fixes = {"unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL: NCCL then uses NVLink, often several times faster "
                 "for all-reduce",
                 "check with NCCL_DEBUG=INFO that rings use P2P/NVLink (\"via P2P/IPC\")"};
      out.push_back(std::move(f));
    }
  }
  if (truthy(env.cuda_launch_blocking)) {
    Finding f;
    f.code = "cuda-launch-blocking";
    f.severity = Severity::Warning;
    f.summary = "CUDA_LAUNCH_BLOCKING=" + *env.cuda_launch_blocking +
                ": every kernel launch waits for the previous one (debugging only; training runs far slower)";
    f.facts.push_back("CUDA_LAUNCH_BLOCKING=" + *env.cuda_launch_blocking);
    f.causes = {"left over from debugging a CUDA error"};
    f.fixes = {"unset CUDA_LAUNCH_BLOCKING outside debugging sessions"};
    out.push_back(std::move(f));
  }
}

}  // namespace tarmac::diagnose::detail
