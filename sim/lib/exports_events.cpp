// Event sets: XID and ECC events from the scenario's timeline and runtime faults.
#include <algorithm>
#include <chrono>
#include <thread>

#include "context.hpp"

namespace tarmac::nvml {

using sim::lib::Context;
using sim::lib::EventSetState;
using sim::lib::guarded;

namespace {

constexpr long long kPollNs = 10'000'000;  // how often a waiting call looks for new events

EventSetState* lookup(nvmlEventSet_t set) {
  auto* state = reinterpret_cast<EventSetState*>(set);
  return Context::get().event_sets.count(state) != 0 ? state : nullptr;
}

unsigned long long supported_events(const sim::GpuSpec& gpu) {
  unsigned long long types = nvmlEventTypeXidCriticalError | nvmlEventTypePState | nvmlEventTypeClock;
  if (gpu.ecc_enabled == true) types |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
  return types;
}

unsigned long long mask_for(const EventSetState& set, unsigned gpu) {
  unsigned long long mask = 0;
  for (const auto& [g, m] : set.registered) mask |= g == gpu ? m : 0;
  return mask;
}

// Waits up to timeout_ms (real time) for the next registered event; v1 fills only the fields the
// pre-MIG struct had.
nvmlReturn_t wait(const char* function, nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms, bool v2) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto e = Context::get().enter_system(function);
  for (;;) {
    if (e.rc != NVML_SUCCESS) return e.rc;
    EventSetState* state = lookup(set);
    if (state == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::optional<double> next_future;
    for (const sim::EventSpec& ev : e.sim->faults().events()) {
      if (ev.at <= state->created_t || (mask_for(*state, ev.gpu) & ev.type) == 0) continue;
      if (ev.at > e.t) {
        next_future = next_future ? std::min(*next_future, ev.at) : ev.at;
        continue;
      }
      if (!state->delivered.insert({ev.gpu, ev.at, ev.type, ev.data}).second) continue;
      data->device = Context::handle(ev.gpu);
      data->eventType = ev.type;
      data->eventData = ev.data;
      if (v2) {
        data->gpuInstanceId = 0xFFFFFFFFu;
        data->computeInstanceId = 0xFFFFFFFFu;
      }
      return NVML_SUCCESS;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return NVML_ERROR_TIMEOUT;
    long long sleep_ns = std::min<long long>(kPollNs, std::chrono::nanoseconds(deadline - now).count());
    if (next_future) sleep_ns = std::max(0LL, std::min(sleep_ns, e.sim->clock().real_ns_until(*next_future)));
    e.lock.unlock();  // other threads' calls go on while this one waits
    std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns + 1));
    e = Context::get().relock();
  }
}

}  // namespace

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    auto* state = new EventSetState{};
    state->created_t = e.t;
    Context::get().event_sets.insert(state);
    *set = reinterpret_cast<nvmlEventSet_t>(state);
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* event_types) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (event_types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *event_types = supported_events(e.sim->scenario().gpus[e.gpu]);
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long event_types,
                                                        nvmlEventSet_t set) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    EventSetState* state = lookup(set);
    if (state == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if ((event_types & ~supported_events(e.sim->scenario().gpus[e.gpu])) != 0) return NVML_ERROR_NOT_SUPPORTED;
    state->registered.emplace_back(e.gpu, event_types);
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  const char* const function = __func__;
  return guarded([&] { return wait(function, set, data, timeout_ms, true); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  const char* const function = __func__;
  return guarded([&] { return wait(function, set, data, timeout_ms, false); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    EventSetState* state = lookup(set);
    if (state == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    Context::get().event_sets.erase(state);
    delete state;
    return NVML_SUCCESS;
  });
}

}  // extern "C"
}  // namespace tarmac::nvml
