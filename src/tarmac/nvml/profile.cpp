#include "tarmac/nvml/profile.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <mutex>
#include <vector>

namespace tarmac::nvml {
namespace {

// One index per row of the table, in its order, then the extra rows.
enum Row : std::size_t {
#define X(name, params, need) row_##name,
#include "tarmac/nvml/nvml_functions.def"
#undef X
  row_load,
  row_count
};

constexpr std::array<const char*, row_count> kNames = {
#define X(name, params, need) #name,
#include "tarmac/nvml/nvml_functions.def"
#undef X
    "dlopen"};

struct Stat {
  std::int64_t calls = 0;
  std::int64_t total_ns = 0;
  std::int64_t max_ns = 0;
};

std::mutex g_mutex;
std::array<Stat, row_count> g_stats{};

void add(std::size_t row, std::int64_t ns) {
  const std::lock_guard lock(g_mutex);
  Stat& s = g_stats[row];
  ++s.calls;
  s.total_ns += ns;
  s.max_ns = std::max(s.max_ns, ns);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The timed stand-in of one entry point: the real pointer, kept per row.
template <std::size_t R, typename F>
struct Timed;
template <std::size_t R, typename... A>
struct Timed<R, nvmlReturn_t (*)(A...)> {
  // Atomic: the agent's threads open libraries of their own (each open stores the same entry point,
  // or a reloaded library's new one) while others call through.
  static inline std::atomic<nvmlReturn_t (*)(A...)> real{nullptr};
  static nvmlReturn_t call(A... args) {
    const std::int64_t t0 = now_ns();
    const nvmlReturn_t rc = real.load(std::memory_order_acquire)(args...);
    add(R, now_ns() - t0);
    return rc;
  }
};

}  // namespace

bool profile_wanted() {
  const char* env = std::getenv("TARMAC_NVML_PROFILE");
  return env != nullptr && *env != '\0' && std::string_view(env) != "0";
}

void profile_calls(Functions& fn) {
#define X(name, params, need)                                                  \
  if (fn.name != nullptr) {                                                    \
    Timed<row_##name, PFN_##name>::real.store(fn.name, std::memory_order_release); \
    fn.name = &Timed<row_##name, PFN_##name>::call;                            \
  }
#include "tarmac/nvml/nvml_functions.def"
#undef X
  // One table for the whole process (a command, or the agent with every library its threads open).
  static std::once_flag printed;
  std::call_once(printed, [] { std::atexit([] { std::fputs(profile_table().c_str(), stderr); }); });
}

void profile_load(std::int64_t ns) { add(row_load, ns); }

std::string profile_table() {
  std::vector<std::size_t> rows;
  std::array<Stat, row_count> stats{};
  {
    const std::lock_guard lock(g_mutex);
    stats = g_stats;
  }
  std::int64_t total = 0;
  for (std::size_t r = 0; r < row_count; ++r) {
    if (stats[r].calls == 0) continue;
    rows.push_back(r);
    total += stats[r].total_ns;
  }
  std::sort(rows.begin(), rows.end(), [&](std::size_t a, std::size_t b) { return stats[a].total_ns > stats[b].total_ns; });
  std::string out = fmt::format("tarmac: NVML profile (TARMAC_NVML_PROFILE): {:.1f} ms in {} functions\n",
                                static_cast<double>(total) / 1e6, rows.size());
  out += fmt::format("  {:<48} {:>7} {:>10} {:>10}\n", "FUNCTION", "CALLS", "TOTAL ms", "MAX ms");
  for (const std::size_t r : rows) {
    out += fmt::format("  {:<48} {:>7} {:>10.3f} {:>10.3f}\n", kNames[r], stats[r].calls,
                       static_cast<double>(stats[r].total_ns) / 1e6, static_cast<double>(stats[r].max_ns) / 1e6);
  }
  return out;
}

}  // namespace tarmac::nvml
