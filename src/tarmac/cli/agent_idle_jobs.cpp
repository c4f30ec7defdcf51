#include "tarmac/cli/agent_idle_jobs.hpp"

#include <sys/wait.h>

#include <csignal>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

constexpr long long kCommandTimeoutMs = 10'000;

std::string whose(const slurm::IdleJobDecision& d) {
  std::string who = d.info.user.empty() ? "" : d.info.user;
  if (!d.info.partition.empty()) who += (who.empty() ? "" : ", ") + d.info.partition;
  return who.empty() ? "" : " (" + who + ")";
}

alerts::Notice notice_of(const slurm::IdleJobDecision& d, alerts::Notice::Kind kind, long long ts_ms,
                         std::string summary) {
  alerts::Notice n;
  n.kind = kind;
  n.ts_ms = ts_ms;
  n.alert.rule = alerts::Rule::SlurmIdleJob;
  n.alert.severity = alerts::severity_of(alerts::Rule::SlurmIdleJob);
  n.alert.key = "slurm:" + d.job;
  if (!d.gpus.empty()) n.alert.gpu = d.gpus.front();
  n.alert.gpus = d.gpus;
  n.alert.user = d.info.user;
  n.alert.job = d.job;
  n.alert.since_ms = d.idle_since_ms;
  n.alert.summary = std::move(summary);
  return n;
}

}  // namespace

Result<int> run_bounded(const std::vector<std::string>& argv, long long timeout_ms, std::string& output) {
  util::ProcessSpec spec;
  spec.path = argv.front();
  spec.argv = argv;
  spec.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"};
  if (const char* conf = std::getenv("SLURM_CONF")) spec.env.push_back(std::string("SLURM_CONF=") + conf);
  spec.fds = {{0, util::kDevNull}};
  spec.session = util::Session::NewSession;
  TARMAC_TRY_ASSIGN(const auto status, util::run_captured(std::move(spec), timeout_ms, output));
  if (!status) return make_error(Error::Code::Io, fmt::format("{} did not finish within {} s", argv.front(), timeout_ms / 1000));
  return *status;
}

AgentIdleJobs::AgentIdleJobs(AgentIdleJobsOptions options)
    : options_(std::move(options)), policy_(options_.settings) {
  thread_ = std::thread([this] { loop(); });
}

AgentIdleJobs::~AgentIdleJobs() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AgentIdleJobs::observe(const agent::JobView& jobs, const std::map<unsigned, gpu::Activity>& classes,
                            long long ts_ms) {
  auto decisions = policy_.observe(jobs.map, jobs.infos, classes, ts_ms);
  if (decisions.empty()) return;
  {
    std::lock_guard lock(mutex_);
    for (auto& d : decisions) queue_.emplace_back(std::move(d), ts_ms);
  }
  cv_.notify_all();
}

void AgentIdleJobs::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto [d, ts_ms] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    carry_out(d);
    lock.lock();
  }
}

void AgentIdleJobs::carry_out(const slurm::IdleJobDecision& d) {
  using Kind = slurm::IdleJobDecision::Kind;
  const long long now = util::wall_ms();
  const std::string gpus = fmt::format("{}", fmt::join(d.gpus, ","));
  const std::string idle_for = util::format_duration_ms(std::max(0LL, now - d.idle_since_ms));
  const std::string job = util::terminal_text(d.job) + util::terminal_text(whose(d));
  if (d.kind == Kind::Resolved) {
    options_.announce(notice_of(d, alerts::Notice::Kind::Resolved, now,
                                fmt::format("Slurm job {} {} (GPUs {}, idle {})", job,
                                            d.gone ? "ended" : "uses its GPUs again", gpus, idle_for)));
    return;
  }
  if (d.kind == Kind::Warn) {
    const bool cancels = options_.settings.action == slurm::IdleJobAction::Cancel;
    options_.announce(notice_of(
        d, alerts::Notice::Kind::Firing, now,
        fmt::format("Slurm job {} has held GPUs {} idle for {}{}", job, gpus, idle_for,
                    cancels ? fmt::format("; it is cancelled at {} idle",
                                          util::format_duration_ms(options_.settings.cancel_after_ms))
                            : "")));
    return;
  }
  // Cancel: never an interactive job unless allowed; never on a guess.
  const auto say = [&](std::string what) {
    options_.log(util::LogLevel::Warning, "slurm idle job: " + what);
    options_.announce(notice_of(d, alerts::Notice::Kind::Firing, now, std::move(what)));
  };
  if (options_.scontrol.empty() || options_.scancel.empty()) {
    say(fmt::format("Slurm job {} held GPUs {} idle for {}, not cancelled: scontrol and scancel are not on PATH", job,
                    gpus, idle_for));
    return;
  }
  std::string shown;
  auto r = run_bounded({options_.scontrol, "show", "job", "-o", d.job}, kCommandTimeoutMs, shown);
  const auto interactive = r.ok() && WIFEXITED(*r) && WEXITSTATUS(*r) == 0 ? slurm::interactive_from_scontrol(shown)
                                                                            : std::nullopt;
  if (!interactive) {
    say(fmt::format("Slurm job {} held GPUs {} idle for {}, not cancelled: scontrol show job did not say whether it "
                    "is interactive ({})",
                    job, gpus, idle_for, r.ok() ? util::terminal_text(shown.substr(0, 200)) : r.error().message));
    return;
  }
  if (*interactive && !options_.settings.cancel_interactive) {
    say(fmt::format("Slurm job {} held GPUs {} idle for {}, not cancelled: it is interactive "
                    "(slurm.idle_job_cancel_interactive is off)",
                    job, gpus, idle_for));
    return;
  }
  std::string out;
  r = run_bounded({options_.scancel, d.job}, kCommandTimeoutMs, out);
  if (!r.ok() || !WIFEXITED(*r) || WEXITSTATUS(*r) != 0) {
    say(fmt::format("Slurm job {}: scancel failed: {}", job,
                    r.ok() ? util::terminal_text(out.substr(0, 200)) : r.error().message));
    return;
  }
  say(fmt::format("cancelled Slurm job {}: it held GPUs {} idle for {} (slurm.idle_job_action = cancel)", job, gpus,
                  idle_for));
}

}  // namespace tarmac::cli
