"""Run under the simulator by test_pynvml.py: reads a few values through NVIDIA's pynvml exactly as
its users do (per-process utilization through both of its functions included), plus the v1 process
call and the struct-version check through pynvml's own library handle, and prints them as JSON.
Does no checking itself."""
import ctypes
import json

import pynvml as N


class ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: the 16-byte record of the unversioned process functions."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


def processes_v1(handle):
    """nvmlDeviceGetComputeRunningProcesses (unversioned) with the count=0 handshake."""
    fn = N._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")
    count = ctypes.c_uint(0)
    first = fn(handle, ctypes.byref(count), None)
    needed = count.value
    buf = (ProcessInfoV1 * (needed + 2))()
    count = ctypes.c_uint(needed + 2)
    second = fn(handle, ctypes.byref(count), buf)
    return {"first_return": first, "needed": needed, "second_return": second,
            "records": [{"pid": buf[i].pid, "used": buf[i].usedGpuMemory}
                        for i in range(count.value)]}


def memory_v2_with_version(handle, version):
    """nvmlDeviceGetMemoryInfo_v2 called with an arbitrary struct version; returns the code."""
    mem = N.c_nvmlMemory_v2_t()
    mem.version = version
    return N._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")(handle, ctypes.byref(mem))


def process_utilization(handle):
    """Per-process samples as pynvml's users read them: the older function and the versioned one
    (lastSeen 0: every sample the driver keeps), or the error each raised."""
    out = {}
    for key, fn in (("legacy", N.nvmlDeviceGetProcessUtilization),
                    ("info", N.nvmlDeviceGetProcessesUtilizationInfo)):
        try:
            out[key] = [{"pid": s.pid, "sm": s.smUtil, "mem": s.memUtil} for s in fn(handle, 0)]
        except N.NVMLError as e:
            out[key] = f"NVMLError {e.value}"
    return out


def main():
    N.nvmlInit()
    out = {"count": N.nvmlDeviceGetCount(), "gpus": []}
    for i in range(out["count"]):
        h = N.nvmlDeviceGetHandleByIndex(i)
        m1 = N.nvmlDeviceGetMemoryInfo(h)
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        out["gpus"].append({
            "index": N.nvmlDeviceGetIndex(h),
            "name": N.nvmlDeviceGetName(h),
            "uuid": N.nvmlDeviceGetUUID(h),
            "memory_v1": {"total": m1.total, "free": m1.free, "used": m1.used},
            "memory_v2": {"version": m2.version, "total": m2.total, "reserved": m2.reserved,
                          "free": m2.free, "used": m2.used},
            "memory_v2_bad_version": memory_v2_with_version(h, ctypes.sizeof(N.c_nvmlMemory_v2_t)
                                                            | (1 << 24)),
            "utilization": N.nvmlDeviceGetUtilizationRates(h).gpu,
            "temperature": N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU),
            "power_mw": N.nvmlDeviceGetPowerUsage(h),
            "processes_v3": [{"pid": p.pid, "used": p.usedGpuMemory}
                             for p in N.nvmlDeviceGetComputeRunningProcesses_v3(h)],
            "processes_v1": processes_v1(h),
            "sizeof_v1_record": ctypes.sizeof(ProcessInfoV1),
            "process_utilization": process_utilization(h),
        })
    N.nvmlShutdown()
    print(json.dumps(out, default=lambda b: b.decode() if isinstance(b, bytes) else str(b)))


if __name__ == "__main__":
    main()
