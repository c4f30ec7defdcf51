// `tarmac job-shim SPEC`: the wrapper the agent starts for every job (docs/scheduler.md "The wrapper
// and persistence"). Not for people: it has no options and is hidden from --help.
//
// It inherits the job's lock on descriptor 3 (held as long as it lives), writes its pid into it,
// starts the job's command as its user in a new process group, records that it started (ID.run),
// supervises it, and writes its status (ID.exit) atomically before it exits. It outlives the agent.
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/jobs_command.hpp"
#include "tarmac/cli/pick_command.hpp"
#include "tarmac/sched/job.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/sched/supervise.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/process.hpp"

namespace tarmac::cli {

namespace {

using nlohmann::json;

constexpr int kLockFd = 3;

int run_shim(const std::string& spec_path) {
  // The lock first: its content says which process holds it, for an agent that restarts.
  if (::fcntl(kLockFd, F_SETFD, FD_CLOEXEC) != 0) {
    fmt::print(stderr, "tarmac job-shim: no job lock on descriptor 3: this command is started by the agent\n");
    return kExitUsage;
  }
  const std::string holder =
      fmt::format("{} {}\n", ::getpid(), sched::process_starttime(::getpid()).value_or(0));
  if (::ftruncate(kLockFd, 0) != 0 || ::pwrite(kLockFd, holder.data(), holder.size(), 0) < 0) {
    fmt::print(stderr, "tarmac job-shim: cannot write the job lock\n");
  }
  const auto text = util::read_file(spec_path);
  const json spec = text ? json::parse(*text, nullptr, false) : json();
  if (!spec.is_object()) {
    fmt::print(stderr, "tarmac job-shim: cannot read the job's spec {}\n", spec_path);
    return kExitUsage;
  }
  const long long id = spec.value("id", 0LL);
  const std::string jobs_dir = spec.value("jobs_dir", std::string());
  const auto job_file = [&](const char* ext) { return fmt::format("{}/{}.{}", jobs_dir, id, ext); };

  const sigset_t handled = sched::handled_signals();
  sigset_t original;
  ::sigprocmask(SIG_BLOCK, &handled, &original);
  (void)::prctl(PR_SET_CHILD_SUBREAPER, 1);

  util::ProcessSpec what;
  what.path = spec.value("path", std::string());
  what.argv = spec.value("argv", std::vector<std::string>{});
  what.env = spec.value("env", std::vector<std::string>{});
  what.cwd = spec.value("cwd", std::string());
  const auto uid = static_cast<uid_t>(spec.value("uid", 0U));
  const auto gid = static_cast<gid_t>(spec.value("gid", 0U));
  if (::geteuid() == 0 && uid != 0) {
    // Root starts the job as its submitter: the uid, gid and groups the agent took from the
    // submitter's socket credentials, never the groups of a name in the group file.
    what.user = util::Identity{.uid = uid, .gid = gid, .groups = sched::groups_of(spec)};
  }
  sched::Limits limits;
  if (spec.contains("time_ms") && spec["time_ms"].is_number_integer()) limits.time_ms = spec["time_ms"].get<long long>();
  limits.grace_ms = spec.value("grace_ms", 10000LL);

  int status = 0;
  const auto child = sched::spawn(what, original);
  if (!child.ok()) {
    fmt::print(stderr, "tarmac: {}\n", child.error().message);
    status = sched::not_started_code(child.error()) << 8;
  } else {
    (void)util::write_file_atomically(job_file("run"), fmt::format("{} {}\n", child->pid, now_unix_ms()));
    status = sched::supervise(child->pid, what.argv.empty() ? what.path : what.argv.front(), limits, handled);
  }
  const int code = sched::shell_status(status);
  if (!util::write_file_atomically(job_file("exit"), fmt::format("{} {}\n", code, now_unix_ms()))) {
    fmt::print(stderr, "tarmac job-shim: cannot record job {}'s exit status in {}\n", id, jobs_dir);
    return kExitCouldNotLook;
  }
  return kExitOk;
}

}  // namespace

void add_shim_command(CLI::App& app, int& exit_code) {
  auto spec = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("job-shim", "");  // an empty description hides it from --help
  cmd->group("");
  cmd->add_option("spec", *spec, "The job's spec file")->required();
  cmd->callback([&exit_code, spec] { exit_code = run_shim(*spec); });
}

}  // namespace tarmac::cli
