// `tarmac job-shim SPEC`: the wrapper the agent starts for every job (docs/scheduler.md "The wrapper
// and persistence"). Not for people: it has no options and is hidden from --help.
//
// It inherits the job's lock on descriptor 3 (held as long as it lives), writes its pid into it,
// starts the job's command as its user in a new process group, records that it started (ID.run),
// supervises it, and writes its status (ID.exit) atomically before it exits. It outlives the agent.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdint>
#include <fmt/format.h>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/pick_command.hpp"
#include "tarmac/cli/shim_command.hpp"
#include "tarmac/sched/job.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/sched/supervise.hpp"
#include "tarmac/util/fs.hpp"

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
  auto job = detail::parse_shim_spec(text ? json::parse(*text, nullptr, false) : json(), ::geteuid() == 0);
  if (!job.ok()) {
    fmt::print(stderr, "tarmac job-shim: cannot read the job's spec {}: {}\n", spec_path, job.error().message);
    return kExitUsage;
  }
  const long long id = job->id;
  const std::string& jobs_dir = job->jobs_dir;
  const auto job_file = [&](const char* ext) { return fmt::format("{}/{}.{}", jobs_dir, id, ext); };

  const sigset_t handled = sched::handled_signals();
  sigset_t original;
  ::sigprocmask(SIG_BLOCK, &handled, &original);
  // The agent starts the wrapper with these already blocked (a stop that comes early waits); the
  // job gets them unblocked, as a process started from a shell would.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sigismember(&handled, sig) == 1) sigdelset(&original, sig);
  }
  (void)::prctl(PR_SET_CHILD_SUBREAPER, 1);

  const util::ProcessSpec& what = job->what;
  const sched::Limits& limits = job->limits;

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

namespace detail {

namespace {

// A list of strings, or nullopt when it is there as anything else.
std::optional<std::vector<std::string>> string_list(const json& spec, const char* key) {
  std::vector<std::string> out;
  const auto it = spec.find(key);
  if (it == spec.end()) return out;
  if (!it->is_array()) return std::nullopt;
  for (const auto& v : *it) {
    if (!v.is_string()) return std::nullopt;
    out.push_back(v.get<std::string>());
  }
  return out;
}

// An id the kernel takes: 0 when absent, nullopt when it is not one.
std::optional<unsigned> id_field(const json& spec, const char* key) {
  const auto it = spec.find(key);
  if (it == spec.end()) return 0U;
  // (uid_t)-1 is setresuid's "no change", never a user.
  if (!it->is_number_integer() || it->get<long long>() < 0 ||
      it->get<long long>() >= static_cast<long long>(std::numeric_limits<std::uint32_t>::max())) {
    return std::nullopt;
  }
  return it->get<unsigned>();
}

}  // namespace

Result<ShimJob> parse_shim_spec(const json& spec, bool as_root) {
  const auto invalid = [](const char* why) { return make_error(Error::Code::Invalid, why); };
  if (!spec.is_object()) return invalid("not a JSON object");
  ShimJob job;
  job.id = sched::json_field<long long>(spec, "id").value_or(0);
  job.jobs_dir = sched::json_field<std::string>(spec, "jobs_dir").value_or("");
  // The files the wrapper writes are <jobs_dir>/<id>.run and .exit: never "/0.exit".
  if (job.id <= 0) return invalid("no job id");
  if (!job.jobs_dir.starts_with("/")) return invalid("no absolute jobs_dir");
  job.what.path = sched::json_field<std::string>(spec, "path").value_or("");
  job.what.cwd = sched::json_field<std::string>(spec, "cwd").value_or("");
  auto argv = string_list(spec, "argv");
  auto env = string_list(spec, "env");
  if (!argv || !env) return invalid("argv and env must be lists of strings");
  job.what.argv = std::move(*argv);
  job.what.env = std::move(*env);
  const auto uid = id_field(spec, "uid");
  const auto gid = id_field(spec, "gid");
  if (!uid || !gid) return invalid("uid and gid must be ids");
  if (as_root && *uid != 0) {
    // Root starts the job as its submitter: the uid, gid and groups the agent took from the
    // submitter's socket credentials, never the groups of a name in the group file.
    job.what.user = util::Identity{.uid = *uid, .gid = *gid, .groups = sched::groups_of(spec)};
  }
  job.limits.time_ms = sched::json_field<long long>(spec, "time_ms");
  job.limits.grace_ms = sched::json_field<long long>(spec, "grace_ms").value_or(job.limits.grace_ms);
  return job;
}

}  // namespace detail

void add_shim_command(CLI::App& app, int& exit_code) {
  auto spec = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("job-shim", "");  // an empty description hides it from --help
  cmd->group("");
  cmd->add_option("spec", *spec, "The job's spec file")->required();
  cmd->callback([&exit_code, spec] { exit_code = run_shim(*spec); });
}

}  // namespace tarmac::cli
