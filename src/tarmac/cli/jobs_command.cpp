#include "tarmac/cli/jobs_command.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <fmt/format.h>
#include <memory>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/pick_command.hpp"
#include "tarmac/cli/table.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

using nlohmann::json;

constexpr int kAnswerTimeoutMs = 30000;

long long number_or(const json& j, const char* key, long long fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<long long>() : fallback;
}

std::string text_or(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Prints a failed answer's words; returns its exit code.
int report_failure(const char* command, const json& answer) {
  fmt::print(stderr, "tarmac {}: {}\n", command, failure_text(answer));
  return exit_code_for(answer);
}

// One request to the agent for `command`, with the connection for what follows its answer; prints
// why when it fails (no agent: exit 3).
std::optional<AgentAnswer> ask(const GlobalOptions& global, const char* command, const json& req, int& exit_code) {
  auto answer = ask_agent(agent_socket(global), req);
  if (!answer.ok()) {
    fmt::print(stderr, "tarmac {}: {} (is `tarmac agent` running? it owns the queue)\n", command,
               answer.error().message);
    exit_code = kExitCouldNotLook;
    return std::nullopt;
  }
  if (!answer->body.value("ok", false)) {
    exit_code = report_failure(command, answer->body);
    return std::nullopt;
  }
  exit_code = kExitOk;
  return std::move(*answer);
}

// One request to the agent for `command`: its answer; prints why when it fails (no agent: exit 3).
std::optional<json> request(const GlobalOptions& global, const char* command, const json& req, int& exit_code) {
  auto answer = ask(global, command, req, exit_code);
  if (!answer) return std::nullopt;
  return std::move(answer->body);
}

// The lease `waiting` once the agent gives it: backfill yields its GPUs first. The agent sends
// "started" or "ended" on `conn` within `wait_ms` (it withdraws the lease then), which is waited
// for a little longer; nullopt (said, with exit_code set) when the lease was not given.
std::optional<json> await_lease(sched::Connection& conn, const json& waiting, long long wait_ms, int& exit_code) {
  const long long id = number_or(waiting, "id", 0);
  fmt::print(stderr, "tarmac reserve: lease {}: {} (up to {})...\n", id, util::terminal_lines(text_or(waiting, "reason")),
             util::format_duration_ms(wait_ms));
  const long long give_up = util::monotonic_ms() + wait_ms + kAnswerTimeoutMs;
  for (;;) {
    auto line = conn.read_line(static_cast<int>(std::max(0LL, give_up - util::monotonic_ms())));
    if (!line.ok()) {
      fmt::print(stderr, "tarmac reserve: lease {}: no word from the agent: {}\n", id, line.error().message);
      exit_code = kExitCouldNotLook;
      return std::nullopt;
    }
    const json event = json::parse(*line, nullptr, false);
    if (!event.is_object() || !event.contains("job") || !event["job"].is_object()) continue;
    const std::string kind = text_or(event, "event");
    if (kind == "started") return event["job"];
    if (kind == "ended") {
      fmt::print(stderr, "tarmac reserve: lease {}: {}\n", id, util::terminal_lines(text_or(event["job"], "reason")));
      exit_code = kExitProblems;  // as a busy answer
      return std::nullopt;
    }
  }
}

void print_lease(const GlobalOptions& global, const json& job) {
  if (global.json) fmt::print("{}\n", util::json_text(job, 2));
  else fmt::print("{}", detail::lease_text(job, now_unix_ms()));
}

struct JobsFlags {
  bool all = false;
  std::string id;
  std::string duration;
  std::string wait = "30s";
  RequestFlags request;
  std::string name;
};

// Adds `name ID` that sends {"op": op, "id": ID} and prints the job it answers with.
void add_id_command(CLI::App& app, const GlobalOptions& global, int& exit_code, const char* name, const char* help,
                    const char* op) {
  auto flags = std::make_shared<JobsFlags>();
  auto* cmd = app.add_subcommand(name, help);
  cmd->add_option("id", flags->id, "The job's or lease's id (tarmac jobs)")->required();
  cmd->callback([&global, &exit_code, flags, name, op] {
    const auto id = detail::parse_id(flags->id);
    if (!id) {
      fmt::print(stderr, "tarmac {}: '{}' is not a job id (a number; see tarmac jobs)\n", name, flags->id);
      exit_code = kExitUsage;
      return;
    }
    auto answer = request(global, name, json{{"op", op}, {"id", *id}}, exit_code);
    if (!answer) return;
    const json& job = (*answer)["job"];
    if (global.json) fmt::print("{}\n", util::json_text(job, 2));
    else fmt::print("{} {}: {}\n", text_or(job, "kind"), *id, text_or(job, "state"));
  });
}

}  // namespace

namespace detail {

// Elements of another type than expected are left out: an answer is read, not trusted to be well formed.
std::string gpu_list(const json& job) {
  std::string out;
  if (const auto it = job.find("gpus"); it != job.end() && it->is_array()) {
    for (const auto& g : *it) {
      if (!g.is_number_integer() || g.get<long long>() < 0) continue;
      out += (out.empty() ? "" : ",") + std::to_string(g.get<long long>());
    }
  }
  return out;
}

// The MIG device a job or lease was given ("MIG-..."), or "" when it was given GPUs.
std::string given_mig(const json& job) {
  const auto it = job.find("uuids");
  if (it == job.end() || !it->is_array() || it->size() != 1 || !(*it)[0].is_string()) return "";
  const std::string uuid = (*it)[0].get<std::string>();
  return sched::is_mig_uuid(uuid) ? uuid : "";
}

// The GPUs column: "0,2", or "1 (MIG)" for a MIG device of GPU 1.
std::string gpu_column(const json& job) {
  std::string out = gpu_list(job);
  if (!out.empty() && !given_mig(job).empty()) out += " (MIG)";
  return out;
}

std::string command_text(const json& job) {
  std::string out;
  if (const auto it = job.find("argv"); it != job.end() && it->is_array()) {
    for (const auto& a : *it) {
      if (a.is_string()) out += (out.empty() ? "" : " ") + a.get<std::string>();
    }
  }
  return out;
}

std::string time_text(const json& job, long long now) {
  const long long started = number_or(job, "started_unix_ms", 0);
  const long long ended = number_or(job, "ended_unix_ms", 0);
  const long long submitted = number_or(job, "submitted_unix_ms", now);
  if (text_or(job, "kind") == "lease" && ended == 0) {
    const long long expires = number_or(job, "expires_unix_ms", 0);
    return expires > now ? "ends in " + util::format_duration_ms(expires - now) : "";
  }
  if (started == 0) return "waited " + util::format_duration_ms(std::max(0LL, (ended ? ended : now) - submitted));
  return "ran " + util::format_duration_ms(std::max(0LL, (ended ? ended : now) - started));
}

std::optional<long long> parse_id(const std::string& text) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v <= 0) return std::nullopt;
  return v;
}

void print_jobs(std::FILE* out, const json& jobs, long long now, bool color) {
  if (jobs.empty()) {
    fmt::print(out, "no jobs or leases\n");
    return;
  }
  Table table({{"ID", Align::Right}, {"USER"}, {"KIND"}, {"STATE"}, {"GPUS"}, {"TIME"}, {"EXIT", Align::Right},
               {"NAME / COMMAND"}});
  for (const auto& j : jobs) {
    const std::string state = text_or(j, "state");
    Style style = Style::Plain;
    if (state == "running" || state == "active") style = Style::Good;
    else if (state == "lost" || state == "failed" || state == "reclaimed") style = Style::Warn;
    else if (state != "queued") style = Style::Dim;
    std::string what = text_or(j, "name");
    const std::string cmd = command_text(j);
    if (!cmd.empty()) what += (what.empty() ? "" : ": ") + cmd;
    if (const auto backfill = j.find("backfill"); backfill != j.end() && backfill->is_boolean() && backfill->get<bool>()) {
      what = "[backfill] " + what;
    }
    const auto exit = j.find("exit_code");
    table.add_row({{std::to_string(number_or(j, "id", 0))},
                   {text_or(j, "user")},
                   {text_or(j, "kind")},
                   {state, style},
                   {gpu_column(j)},
                   {time_text(j, now)},
                   {exit != j.end() && exit->is_number_integer() ? std::to_string(exit->get<long long>()) : ""},
                   {what}});
  }
  table.print(out, color);
}

std::string lease_text(const json& job, long long now) {
  std::string uuids;
  if (const auto it = job.find("uuids"); it != job.end() && it->is_array()) {
    for (const auto& u : *it) {
      if (u.is_string()) uuids += (uuids.empty() ? "" : ",") + util::terminal_text(u.get<std::string>());
    }
  }
  const long long id = number_or(job, "id", 0);
  const long long expires = number_or(job, "expires_unix_ms", 0);
  const std::string left = util::format_duration_ms((std::max(0LL, expires - now) + 500) / 1000 * 1000);
  if (const std::string mig = given_mig(job); !mig.empty()) {
    // CUDA takes a MIG device by its UUID only.
    return fmt::format("lease {}: a MIG device of GPU {} for {}\n"
                       "export CUDA_VISIBLE_DEVICES={} TARMAC_JOB_ID={}\n",
                       id, gpu_list(job), left, util::terminal_text(mig), id);
  }
  return fmt::format("lease {}: GPU {} ({}) for {}\n"
                     "export CUDA_VISIBLE_DEVICES={} CUDA_DEVICE_ORDER=PCI_BUS_ID TARMAC_JOB_ID={}\n",
                     id, gpu_list(job), uuids, left, gpu_list(job), id);
}

}  // namespace detail

std::string agent_socket(const GlobalOptions& global) {
  auto loaded = load_config(global);
  return sched::socket_path(loaded.ok() ? loaded->config.scheduler.socket : std::string());
}

Result<AgentAnswer> ask_agent(const std::string& socket, const json& req, const std::vector<int>& fds,
                              int answer_timeout_ms) {
  TARMAC_TRY_ASSIGN(auto conn, sched::Connection::connect(socket));
  // Not util::json_text: a request carries argv and environment that must reach the job exactly,
  // so invalid UTF-8 in them is refused (nlohmann throws) rather than replaced.
  const auto sent = conn.send_line(req.dump(), fds);
  // An agent that refuses the connection (a cap) says why and closes at once, maybe before the
  // request is sent: its line is read even when sending failed.
  auto line = conn.read_line(sent.ok() ? answer_timeout_ms : 0);
  if (!line.ok()) return sent.ok() ? line.error() : sent.error();
  json body = json::parse(*line, nullptr, false);
  if (!body.is_object()) return make_error(Error::Code::Io, "the agent's answer is not JSON");
  return AgentAnswer{std::move(body), std::move(conn)};
}

std::string failure_text(const json& failure) { return util::terminal_lines(text_or(failure, "error")); }

int exit_code_for(const json& failure) {
  const std::string code = text_or(failure, "code");
  if (code == "busy") return kExitProblems;
  if (code == "io") return kExitCouldNotLook;
  return kExitUsage;
}

int job_exit_status(const json& job) {
  const auto it = job.find("exit_code");
  if (it != job.end() && it->is_number_integer()) return it->get<int>();
  return kExitProblems;
}

void add_jobs_commands(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  {
    auto flags = std::make_shared<JobsFlags>();
    auto* cmd = app.add_subcommand("jobs", "The agent's queue: jobs and leases that wait, run or ended in the last hour");
    cmd->add_flag("--all", flags->all, "Every job and lease in the store");
    cmd->callback([&global, &exit_code, flags] {
      auto answer = request(global, "jobs", json{{"op", "jobs"}, {"all", flags->all}}, exit_code);
      if (!answer) return;
      const json& jobs = (*answer)["jobs"];
      if (global.json) fmt::print("{}\n", util::json_text(json{{"jobs", jobs}}, 2));
      else detail::print_jobs(stdout, jobs, now_unix_ms(), use_color(global, stdout));
    });
  }
  add_id_command(app, global, exit_code, "cancel",
                 "Cancel a job (SIGTERM to its process group, SIGKILL after its grace period) or release a lease; "
                 "your own, or any as root",
                 "cancel");
  add_id_command(app, global, exit_code, "release", "End a lease (tarmac reserve) before its time", "release");
  {
    auto flags = std::make_shared<JobsFlags>();
    auto* cmd = app.add_subcommand("reserve", "Lease N free GPUs for a while for interactive work; prints the lease's "
                                              "id and the line to export");
    add_request_flags(*cmd, flags->request);
    cmd->add_option("--for", flags->duration, "How long, like 2h")->required();
    cmd->add_option("--name", flags->name, "A name for the lease");
    cmd->add_option("--wait", flags->wait,
                    "When backfill jobs hold the GPUs, how long to wait for them to yield (default 30s; 0: fail at "
                    "once, at most 10m)");
    cmd->callback([&global, &exit_code, flags] {
      auto req = parse_request(flags->request);
      if (!req.ok()) {
        fmt::print(stderr, "tarmac reserve: {}\n", req.error().message);
        exit_code = kExitUsage;
        return;
      }
      const auto ms = util::parse_duration_ms(flags->duration);
      if (!ms || *ms <= 0) {
        fmt::print(stderr, "tarmac reserve: --for: '{}' is not a duration (like 30m, 2h)\n", flags->duration);
        exit_code = kExitUsage;
        return;
      }
      const auto wait_ms = util::parse_duration_ms(flags->wait);
      if (!wait_ms || *wait_ms < 0) {
        fmt::print(stderr, "tarmac reserve: --wait: '{}' is not a duration (like 30s, 2m)\n", flags->wait);
        exit_code = kExitUsage;
        return;
      }
      auto answer = ask(global, "reserve",
                        json{{"op", "reserve"},
                             {"n", req->n},
                             {"for_ms", *ms},
                             {"wait_ms", *wait_ms},
                             {"min_free", req->min_free_bytes},
                             {"max_util", req->max_util_pct},
                             {"mig", req->mig ? json(*req->mig) : json(nullptr)},
                             {"name", flags->name}},
                        exit_code);
      if (!answer) return;
      const json& job = answer->body["job"];
      if (text_or(job, "state") != "queued") {
        print_lease(global, job);
        return;
      }
      if (auto given = await_lease(answer->conn, job, *wait_ms, exit_code)) print_lease(global, *given);
    });
  }
  {
    auto flags = std::make_shared<JobsFlags>();
    auto* cmd = app.add_subcommand("extend", "Make a lease last D longer: extend ID D");
    cmd->add_option("id", flags->id, "The lease's id")->required();
    cmd->add_option("duration", flags->duration, "How much longer, like 1h")->required();
    cmd->callback([&global, &exit_code, flags] {
      const auto id = detail::parse_id(flags->id);
      if (!id) {
        fmt::print(stderr, "tarmac extend: '{}' is not a lease id (a number; see tarmac jobs)\n", flags->id);
        exit_code = kExitUsage;
        return;
      }
      const auto ms = util::parse_duration_ms(flags->duration);
      if (!ms || *ms <= 0) {
        fmt::print(stderr, "tarmac extend: '{}' is not a duration (like 30m, 2h)\n", flags->duration);
        exit_code = kExitUsage;
        return;
      }
      auto answer = request(global, "extend", json{{"op", "extend"}, {"id", *id}, {"by_ms", *ms}}, exit_code);
      if (answer) print_lease(global, (*answer)["job"]);
    });
  }
}

}  // namespace tarmac::cli
