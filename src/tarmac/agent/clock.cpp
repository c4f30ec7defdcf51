#include "tarmac/agent/clock.hpp"

#include <chrono>
#include <fmt/format.h>

#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::agent {

namespace {

long long real_ns() {
  // The simulator anchors its timeline on CLOCK_REALTIME (start_real_ns), shared across processes.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class RealClock final : public Clock {
 public:
  [[nodiscard]] long long monotonic_ms() const override { return util::monotonic_ms(); }
  [[nodiscard]] long long wall_ms() const override { return util::wall_ms(); }
  void sleep_until(long long target_ms, const std::atomic<bool>& stop) const override {
    util::sleep_in_slices(*this, target_ms, 1.0, stop);
  }
  [[nodiscard]] double speed() const override { return 1.0; }
};

class SimClock final : public Clock {
 public:
  SimClock(long long start_real_ns, double speed, long long epoch_ns)
      : start_real_ns_(start_real_ns), speed_(speed), epoch_ns_(epoch_ns), mono0_ms_(util::monotonic_ms()),
        sim0_ms_(sim_ms()) {}
  [[nodiscard]] long long wall_ms() const override { return sim_ms(); }
  [[nodiscard]] long long monotonic_ms() const override {
    return sim0_ms_ + static_cast<long long>(static_cast<double>(util::monotonic_ms() - mono0_ms_) * speed_);
  }
  void sleep_until(long long target_ms, const std::atomic<bool>& stop) const override {
    util::sleep_in_slices(*this, target_ms, speed_, stop);
  }
  [[nodiscard]] double speed() const override { return speed_; }

 private:
  [[nodiscard]] long long sim_ms() const {
    const double t_ns = static_cast<double>(real_ns() - start_real_ns_) * speed_;
    return (epoch_ns_ + static_cast<long long>(t_ns)) / 1'000'000;
  }

  long long start_real_ns_;
  double speed_;
  long long epoch_ns_;
  long long mono0_ms_;
  long long sim0_ms_;
};

}  // namespace

std::unique_ptr<Clock> real_clock() { return std::make_unique<RealClock>(); }

Result<std::unique_ptr<Clock>> sim_clock(const std::string& state_dir) {
  const std::string path = state_dir + "/clock";
  const auto text = util::read_file(path);
  if (!text) {
    return make_error(Error::Code::NotFound,
                      fmt::format("cannot read the simulator's clock at {}: is this running under `tarmac sim`?", path));
  }
  long long start = -1;
  long long epoch = -1;
  double speed = 0;
  for (const auto& line : util::split(*text, '\n')) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const auto key = util::trim(std::string_view(line).substr(0, eq));
    const auto value = util::trim(std::string_view(line).substr(eq + 1));
    if (key == "start_real_ns") {
      start = util::parse_int(value).value_or(-1);
    } else if (key == "epoch_ns") {
      epoch = util::parse_int(value).value_or(-1);
    } else if (key == "speed") {
      speed = util::parse_double(value).value_or(0);
    }
  }
  if (start < 0 || epoch < 0 || !(speed > 0)) {
    return make_error(Error::Code::Invalid, fmt::format("{}: expected start_real_ns, speed and epoch_ns", path));
  }
  return std::unique_ptr<Clock>(std::make_unique<SimClock>(start, speed, epoch));
}

}  // namespace tarmac::agent
