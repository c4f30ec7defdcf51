"""The same data as tarmac's full snapshot, read through NVIDIA's pynvml: prints CPU microseconds
per snapshot. Run under the simulator (bench/compare_snapshot.sh)."""
import sys
import time

import pynvml as n


def safe(fn, *args):
    try:
        return fn(*args)
    except n.NVMLError:
        return None


def snapshot():
    out = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        out.append((
            safe(n.nvmlDeviceGetName, h), safe(n.nvmlDeviceGetUUID, h),
            safe(n.nvmlDeviceGetMemoryInfo, h, n.nvmlMemory_v2), safe(n.nvmlDeviceGetUtilizationRates, h),
            safe(n.nvmlDeviceGetEncoderUtilization, h), safe(n.nvmlDeviceGetDecoderUtilization, h),
            safe(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU), safe(n.nvmlDeviceGetFanSpeed, h),
            safe(n.nvmlDeviceGetPowerUsage, h), safe(n.nvmlDeviceGetEnforcedPowerLimit, h),
            safe(n.nvmlDeviceGetPowerManagementLimit, h), safe(n.nvmlDeviceGetTotalEnergyConsumption, h),
            [safe(n.nvmlDeviceGetClockInfo, h, c) for c in range(4)],
            safe(n.nvmlDeviceGetPerformanceState, h), safe(n.nvmlDeviceGetCurrentClocksThrottleReasons, h),
            safe(n.nvmlDeviceGetCurrPcieLinkGeneration, h), safe(n.nvmlDeviceGetCurrPcieLinkWidth, h),
            safe(n.nvmlDeviceGetPersistenceMode, h), safe(n.nvmlDeviceGetComputeMode, h),
            safe(n.nvmlDeviceGetEccMode, h), safe(n.nvmlDeviceGetMigMode, h),
            safe(n.nvmlDeviceGetComputeRunningProcesses, h), safe(n.nvmlDeviceGetGraphicsRunningProcesses, h),
        ))
    return out


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    n.nvmlInit()
    snapshot()  # warm: pynvml looks each function up on first use
    t0 = time.process_time()
    for _ in range(rounds):
        snapshot()
    cpu = time.process_time() - t0
    print(f"{cpu / rounds * 1e6:.1f}")
    n.nvmlShutdown()


if __name__ == "__main__":
    main()
