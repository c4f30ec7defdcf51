// NVML's GPU-instance and compute-instance declarations, which only the simulator needs (tarmac
// reads a MIG device's profile from its name and its ids from the device handle): as nvml.h
// declares them (CUDA 11.8's header; pynvml 12.550's ctypes structs have the same fields, order
// and version numbers), checked through pynvml by tests/compat/test_pynvml.py.
#pragma once

#include "tarmac/nvml/nvml_types.hpp"

namespace tarmac::nvml {

using nvmlGpuInstance_t = struct nvmlGpuInstance_st*;
using nvmlComputeInstance_t = struct nvmlComputeInstance_st*;

inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

struct nvmlGpuInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};

struct nvmlGpuInstanceProfileInfo_v2_t {
  unsigned int version;
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};
inline constexpr unsigned int nvmlGpuInstanceProfileInfo_v2 =
    struct_version(sizeof(nvmlGpuInstanceProfileInfo_v2_t), 2);
static_assert(nvmlGpuInstanceProfileInfo_v2 == 0x02000098u);  // pynvml's value

struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};

struct nvmlComputeInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

struct nvmlComputeInstanceProfileInfo_t {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};

struct nvmlComputeInstanceProfileInfo_v2_t {
  unsigned int version;
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};
inline constexpr unsigned int nvmlComputeInstanceProfileInfo_v2 =
    struct_version(sizeof(nvmlComputeInstanceProfileInfo_v2_t), 2);
static_assert(nvmlComputeInstanceProfileInfo_v2 == 0x02000088u);  // pynvml's value

struct nvmlComputeInstanceInfo_t {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
};

// The entry points only the simulator declares (sim/lib/exports_mig.cpp defines them).
extern "C" {
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t* info);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info);
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profile_id,
                                                           nvmlGpuInstancePlacement_t* placements, unsigned int* count);
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profile_id,
                                                       unsigned int* count);
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstance_t* gpu_instances,
                                       unsigned int* count);
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t* gpu_instance);
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpu_instance, nvmlGpuInstanceInfo_t* info);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpu_instance, unsigned int profile,
                                                          unsigned int eng_profile,
                                                          nvmlComputeInstanceProfileInfo_v2_t* info);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpu_instance, unsigned int profile,
                                                         unsigned int eng_profile, nvmlComputeInstanceProfileInfo_t* info);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpu_instance, unsigned int profile_id,
                                                               unsigned int* count);
nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpu_instance,
                                                                unsigned int profile_id,
                                                                nvmlComputeInstancePlacement_t* placements,
                                                                unsigned int* count);
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpu_instance, unsigned int profile_id,
                                               nvmlComputeInstance_t* compute_instances, unsigned int* count);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpu_instance, unsigned int id,
                                                  nvmlComputeInstance_t* compute_instance);
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t compute_instance, nvmlComputeInstanceInfo_t* info);
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t compute_instance, nvmlComputeInstanceInfo_t* info);
}

}  // namespace tarmac::nvml
