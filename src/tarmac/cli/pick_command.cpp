#include "tarmac/cli/pick_command.hpp"

#include <CLI/CLI.hpp>
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tarmac/cli/app.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

void add_request_flags(CLI::App& cmd, RequestFlags& flags) {
  cmd.add_option("-n,--gpus", flags.n, "How many GPUs (default 1)");
  cmd.add_option("--min-free", flags.min_free, "Least free memory per GPU, like 20GiB (default: any)");
  cmd.add_option("--max-util", flags.max_util, "Most GPU utilization per GPU, in percent (default 100)");
  cmd.add_option("--mig", flags.mig,
                 "A MIG device instead of GPUs: of this profile (like 1g.18gb), or any; the smallest free one that "
                 "fits --min-free, given as its MIG-UUID in CUDA_VISIBLE_DEVICES (docs/mig.md)");
}

Result<sched::PickRequest> parse_request(const RequestFlags& flags) {
  sched::PickRequest request;
  if (flags.n == 0) return make_error(Error::Code::Invalid, "-n must be at least 1");
  request.n = flags.n;
  if (!flags.min_free.empty()) {
    const auto bytes = util::parse_size_bytes(flags.min_free);
    if (!bytes) {
      return make_error(Error::Code::Invalid,
                        fmt::format("--min-free: '{}' is not a size (like 20GiB, 512MiB)", flags.min_free));
    }
    request.min_free_bytes = *bytes;
  }
  if (flags.max_util > 100) return make_error(Error::Code::Invalid, "--max-util must be 0 to 100");
  request.max_util_pct = flags.max_util;
  if (flags.mig) request.mig = *flags.mig == "any" ? std::string() : *flags.mig;
  if (auto bad = sched::mig_request_error(request)) return make_error(Error::Code::Invalid, *bad);
  return request;
}

Result<sched::LeaseDir> open_lease_dir(const GlobalOptions& global) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return loaded.take_error();
  return open_lease_dir(loaded->config);
}

Result<sched::LeaseDir> open_lease_dir(const config::Config& config) {
  auto dir = sched::LeaseDir::open(sched::lock_dir(config.scheduler_lock_dir), config.scheduler.max_hold_ms);
  if (!dir.ok()) print_error(dir.error());
  return dir;
}

std::string visible_devices(const sched::Acquired& acquired, bool uuids) {
  if (acquired.pick.mig_uuid) return *acquired.pick.mig_uuid;  // CUDA names a MIG device by its UUID only
  std::string out;
  for (std::size_t i = 0; i < acquired.pick.chosen.size(); ++i) {
    if (!out.empty()) out += ',';
    out += uuids ? acquired.uuids[i] : std::to_string(acquired.pick.chosen[i]);
  }
  return out;
}

std::string not_enough_message(const sched::Acquired& acquired, unsigned n) {
  std::string out = fmt::format("no {} free GPU{}: {} free of {}\n", n, n == 1 ? "" : "s", acquired.pick.free.size(),
                                acquired.snapshot.devices.size());
  if (acquired.mig) {
    out = acquired.mig->empty() ? std::string("no free MIG device\n")
                                : fmt::format("no free MIG device of profile {}\n", util::terminal_text(*acquired.mig));
  }
  // A detail quotes lease files in the shared lock directory (who holds a GPU, under which job
  // id): anybody's bytes, shown escaped.
  for (const auto& e : acquired.pick.excluded) {
    out += fmt::format("  GPU {}: {}: {}\n", e.index, sched::to_string(e.reason), util::terminal_text(e.detail));
  }
  return out;
}

std::string current_user() {
  const uid_t uid = ::getuid();
  if (const passwd* pw = ::getpwuid(uid); pw != nullptr && pw->pw_name != nullptr) return pw->pw_name;
  return std::to_string(uid);
}

long long now_unix_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

namespace {

using detail::PickFlags;

int run_pick(const GlobalOptions& global, const PickFlags& flags) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return kExitUsage;
  auto plan = detail::parse_pick(flags, loaded->config.scheduler.max_hold_ms);
  if (!plan.ok()) {
    fmt::print(stderr, "tarmac pick: {}\n", plan.error().message);
    return kExitUsage;
  }
  const sched::PickRequest& request = plan->request;
  const std::optional<long long> hold_ms = plan->hold_ms;
  auto dir = open_lease_dir(loaded->config);
  if (!dir.ok()) return dir.error().code == Error::Code::Invalid ? kExitUsage : kExitCouldNotLook;
  auto backend = open_backend(global);
  if (!backend.ok()) return kExitCouldNotLook;

  const long long now = now_unix_ms();
  std::optional<sched::Lease> lease;
  std::optional<long long> held_until;
  if (hold_ms) {
    held_until = now + *hold_ms;
    // No owner: a pick's process ends at once; the expiry alone ends the hold.
    lease = sched::Lease{.uuid = {}, .pid = 0, .starttime = 0, .expires_unix_ms = *held_until,
                         .job_id = fmt::format("pick-{}-{}", ::getpid(), now), .user = current_user()};
  }
  auto acquired = sched::acquire(*dir, **backend, request, lease, now);
  if (!acquired.ok()) {
    print_error(acquired.error());
    return kExitCouldNotLook;
  }
  if (!request.mig && acquired->snapshot.devices.size() < request.n) {
    fmt::print(stderr, "tarmac pick: -n {} asks for more GPUs than there are ({})\n", request.n,
               acquired->snapshot.devices.size());
    return kExitUsage;
  }
  if (global.json) {
    fmt::print("{}\n", util::json_text(detail::pick_json(*acquired, acquired->pick.ok() ? held_until : std::nullopt), 2));
  }
  if (!acquired->pick.ok()) {
    fmt::print(stderr, "tarmac: {}", not_enough_message(*acquired, request.n));
    return kExitProblems;
  }
  if (global.json) return kExitOk;
  fmt::print("{}", detail::pick_line(*acquired, flags.format));
  return kExitOk;
}

}  // namespace

namespace detail {

Result<PickPlan> parse_pick(const PickFlags& flags, long long max_hold_ms) {
  PickPlan plan;
  TARMAC_TRY_ASSIGN(plan.request, parse_request(flags.request));
  if (flags.format != "index" && flags.format != "uuid" && flags.format != "env") {
    return make_error(Error::Code::Invalid, fmt::format("--format must be index, uuid or env, not '{}'", flags.format));
  }
  if (!flags.hold.empty()) {
    plan.hold_ms = util::parse_duration_ms(flags.hold);
    if (!plan.hold_ms || *plan.hold_ms <= 0) {
      return make_error(Error::Code::Invalid, fmt::format("--hold: '{}' is not a duration (like 30s, 10m)", flags.hold));
    }
    if (max_hold_ms > 0 && *plan.hold_ms > max_hold_ms) {
      return make_error(Error::Code::Invalid,
                        fmt::format("--hold {} is longer than this machine allows (scheduler.max_hold = {}): pick "
                                    "again when it ends, or run the work with `tarmac run`, which holds the GPUs "
                                    "as long as it runs",
                                    flags.hold, util::format_duration_ms(max_hold_ms)));
    }
  }
  return plan;
}

nlohmann::json pick_json(const sched::Acquired& a, std::optional<long long> held_until) {
  nlohmann::json j;
  j["gpus"] = nlohmann::json::array();
  for (std::size_t i = 0; i < a.pick.chosen.size(); ++i) {
    nlohmann::json g = {{"index", a.pick.chosen[i]}, {"uuid", a.uuids[i]}};
    if (a.pick.chosen_mig) g["mig"] = *a.pick.chosen_mig;  // uuid is then the MIG device's
    j["gpus"].push_back(std::move(g));
  }
  j["cuda_visible_devices"] = visible_devices(a, false);
  j["held_until_unix_ms"] = held_until ? nlohmann::json(*held_until) : nlohmann::json(nullptr);
  j["free"] = a.pick.free;
  j["excluded"] = nlohmann::json::array();
  for (const auto& e : a.pick.excluded) {
    nlohmann::json x = {{"index", e.index}, {"reason", sched::to_string(e.reason)}, {"detail", e.detail}};
    if (e.mig) x["mig"] = *e.mig;
    j["excluded"].push_back(std::move(x));
  }
  return j;
}

std::string pick_line(const sched::Acquired& acquired, const std::string& format) {
  if (format == "env") {
    return fmt::format("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={}\n", visible_devices(acquired, false));
  }
  return visible_devices(acquired, format == "uuid") + "\n";
}

}  // namespace detail

void add_pick_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<PickFlags>();
  auto* cmd = app.add_subcommand("pick", "Print the best free GPUs for a new job, race-free against other picks and runs");
  add_request_flags(*cmd, flags->request);
  cmd->add_option("--format", flags->format, "index (0,2), uuid (GPU-...), or env (CUDA_DEVICE_ORDER=... CUDA_VISIBLE_DEVICES=...)");
  cmd->add_option("--hold", flags->hold, "Lease the GPUs for this long (like 30s, 10m) so no other pick or run gets them");
  cmd->callback([&global, &exit_code, flags] { exit_code = run_pick(global, *flags); });
}

}  // namespace tarmac::cli
