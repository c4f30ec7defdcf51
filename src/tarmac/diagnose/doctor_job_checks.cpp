// doctor's checks of a job across its GPUs: single-gpu-active, idle-gpus, memory-imbalance,
// process-count, pcie-only-topology (docs/doctor.md explains each code).
#include <algorithm>
#include <fmt/format.h>
#include <set>

#include "tarmac/diagnose/doctor_context.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::diagnose::detail {

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

}  // namespace tarmac::diagnose::detail
