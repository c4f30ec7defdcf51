"""Run under the simulator by test_mig.py: reads the MIG layout of every GPU through NVIDIA's
pynvml exactly as its users do (mode, MIG device handles, their names, UUIDs, memory, instance ids,
the GPU instance's info and profile) and prints it as JSON. Does no checking itself."""
import json

import pynvml as N


def error_code(fn, *args):
    try:
        fn(*args)
        return 0
    except N.NVMLError as e:
        return e.value


def text(value):
    return value.decode() if isinstance(value, bytes) else value


N.nvmlInit()
out = []
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    current, pending = N.nvmlDeviceGetMigMode(h)
    gpu = {"index": i, "current": current, "pending": pending,
           "max": N.nvmlDeviceGetMaxMigDeviceCount(h),
           "utilization_error": error_code(N.nvmlDeviceGetUtilizationRates, h), "mig": []}
    for m in range(gpu["max"]):
        try:
            d = N.nvmlDeviceGetMigDeviceHandleByIndex(h, m)
        except N.NVMLError_NotFound:
            continue
        gi_id = N.nvmlDeviceGetGpuInstanceId(d)
        gi = N.nvmlDeviceGetGpuInstanceById(h, gi_id)
        info = N.nvmlGpuInstanceGetInfo(gi)
        mem = N.nvmlDeviceGetMemoryInfo(d)
        gpu["mig"].append({
            "index": m, "name": text(N.nvmlDeviceGetName(d)), "uuid": text(N.nvmlDeviceGetUUID(d)),
            # pynvml returns nvmlDeviceIsMigDeviceHandle's c_uint itself
            "is_mig": N.nvmlDeviceIsMigDeviceHandle(d).value,
            "gi": gi_id, "ci": N.nvmlDeviceGetComputeInstanceId(d),
            "parent_is_gpu": N.nvmlDeviceGetUUID(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(d))
            == N.nvmlDeviceGetUUID(h),
            "profile_id": info.profileId, "placement": [info.placement.start, info.placement.size],
            "total_mib": mem.total // (1024 * 1024), "used_mib": mem.used // (1024 * 1024),
            "slices": N.nvmlDeviceGetAttributes(d).gpuInstanceSliceCount,
            "utilization_error": error_code(N.nvmlDeviceGetUtilizationRates, d)})
    if current == 1:
        p = N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
        gpu["profile_1_slice"] = {"id": p.id, "name": text(p.name), "memory": p.memorySizeMB,
                                  "instances": p.instanceCount, "sms": p.multiprocessorCount}
    out.append(gpu)
N.nvmlShutdown()
print(json.dumps(out))
