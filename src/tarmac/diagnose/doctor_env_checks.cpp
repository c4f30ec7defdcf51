// doctor's checks of the environment a job would start in: no-gpus-visible,
// visible-devices-restricted, device-order, nccl-p2p-disabled, cuda-launch-blocking
// (docs/doctor.md explains each code).
#include <algorithm>
#include <fmt/format.h>
#include <set>

#include "tarmac/diagnose/doctor_context.hpp"
#include "tarmac/gpu/cuda_visible.hpp"

namespace tarmac::diagnose::detail {

namespace {

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
  if (!view.gpu_of_cuda.empty() || view.mig_issue != gpu::MigIssue::None) return;  // check_mig says why
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
  if (view.gpu_of_cuda.empty()) return;               // no-gpus-visible said it
  if (view.mig_issue != gpu::MigIssue::None) return;  // check_mig says it
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

void check_mig(const Context& c, std::vector<Finding>& out) {
  const auto& env = c.in.environment;
  const auto devices = all_devices(c);
  const auto view = gpu::cuda_view(devices, env.cuda_visible_devices, env.cuda_device_order);
  const bool mig_visible = !view.mig_of_cuda.empty() && view.mig_of_cuda.front().has_value();
  const bool many_wanted = mig_visible && c.in.expect_gpus && *c.in.expect_gpus > 1;
  if (view.mig_issue == gpu::MigIssue::None && !many_wanted) return;
  // The MIG devices there are, for the facts and the fixes.
  std::string listing;
  std::size_t count = 0;
  for (const auto& d : devices) {
    for (const auto& m : d.mig) {
      ++count;
      if (count <= 8) {
        listing += fmt::format("{}GPU {}:{} MIG {} {}", listing.empty() ? "" : ", ", d.id.index, m.index,
                               m.profile.value_or("?"), m.uuid.value_or("?"));
      }
    }
  }
  Finding f;
  f.severity = Severity::Critical;
  const std::string cvd = env.cuda_visible_devices.value_or("");
  switch (view.mig_issue) {
    case gpu::MigIssue::WholeGpuInMigMode:
      f.code = "mig-parent-gpu";
      if (view.mig_gpu) f.gpus = {*view.mig_gpu};
      f.summary = fmt::format("CUDA_VISIBLE_DEVICES={} names GPU {} whole, but it is in MIG mode: CUDA sees no "
                              "device there",
                              cvd, view.mig_gpu.value_or(0));
      f.causes = {"a job script written for whole GPUs run on a partitioned board",
                  "the board was put in MIG mode after the script chose its GPU"};
      f.fixes = {"name one MIG device: CUDA_VISIBLE_DEVICES=MIG-<uuid> (`nvidia-smi -L` or `tarmac status` lists them)",
                 "or ask for a whole GPU that is not in MIG mode: `tarmac pick` never gives out one in MIG mode"};
      break;
    case gpu::MigIssue::NoSuchMigDevice:
      f.code = "mig-device-missing";
      f.summary = fmt::format("CUDA_VISIBLE_DEVICES={} names '{}', which is no MIG device here", cvd, view.mig_entry);
      f.causes = {"more MIG devices asked for than this machine has, or a UUID from another machine",
                  "the MIG layout changed (instances destroyed and created get new UUIDs)"};
      f.fixes = {"list the MIG devices with `nvidia-smi -L` and use one of their UUIDs"};
      break;
    case gpu::MigIssue::SecondMigDevice:
    case gpu::MigIssue::None:
      f.code = "mig-multi-gpu-job";
      f.summary = many_wanted
                      ? fmt::format("the job expects {} GPUs, but a process here sees one MIG device", *c.in.expect_gpus)
                      : fmt::format("CUDA_VISIBLE_DEVICES={} names more than one device with a MIG device among them: a "
                                    "process sees the first MIG device alone",
                                    cvd);
      f.causes = {"a multi-GPU (DDP, NCCL) job launched on MIG slices: NCCL cannot communicate across MIG "
                  "devices, and each process sees only one"};
      f.fixes = {"run one process per MIG device (each with its own CUDA_VISIBLE_DEVICES=MIG-<uuid>), as "
                 "independent jobs, not one multi-GPU job",
                 "or run the multi-GPU job on whole GPUs that are not in MIG mode"};
      break;
  }
  if (view.problem) f.facts.push_back(*view.problem);
  f.facts.push_back(count == 0 ? std::string("no MIG device exists here")
                               : fmt::format("{} MIG device{} here: {}{}", count, count == 1 ? "" : "s", listing,
                                             count > 8 ? ", ..." : ""));
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
