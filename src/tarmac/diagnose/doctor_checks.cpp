// doctor's checks of what each GPU does: starved, holding (a GPU, or a process beside a working one),
// thermal, near-oom, gpu-fault
// (docs/doctor.md explains each code).
#include <algorithm>
#include <fmt/format.h>
#include <set>

#include "tarmac/diagnose/doctor_context.hpp"
#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::diagnose::detail {

namespace {

// Whether a command line on these GPUs asks for no data-loader workers.
bool asks_for_zero_workers(const Context& c, const std::vector<unsigned>& gpus) {
  for (unsigned i : gpus) {
    for (const auto* p : c.processes(i)) {
      const auto cmd = p->host.command_line.value_or("");
      for (const char* flag : {"--workers 0", "--workers=0", "--num-workers 0", "--num_workers 0",
                               "--num-workers=0", "--num_workers=0", "-j 0"}) {
        if (cmd.find(flag) != std::string::npos) return true;
      }
    }
  }
  return false;
}

Finding starved_finding(const Context& c, const std::vector<unsigned>& starved) {
  Finding f;
  f.code = "starved";
  f.severity = Severity::Warning;
  f.gpus = starved;
  f.summary = fmt::format("{} hold{} memory but compute{} little: waiting for data, the CPU or other ranks",
                          gpus_text(starved), starved.size() == 1 ? "s" : "", starved.size() == 1 ? "s" : "");
  for (unsigned i : starved) {
    f.evidence.push_back(gpu_evidence(c, i));
    add_process_facts(c, i, f);
  }
  if (asks_for_zero_workers(c, starved)) {
    f.facts.push_back("the command line asks for 0 data-loader workers: loading runs in the training loop");
  }
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
  return f;
}

// The age of the youngest process on GPU i that has a start time; -1 when none has.
long long youngest_process_age(const Context& c, unsigned i) {
  long long youngest = -1;
  for (const auto* p : c.processes(i)) {
    if (!p->host.start_time_unix) continue;
    const long long age = now_s(c) - *p->host.start_time_unix;
    youngest = youngest < 0 ? age : std::min(youngest, age);
  }
  return youngest;
}

// A process holding memory at 0 % on a GPU where another process works: the GPU is busy, so only
// the per-process utilization shows it (gpu/model.hpp: 0 is known idle, unknown never counts).
struct IdleHolder {
  unsigned gpu = 0;
  unsigned pid = 0;
};

const gpu::GpuProcess* find_process(const gpu::Device& d, unsigned pid) {
  for (const auto& p : d.processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

bool holds_idle(const gpu::GpuProcess& p, std::uint64_t min_bytes) {
  return p.sm_util_pct == 0U && p.mem_util_pct == 0U && p.used_mem_bytes.value_or(0) >= min_bytes;
}

bool works(const gpu::GpuProcess& p) { return p.sm_util_pct.value_or(0) > 0 || p.mem_util_pct.value_or(0) > 0; }

// The processes of GPU i that held memory at 0 % while another one worked, for the whole window.
std::vector<IdleHolder> idle_holders(const Context& c, unsigned i) {
  std::vector<IdleHolder> out;
  for (const auto* candidate : c.processes(i)) {
    const unsigned pid = candidate->pid;
    const bool held = c.sustained(i, [&](const gpu::Device& d) {
      const gpu::GpuProcess* p = find_process(d, pid);
      if (d.lost || p == nullptr || !holds_idle(*p, c.in.thresholds.holding_min_bytes)) return false;
      return std::any_of(d.processes.begin(), d.processes.end(),
                         [&](const gpu::GpuProcess& q) { return q.pid != pid && works(q); });
    });
    if (held) out.push_back({i, pid});
  }
  return out;
}

// One fact per idle holder, naming the process (the last sample's facts) and who works beside it.
void add_idle_holder_facts(const Context& c, const std::vector<IdleHolder>& holders, Finding& f) {
  for (const IdleHolder& h : holders) {
    const gpu::Device* d = c.last(h.gpu);
    const gpu::GpuProcess* p = d == nullptr ? nullptr : find_process(*d, h.pid);
    if (p == nullptr) continue;
    std::string workers;
    for (const auto& q : d->processes) {
      if (q.pid != h.pid && works(q)) workers += fmt::format("{}PID {}", workers.empty() ? "" : ", ", q.pid);
    }
    f.facts.push_back(fmt::format("GPU {}: held at 0 % SM and memory utilization for the whole window while {} "
                                  "works on the same GPU: {}",
                                  h.gpu, workers, process_line(*p, now_s(c))));
  }
}

Finding holding_finding(const Context& c, const std::vector<unsigned>& holding, const std::vector<IdleHolder>& holders) {
  Finding f;
  f.code = "holding";
  f.severity = Severity::Warning;
  std::set<unsigned> gpus(holding.begin(), holding.end());
  for (const IdleHolder& h : holders) gpus.insert(h.gpu);
  f.gpus.assign(gpus.begin(), gpus.end());
  const long long window_s =
      std::max<long long>(1, (c.in.samples.back().timestamp_unix_ms - c.in.samples.front().timestamp_unix_ms) / 1000);
  if (holding.empty()) {
    f.summary = fmt::format("{} at 0 % on {} next to a working process: a forgotten or stuck process",
                            holders.size() == 1 ? fmt::format("PID {} holds memory", holders.front().pid)
                                                : fmt::format("{} processes hold memory", holders.size()),
                            gpus_text(f.gpus));
  } else {
    f.summary = fmt::format("{} hold{} memory at 0 % utilization: a forgotten or stuck process", gpus_text(holding),
                            holding.size() == 1 ? "s" : "");
  }
  for (unsigned i : f.gpus) {
    if (std::find(holding.begin(), holding.end(), i) == holding.end()) {
      GpuEvidence e = gpu_evidence(c, i);
      long long held = 0;
      for (const IdleHolder& h : holders) held += h.gpu == i ? 1 : 0;
      e.values["idle_holders"] = held;
      f.evidence.push_back(std::move(e));
    }
  }
  add_idle_holder_facts(c, holders, f);
  for (unsigned i : holding) {
    GpuEvidence e = gpu_evidence(c, i);
    const long long youngest = youngest_process_age(c, i);
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
  return f;
}

}  // namespace

// A GPU held at 0 % for the whole window is holding; otherwise one starved (gpu::is_starved) for
// the whole window is starved. On a GPU that is not held as a whole, a process that held memory at
// 0 % for the whole window while another one worked is holding too (the per-GPU view misses it).
void check_starved_and_holding(const Context& c, std::vector<Finding>& out) {
  const DoctorInput& in = c.in;
  const auto& t = in.thresholds;
  std::vector<unsigned> starved;
  std::vector<unsigned> holding;
  std::vector<IdleHolder> holders;
  for (unsigned i : c.indices) {
    const bool zero = c.sustained(i, [&](const gpu::Device& d) {
      return !d.lost && !d.processes.empty() && d.sample.util_gpu_pct.value_or(1) == 0 &&
             std::max(process_memory(d), d.sample.mem_used_bytes.value_or(0)) >= t.holding_min_bytes;
    });
    if (zero) {
      holding.push_back(i);
      continue;
    }
    if (c.sustained(i, [&](const gpu::Device& d) { return gpu::is_starved(d, in.activity); })) starved.push_back(i);
    for (const IdleHolder& h : idle_holders(c, i)) holders.push_back(h);
  }
  if (!starved.empty()) out.push_back(starved_finding(c, starved));
  if (!holding.empty() || !holders.empty()) out.push_back(holding_finding(c, holding, holders));
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

}  // namespace tarmac::diagnose::detail
