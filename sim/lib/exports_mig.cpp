// Multi-Instance GPU: MIG device handles, GPU instances and compute instances of the scenario's
// layout (sim/core/mig.hpp), the profile and placement queries, and GPM per GPU instance. The
// layout is fixed by the scenario: creating or destroying instances stays unsupported (stubs).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "context.hpp"
#include "mig_types.hpp"

namespace tarmac::nvml {

using sim::lib::Context;
using sim::lib::Entry;
using sim::lib::guarded;
using sim::lib::MigHandleKind;
using sim::lib::MigHandles;

namespace {

bool mig_on(const Entry& e) { return e.sim->scenario().gpus[e.gpu].mig_mode.value_or(false); }

std::span<const sim::MigProfile> profiles_of(const Entry& e) {
  const sim::GpuSpec& g = e.sim->scenario().gpus[e.gpu];
  return sim::mig_profiles(g.name, g.memory_mib);
}

// NVML's "Requires privileged user" functions: the instance lists, placements and capacities.
bool privileged() { return geteuid() == 0; }

// Entered on a parent GPU in MIG mode (not a MIG device), else the answer to give.
Entry enter_parent(const char* function, nvmlDevice_t device) {
  Entry e = Context::get().enter_device(function, device);
  if (e.rc == NVML_SUCCESS && !mig_on(e)) e.rc = NVML_ERROR_NOT_SUPPORTED;
  return e;
}

const sim::MigProfile* by_nvml_profile(const Entry& e, unsigned profile) {
  for (const sim::MigProfile& p : profiles_of(e)) {
    if (p.nvml_profile == profile) return &p;
  }
  return nullptr;
}

const sim::MigProfile* by_id(const Entry& e, unsigned id) {
  for (const sim::MigProfile& p : profiles_of(e)) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

template <typename Info>
void fill_profile(Info& info, const sim::MigProfile& p) {
  info.id = p.id;
  info.isP2pSupported = 0;
  info.sliceCount = p.slices;
  info.instanceCount = p.instances;
  info.multiprocessorCount = p.multiprocessors;
  info.copyEngineCount = p.copy_engines;
  info.decoderCount = p.decoders;
  info.encoderCount = p.encoders;
  info.jpegCount = p.jpegs;
  info.ofaCount = p.ofas;
  info.memorySizeMB = p.memory_mib;
}

// Free placements of a profile: those whose memory slices no instance holds.
std::vector<unsigned> free_starts(const sim::GpuSpec& g, const sim::MigProfile& p) {
  std::vector<unsigned> out;
  const bool media_taken = std::any_of(g.mig.begin(), g.mig.end(), [](const sim::MigInstance& m) {
    return std::string_view(m.profile->name).ends_with("+me");
  });
  if (media_taken && std::string_view(p.name).ends_with("+me")) return out;
  for (unsigned s : p.starts) {
    const bool clash = std::any_of(g.mig.begin(), g.mig.end(), [&](const sim::MigInstance& m) {
      return s < m.start + m.profile->memory_slices && m.start < s + p.memory_slices;
    });
    if (!clash) out.push_back(s);
  }
  return out;
}

// Copies handles into a caller's buffer with NVML's count handshake.
template <typename Handle>
nvmlReturn_t hand_out(const std::vector<Handle>& list, Handle* out, unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (out == nullptr && !list.empty()) return NVML_ERROR_INVALID_ARGUMENT;
  std::copy(list.begin(), list.end(), out);
  *count = static_cast<unsigned>(list.size());
  return NVML_SUCCESS;
}

template <typename Info>
void fill_compute_profile(Info& info, const sim::MigProfile& p) {
  info.id = sim::compute_profile_of_slices(p.slices);
  info.sliceCount = p.slices;
  info.instanceCount = 1;
  info.multiprocessorCount = p.multiprocessors;
  info.sharedCopyEngineCount = p.copy_engines;
  info.sharedDecoderCount = p.decoders;
  info.sharedEncoderCount = p.encoders;
  info.sharedJpegCount = p.jpegs;
  info.sharedOfaCount = p.ofas;
}

nvmlReturn_t compute_profile_info(const char* function, nvmlGpuInstance_t gi, unsigned profile, unsigned eng_profile,
                                  nvmlComputeInstanceProfileInfo_v2_t* v2, nvmlComputeInstanceProfileInfo_t* v1) {
  return guarded([&] {
    auto e = Context::get().enter_instance(function, gi, MigHandleKind::GpuInstance);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (v2 == nullptr && v1 == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (v2 != nullptr && v2->version != nvmlComputeInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (eng_profile != 0) return NVML_ERROR_INVALID_ARGUMENT;  // only ENGINE_PROFILE_SHARED exists
    // Only the profile that spans the whole GPU instance is offered: the scenario's compute
    // instances are whole (a smaller one is NOT_SUPPORTED, as for a profile this GI cannot hold).
    const sim::MigProfile& p = *e.sim->scenario().gpus[e.gpu].mig[*e.mig].profile;
    if (profile != sim::compute_profile_of_slices(p.slices)) return NVML_ERROR_NOT_SUPPORTED;
    if (v1 != nullptr) fill_compute_profile(*v1, p);
    if (v2 != nullptr) {
      fill_compute_profile(*v2, p);
      const std::string name = std::to_string(p.slices) + "c." + p.name;
      std::memset(v2->name, 0, sizeof v2->name);
      std::memcpy(v2->name, name.c_str(), std::min(name.size(), sizeof v2->name - 1));
    }
    return NVML_SUCCESS;
  });
}

void fill_compute_info(nvmlComputeInstanceInfo_t& info, unsigned gpu, unsigned mig, const sim::MigInstance& m) {
  info.device = Context::handle(gpu);
  info.gpuInstance = static_cast<nvmlGpuInstance_t>(Context::mig_handle(gpu, mig, MigHandleKind::GpuInstance));
  info.id = m.ci_id;
  info.profileId = sim::compute_profile_of_slices(m.profile->slices);
  info.placement = {0, m.profile->slices};
}

}  // namespace

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    // Zero when MIG is not supported or not enabled; else as many as the smallest profile allows.
    unsigned most = 0;
    if (mig_on(e)) {
      for (const sim::MigProfile& p : profiles_of(e)) most = std::max(most, p.instances);
    }
    *count = most;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                                   nvmlDevice_t* mig_device) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = enter_parent(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (mig_device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= e.sim->scenario().gpus[e.gpu].mig.size()) return NVML_ERROR_NOT_FOUND;
    *mig_device = static_cast<nvmlDevice_t>(Context::mig_handle(e.gpu, index, MigHandleKind::Device));
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* is_mig_device) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (is_mig_device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig_device = e.mig ? 1 : 0;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig_device,
                                                                            nvmlDevice_t* device) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, mig_device, MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (device == nullptr || !e.mig) return NVML_ERROR_INVALID_ARGUMENT;
    *device = Context::handle(e.gpu);
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!e.mig) return NVML_ERROR_NOT_SUPPORTED;  // a whole GPU has no GPU instance
    *id = e.sim->scenario().gpus[e.gpu].mig[*e.mig].gi_id;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!e.mig) return NVML_ERROR_NOT_SUPPORTED;
    *id = e.sim->scenario().gpus[e.gpu].mig[*e.mig].ci_id;
    return NVML_SUCCESS;
  });
}

// A MIG device's share of its board; a whole GPU's own (with the slices of its 7g profile).
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (attributes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& g = e.sim->scenario().gpus[e.gpu];
    const sim::MigProfile* p = nullptr;
    if (e.mig) {
      p = g.mig[*e.mig].profile;
    } else {
      for (const sim::MigProfile& q : profiles_of(e)) {
        if (q.slices == 7) p = &q;
      }
    }
    *attributes = {};
    attributes->multiprocessorCount = p != nullptr ? p->multiprocessors : g.multiprocessors;
    attributes->memorySizeMB = e.mig ? p->memory_mib : g.memory_mib;
    if (p != nullptr) {
      attributes->sharedCopyEngineCount = p->copy_engines;
      attributes->sharedDecoderCount = p->decoders;
      attributes->sharedEncoderCount = p->encoders;
      attributes->sharedJpegCount = p->jpegs;
      attributes->sharedOfaCount = p->ofas;
      attributes->gpuInstanceSliceCount = p->slices;
      attributes->computeInstanceSliceCount = p->slices;
    }
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                                    nvmlGpuInstanceProfileInfo_v2_t* info) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = enter_parent(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const sim::MigProfile* p = by_nvml_profile(e, profile);
    if (p == nullptr) return profile >= 0x11 ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    fill_profile(*info, *p);
    const std::string name = std::string("MIG ") + p->name;
    std::memset(info->name, 0, sizeof info->name);
    std::memcpy(info->name, name.c_str(), std::min(name.size(), sizeof info->name - 1));
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                                   nvmlGpuInstanceProfileInfo_t* info) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = enter_parent(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::MigProfile* p = by_nvml_profile(e, profile);
    if (p == nullptr) return profile >= 0x11 ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    fill_profile(*info, *p);
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device,
                                                                             unsigned int profile_id,
                                                                             nvmlGpuInstancePlacement_t* placements,
                                                                             unsigned int* count) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = enter_parent(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (!privileged()) return NVML_ERROR_NO_PERMISSION;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::MigProfile* p = by_id(e, profile_id);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    const auto needed = static_cast<unsigned>(p->starts.size());
    if (placements == nullptr) {
      *count = needed;
      return NVML_SUCCESS;
    }
    for (unsigned i = 0; i < needed; ++i) placements[i] = {p->starts[i], p->memory_slices};
    *count = needed;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profile_id,
                                                                         unsigned int* count) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = enter_parent(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (!privileged()) return NVML_ERROR_NO_PERMISSION;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::MigProfile* p = by_id(e, profile_id);
    if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    // Instances of this profile that still fit, placed one after another.
    const sim::GpuSpec& g = e.sim->scenario().gpus[e.gpu];
    sim::GpuSpec trial = g;
    unsigned fits = 0;
    for (;;) {
      const std::vector<unsigned> free = free_starts(trial, *p);
      if (free.empty()) break;
      trial.mig.push_back({p, free.front(), 0, 0, {}});
      ++fits;
    }
    *count = fits;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile_id,
                                                         nvmlGpuInstance_t* gpu_instances, unsigned int* count) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = enter_parent(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (!privileged()) return NVML_ERROR_NO_PERMISSION;
    if (by_id(e, profile_id) == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::vector<nvmlGpuInstance_t> list;
    const sim::GpuSpec& g = e.sim->scenario().gpus[e.gpu];
    for (unsigned m = 0; m < g.mig.size(); ++m) {
      if (g.mig[m].profile->id == profile_id) {
        list.push_back(static_cast<nvmlGpuInstance_t>(Context::mig_handle(e.gpu, m, MigHandleKind::GpuInstance)));
      }
    }
    return hand_out(list, gpu_instances, count);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                            nvmlGpuInstance_t* gpu_instance) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = enter_parent(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (!privileged()) return NVML_ERROR_NO_PERMISSION;
    if (gpu_instance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& g = e.sim->scenario().gpus[e.gpu];
    for (unsigned m = 0; m < g.mig.size(); ++m) {
      if (g.mig[m].gi_id == id) {
        *gpu_instance = static_cast<nvmlGpuInstance_t>(Context::mig_handle(e.gpu, m, MigHandleKind::GpuInstance));
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpu_instance, nvmlGpuInstanceInfo_t* info) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_instance(function, gpu_instance, MigHandleKind::GpuInstance);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::MigInstance& m = e.sim->scenario().gpus[e.gpu].mig[*e.mig];
    info->device = Context::handle(e.gpu);
    info->id = m.gi_id;
    info->profileId = m.profile->id;
    info->placement = {m.start, m.profile->memory_slices};
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpu_instance,
                                                                             unsigned int profile,
                                                                             unsigned int eng_profile,
                                                                             nvmlComputeInstanceProfileInfo_v2_t* info) {
  return compute_profile_info(__func__, gpu_instance, profile, eng_profile, info, nullptr);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpu_instance,
                                                                            unsigned int profile,
                                                                            unsigned int eng_profile,
                                                                            nvmlComputeInstanceProfileInfo_t* info) {
  return compute_profile_info(__func__, gpu_instance, profile, eng_profile, nullptr, info);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpu_instance,
                                                                                 unsigned int profile_id,
                                                                                 unsigned int* count) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_instance(function, gpu_instance, MigHandleKind::GpuInstance);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (!privileged()) return NVML_ERROR_NO_PERMISSION;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::MigProfile& p = *e.sim->scenario().gpus[e.gpu].mig[*e.mig].profile;
    if (profile_id != sim::compute_profile_of_slices(p.slices)) return NVML_ERROR_NOT_SUPPORTED;
    *count = 0;  // its one compute instance spans it
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    nvmlGpuInstance_t gpu_instance, unsigned int profile_id, nvmlComputeInstancePlacement_t* placements,
    unsigned int* count) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_instance(function, gpu_instance, MigHandleKind::GpuInstance);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (!privileged()) return NVML_ERROR_NO_PERMISSION;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::MigProfile& p = *e.sim->scenario().gpus[e.gpu].mig[*e.mig].profile;
    if (profile_id != sim::compute_profile_of_slices(p.slices)) return NVML_ERROR_NOT_SUPPORTED;
    if (placements != nullptr) placements[0] = {0, p.slices};
    *count = 1;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpu_instance,
                                                                  unsigned int profile_id,
                                                                  nvmlComputeInstance_t* compute_instances,
                                                                  unsigned int* count) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_instance(function, gpu_instance, MigHandleKind::GpuInstance);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (!privileged()) return NVML_ERROR_NO_PERMISSION;
    const sim::MigProfile& p = *e.sim->scenario().gpus[e.gpu].mig[*e.mig].profile;
    std::vector<nvmlComputeInstance_t> list;
    if (profile_id == sim::compute_profile_of_slices(p.slices)) {
      list.push_back(
          static_cast<nvmlComputeInstance_t>(Context::mig_handle(e.gpu, *e.mig, MigHandleKind::ComputeInstance)));
    }
    return hand_out(list, compute_instances, count);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpu_instance, unsigned int id,
                                                                     nvmlComputeInstance_t* compute_instance) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_instance(function, gpu_instance, MigHandleKind::GpuInstance);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (!privileged()) return NVML_ERROR_NO_PERMISSION;
    if (compute_instance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (id != e.sim->scenario().gpus[e.gpu].mig[*e.mig].ci_id) return NVML_ERROR_NOT_FOUND;
    *compute_instance =
        static_cast<nvmlComputeInstance_t>(Context::mig_handle(e.gpu, *e.mig, MigHandleKind::ComputeInstance));
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t compute_instance,
                                                            nvmlComputeInstanceInfo_t* info) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_instance(function, compute_instance, MigHandleKind::ComputeInstance);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    fill_compute_info(*info, e.gpu, *e.mig, e.sim->scenario().gpus[e.gpu].mig[*e.mig]);
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t compute_instance,
                                                         nvmlComputeInstanceInfo_t* info) {
  return nvmlComputeInstanceGetInfo_v2(compute_instance, info);
}

}  // extern "C"
}  // namespace tarmac::nvml
