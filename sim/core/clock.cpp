#include "clock.hpp"

#include <time.h>

#include <cmath>
#include <fmt/format.h>

#include "state_dir.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sim {

long long realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

double SimClock::seconds_at(long long real_ns) const {
  const double elapsed = static_cast<double>(real_ns - spec_.start_real_ns) / 1e9;
  return std::max(0.0, elapsed * spec_.speed);
}

long long SimClock::wall_ns_at(double sim_seconds) const {
  return spec_.epoch_ns + static_cast<long long>(std::llround(sim_seconds * 1e9));
}

long long SimClock::real_ns_at(double sim_seconds) const {
  return spec_.start_real_ns + static_cast<long long>(std::llround(sim_seconds / spec_.speed * 1e9));
}

long long SimClock::real_ns_until(double sim_seconds) const {
  const double due_real = static_cast<double>(spec_.start_real_ns) + sim_seconds / spec_.speed * 1e9;
  return std::max(0LL, static_cast<long long>(std::ceil(due_real)) - now_());
}

Result<ClockSpec> read_clock_file(const std::filesystem::path& path) {
  TARMAC_TRY_ASSIGN(auto values, read_key_values(path));
  ClockSpec spec;
  bool have_start = false;
  for (const auto& [key, value] : values) {
    if (key == "start_real_ns") {
      auto v = util::parse_int(value);
      if (!v) break;
      spec.start_real_ns = *v;
      have_start = true;
    } else if (key == "speed") {
      auto v = util::parse_double(value);
      if (!v || *v <= 0) return make_error(Error::Code::Invalid, fmt::format("{}: bad speed '{}'", path.string(), value));
      spec.speed = *v;
    } else if (key == "epoch_ns") {
      if (auto v = util::parse_int(value)) spec.epoch_ns = *v;
    }
  }
  if (!have_start) return make_error(Error::Code::Invalid, fmt::format("{}: no start_real_ns", path.string()));
  if (spec.epoch_ns == 0) spec.epoch_ns = spec.start_real_ns;
  return spec;
}

Result<void> write_clock_file(const std::filesystem::path& path, const ClockSpec& spec) {
  return write_file_atomic(path, fmt::format("start_real_ns={}\nspeed={}\nepoch_ns={}\n", spec.start_real_ns,
                                             spec.speed, spec.epoch_ns));
}

}  // namespace tarmac::sim
