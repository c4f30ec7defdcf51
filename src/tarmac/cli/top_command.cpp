#include "tarmac/cli/top_command.hpp"

#include <CLI/CLI.hpp>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <clocale>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/jobs_command.hpp"
#include "tarmac/cli/status.hpp"
#include "tarmac/cli/status_source.hpp"
#include "tarmac/diagnose/backfill_json.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/tui/actions.hpp"
#include "tarmac/tui/layout.hpp"
#include "tarmac/tui/sources.hpp"
#include "tarmac/tui/terminal.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/process.hpp"

namespace tarmac::cli {

namespace {

struct TopOptions {
  double interval_s = 1.0;
  bool once = false;
  bool ascii = false;
  bool readonly = false;
  bool tree = false;
  bool direct = false;  // --direct: NVML, never the agent
  std::vector<std::string> hosts;  // agents; "local" for this machine
  std::string sort = "mem";
};

constexpr long long kHistorySeconds = 600;

std::optional<tui::Column> sort_column(const std::string& name) {
  static const std::pair<const char*, tui::Column> kNames[] = {
      {"gpu", tui::Column::Gpu}, {"pid", tui::Column::Pid}, {"user", tui::Column::User}, {"mem", tui::Column::Mem},
      {"sm", tui::Column::Sm},   {"cpu", tui::Column::Cpu}, {"rss", tui::Column::Rss},   {"age", tui::Column::Age},
      {"command", tui::Column::Command}};
  for (const auto& [n, c] : kNames) {
    if (name == n) return c;
  }
  return std::nullopt;
}

// One source per host, and the model they feed.
struct Sources {
  tui::Model model;
  std::vector<std::unique_ptr<tui::Poller>> pollers;  // by host index
  std::optional<std::size_t> local;                  // the index of this machine, if shown
};

// The local reader's first read also brings the local agent's history, when one answers on the
// loopback address the configuration names (the graphs are then full from the first frame).
// The scheduler's live leases by GPU UUID ("job 12 alice"), read without its lock (nothing is
// removed); none when there is no lock directory.
tui::LocalReader::Leases lease_reader(const config::Config& config) {
  return [dir = sched::lock_dir(config.scheduler_lock_dir), max_hold = config.scheduler.max_hold_ms] {
    std::vector<tui::LocalReader::Lease> out;
    auto leases_dir = sched::LeaseDir::open(dir, max_hold);
    if (!leases_dir.ok()) return out;
    auto leases = leases_dir->live_leases(util::wall_ms(), sched::LeaseDir::StaleFiles::Keep);
    if (!leases.ok()) return out;
    for (const auto& l : *leases) {
      tui::LocalReader::Lease t;
      t.uuid = l.uuid;
      t.job = l.job_id.empty() ? "" : "job " + l.job_id;
      t.label = lease_label(l);
      t.cancel_id = cancel_id(l);
      t.owner_pid = l.pid > 1 ? static_cast<unsigned>(l.pid) : 0;
      t.owner_ticks = l.starttime;
      out.push_back(std::move(t));
    }
    return out;
  };
}

// The scheduler's job that `row`'s process runs in, and the lease's user: the lease whose owner
// process (pid and start time, checked now) is the process or one of its ancestors. Not the
// process's own TARMAC_JOB_ID: its owner can set that to anyone's job. nullopt, with `why`, when
// none is.
std::optional<std::pair<std::string, std::string>> owning_job(const config::Config& config, const host::ProcReader& proc,
                                                              const tui::Row& row, std::string& why) {
  const auto me = proc.stat(row.pid);
  if (!me || me->start_time_unix != row.start_time_unix) {
    why = fmt::format("PID {} has ended, or its pid names another process now", row.pid);
    return std::nullopt;
  }
  auto dir = sched::LeaseDir::open(sched::lock_dir(config.scheduler_lock_dir), config.scheduler.max_hold_ms);
  auto leases = dir.ok() ? dir->live_leases(util::wall_ms(), sched::LeaseDir::StaleFiles::Keep)
                         : Result<std::vector<sched::Lease>>(dir.error());
  if (!leases.ok()) {
    why = "no scheduler's leases to read: " + leases.error().message;
    return std::nullopt;
  }
  // The process and its ancestors, each with its start time.
  std::map<unsigned, unsigned long long> line;
  unsigned pid = row.pid;
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    const auto st = proc.stat(pid);
    if (!st) break;
    line[pid] = st->identity.starttime_ticks;
    pid = st->parent_pid;
  }
  for (const auto& l : *leases) {
    if (l.pid <= 1 || l.job_id.empty()) continue;
    const auto it = line.find(static_cast<unsigned>(l.pid));
    if (it != line.end() && it->second == l.starttime) return std::make_pair(l.job_id, l.user);
  }
  why = fmt::format("PID {} runs in no tarmac job: no lease's owner is it or one of its parents", row.pid);
  return std::nullopt;
}

// This machine's agent, asked for its live view at every reading while it answers.
tui::LocalReader::AgentView agent_live(const GlobalOptions& global, std::string socket) {
  auto processes = std::make_shared<host::ProcessCache>();  // used on the poller's thread only
  return [processes, socket = std::move(socket), nvml = nvml_source(global)](
             std::string& problem) -> std::optional<tui::LocalReader::AgentLive> {
    auto answer = agent_view(socket, nvml, *processes);
    problem = std::move(answer.problem);
    if (!answer.view) return std::nullopt;
    return tui::LocalReader::AgentLive{std::move(answer.view->snapshot), std::move(answer.view->classes),
                                       std::move(answer.view->mig_classes), std::move(answer.view->backfill)};
  };
}

// How this machine is read: through its agent (`socket`, when it answered before the screen
// opened), else NVML (`backend`); `problem` says why the agent is not used, when that is news.
struct LocalSource {
  std::shared_ptr<gpu::Backend> backend;
  std::string socket;
  std::string problem;
};

tui::Poller::Read local_read(const GlobalOptions& global, const LocalSource& source, gpu::ActivityThresholds thresholds,
                             tui::LocalReader::Leases leases, std::string agent, long long step_ms) {
  auto reader = std::make_shared<tui::LocalReader>(source.backend, thresholds, std::move(leases));
  if (!source.socket.empty()) {
    reader->use_agent(agent_live(global, source.socket), [&global]() -> Result<std::shared_ptr<gpu::Backend>> {
      auto opened = gpu::open_nvml_backend(global.nvml_lib);
      if (!opened.ok()) return opened.error();
      return std::shared_ptr<gpu::Backend>(std::move(*opened));
    });
  }
  reader->set_agent_problem(source.problem);
  auto first = std::make_shared<bool>(true);
  return [reader, first, agent = std::move(agent), step_ms] {
    tui::HostData data = reader->read();
    if (*first && data.snapshot) {
      *first = false;
      if (!agent.empty() && net::is_loopback_url(tui::agent_url(agent))) {
        tui::AgentReader history(agent, 500);
        data.history_prefill = history.history(kHistorySeconds, step_ms);
      }
    }
    return data;
  };
}

tui::Poller::Read agent_read(const std::string& address, long long step_ms) {
  auto reader = std::make_shared<tui::AgentReader>(address);
  auto first = std::make_shared<bool>(true);
  return [reader, first, step_ms] {
    tui::HostData data = reader->read();
    if (*first && data.snapshot) {
      *first = false;
      data.history_prefill = reader->history(kHistorySeconds, step_ms);
    }
    return data;
  };
}

nlohmann::json once_json(const tui::Model& model, const std::vector<tui::Row>& rows) {
  using nlohmann::json;
  auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  json hosts = json::array();
  for (const auto& h : model.hosts()) {
    json gpus = json::array();
    if (h.snapshot) {
      for (std::size_t i = 0; i < h.snapshot->devices.size(); ++i) {
        const auto& d = h.snapshot->devices[i];
        const auto lease = h.leases.find(d.id.index);
        json backfill = json::array();  // as status --json: the agent's batches on it
        if (i < h.backfill.size()) {
          for (const auto& b : h.backfill[i]) backfill.push_back(diagnose::backfill_json(b));
        }
        json mig = json::array();
        for (std::size_t k = 0; k < d.mig.size(); ++k) {
          const bool classed = i < h.mig_classes.size() && k < h.mig_classes[i].size();
          const bool leased = i < h.mig_leases.size() && k < h.mig_leases[i].size() && !h.mig_leases[i][k].label.empty();
          mig.push_back({{"index", d.mig[k].index},
                         {"uuid", opt(d.mig[k].uuid)},
                         {"activity", classed ? json(gpu::to_string(h.mig_classes[i][k].activity)) : json(nullptr)},
                         {"lease", leased ? json(h.mig_leases[i][k].label) : json(nullptr)}});
        }
        gpus.push_back({{"index", d.id.index},
                        {"name", opt(d.id.name)},
                        {"uuid", opt(d.id.uuid)},
                        {"activity", i < h.classes.size() ? json(gpu::to_string(h.classes[i])) : json(nullptr)},
                        {"util_gpu_pct", opt(d.sample.util_gpu_pct)},
                        {"util_mem_pct", opt(d.sample.util_mem_pct)},
                        {"mem_used_bytes", opt(d.sample.mem_used_bytes)},
                        {"mem_total_bytes", opt(d.id.mem_total_bytes)},
                        {"temp_c", opt(d.sample.temp_c)},
                        {"power_mw", opt(d.sample.power_mw)},
                        {"lost", opt(d.lost)},
                        {"lease", lease != h.leases.end() ? json(lease->second.label) : json(nullptr)},
                        {"backfill", std::move(backfill)},
                        {"mig", std::move(mig)}});
      }
    }
    hosts.push_back({{"name", h.name.empty() ? json(nullptr) : json(h.name)},
                     {"source", h.remote ? "http" : h.via_agent ? "agent" : "nvml"},
                     {"problem", opt(h.problem)},
                     {"gpus", std::move(gpus)}});
  }
  json procs = json::array();
  for (const auto& r : rows) {
    procs.push_back({{"host", r.host_name.empty() ? json(nullptr) : json(r.host_name)},
                     {"gpu", opt(r.gpu)},
                     {"pid", r.pid},
                     {"user", r.user.empty() ? json(nullptr) : json(r.user)},
                     {"where", r.where.empty() ? json(nullptr) : json(r.where)},
                     {"mem_bytes", opt(r.mem_bytes)},
                     {"sm_util_pct", opt(r.sm_pct)},
                     {"cpu_pct", opt(r.cpu_pct)},
                     {"rss_bytes", opt(r.rss_bytes)},
                     {"age_s", opt(r.age_s)},
                     {"state", r.state},
                     {"command", r.command},
                     {"launcher", r.launcher},
                     {"depth", r.depth}});
  }
  json verdicts = json::array();
  for (const auto& v : model.verdicts()) {
    verdicts.push_back({{"severity", diagnose::to_string(v.severity)}, {"code", v.code}, {"text", v.text}});
  }
  return {{"hosts", std::move(hosts)}, {"processes", std::move(procs)}, {"verdicts", std::move(verdicts)}};
}

std::pair<int, int> stdout_size() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return {ws.ws_col, ws.ws_row};
  if (const char* c = std::getenv("COLUMNS")) {
    const int n = std::atoi(c);
    if (n >= 20 && n <= 1000) return {n, 0};
  }
  return {120, 0};
}

tui::Detail detail_of(const tui::Model& model, const tui::Row& row, const host::ProcReader& proc) {
  tui::Detail d;
  d.row = row;
  if (row.remote) {
    d.environment_problem = "a process of another host: its environment is read there, not here";
    return d;
  }
  auto env = tui::interesting_environment(proc, row.pid);
  if (env.ok()) {
    d.environment = std::move(*env);
  } else {
    d.environment_problem = env.error().message;
  }
  if (row.host < model.hosts().size()) {
    const auto& anc = model.hosts()[row.host].ancestors;
    unsigned pid = row.pid;
    for (int depth = 0; depth < 16; ++depth) {
      const auto me = anc.find(pid);
      if (me == anc.end() || me->second.parent_pid == 0) break;
      const auto parent = anc.find(me->second.parent_pid);
      if (parent == anc.end()) {
        d.parents.push_back(fmt::format("{}", me->second.parent_pid));
        break;
      }
      d.parents.push_back(fmt::format("{} {}", me->second.parent_pid,
                                      parent->second.command.empty() ? parent->second.name : parent->second.command));
      pid = me->second.parent_pid;
    }
  }
  return d;
}

// This binary, to run its own subcommands (doctor, cancel) for the screen.
std::string self_path() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("tarmac") : p.string();
}

// The global options a subcommand run for the screen must see too.
std::vector<std::string> pass_on(const GlobalOptions& global) {
  std::vector<std::string> args;
  if (!global.nvml_lib.empty()) args.insert(args.end(), {"--nvml-lib", global.nvml_lib});
  if (!global.config.empty()) args.insert(args.end(), {"--config", global.config});
  return args;
}

std::vector<std::pair<std::size_t, unsigned>> gpu_choices(const tui::Model& model) {
  std::vector<std::pair<std::size_t, unsigned>> out;
  for (std::size_t i = 0; i < model.hosts().size(); ++i) {
    const auto& h = model.hosts()[i];
    if (!h.snapshot) continue;
    for (const auto& d : h.snapshot->devices) out.emplace_back(i, d.id.index);
  }
  return out;
}

int run_top(const GlobalOptions& global, const TopOptions& options) {
  StatusOptions status;
  status.direct = options.direct;
  if (!resolve_thresholds(global, status)) return kExitUsage;
  const auto sort = sort_column(options.sort);
  if (!sort) {
    print_error(make_error(Error::Code::Invalid, fmt::format("--sort {}: not one of gpu, pid, user, mem, sm, cpu, rss, age, command",
                                                            util::terminal_text(options.sort))));
    return kExitUsage;
  }
  const bool interactive = !options.once;
  if (interactive) {
    if (::isatty(STDIN_FILENO) == 0 || ::isatty(STDOUT_FILENO) == 0) {
      print_error(make_error(Error::Code::Invalid, "tarmac top needs a terminal; tarmac top --once prints one frame, tarmac watch redraws status"));
      return kExitUsage;
    }
    if (const auto refusal = tui::terminal_refusal(std::getenv("TERM"))) {
      print_error(make_error(Error::Code::Invalid, *refusal));
      return kExitUsage;
    }
  }
  std::setlocale(LC_ALL, "");
  std::string agent_listen;
  tui::LocalReader::Leases leases;
  config::Config config;
  if (auto loaded = load_config(global); loaded.ok()) {
    config = loaded->config;
    agent_listen = config.http_listen;
    leases = lease_reader(config);
  }

  Sources s{tui::Model(status.thresholds), {}, std::nullopt};
  LocalSource local_source;
  const std::vector<std::string> hosts = options.hosts.empty() ? std::vector<std::string>{"local"} : options.hosts;
  for (const auto& h : hosts) {
    if (h == "local" && !s.local) {
      // The agent, when one answers now (NVML is then opened only if it stops); else NVML.
      if (!status.agent_socket.empty()) {
        host::ProcessCache none;
        auto answer = agent_view(status.agent_socket, nvml_source(global), none);
        if (answer.view) local_source.socket = status.agent_socket;
        local_source.problem = std::move(answer.problem);
        if (!local_source.problem.empty() && options.once) {
          fmt::print(stderr, "tarmac: warning: {}: reading the GPUs directly (--direct does so at once)\n",
                     util::terminal_text(local_source.problem));
        }
      }
      if (local_source.socket.empty()) {
        auto opened = open_backend(global);
        if (!opened.ok()) return kExitCouldNotLook;
        local_source.backend = std::move(*opened);
      }
      s.local = s.model.add_host("", false);
    } else if (h != "local") {
      if (auto ok = net::check_url(tui::agent_url(h)); !ok.ok()) {
        print_error(make_error(Error::Code::Invalid, fmt::format("--host {}: {}", util::terminal_text(h), ok.error().message)));
        return kExitUsage;
      }
      s.model.add_host(h, true);
    }
  }
  const long long interval_ms = static_cast<long long>(options.interval_s * 1000.0 + 0.5);
  const long long step_ms = std::max(1000LL, interval_ms);

  tui::ViewState view;
  view.table.sort = *sort;
  view.table.descending = !(*sort == tui::Column::Gpu || *sort == tui::Column::Pid || *sort == tui::Column::User ||
                            *sort == tui::Column::Command);
  view.table.tree = options.tree;
  view.table.viewer_uid = static_cast<unsigned>(::geteuid());
  view.readonly = options.readonly;
  view.interval_s = options.interval_s;
  view.ascii = options.ascii || !tui::locale_is_utf8();
  view.color = use_color(global, stdout);

  if (options.once) {
    // One frame: every host read once, in turn, with its own deadline.
    for (std::size_t i = 0; i < s.model.hosts().size(); ++i) {
      tui::HostData data = s.local && i == *s.local
                               ? local_read(global, local_source, status.thresholds, leases, agent_listen, step_ms)()
                               : agent_read(s.model.hosts()[i].name, step_ms)();
      s.model.update(i, std::move(data), util::monotonic_ms());
    }
    const auto rows = s.model.rows(view.table, util::wall_ms() / 1000, util::monotonic_ms());
    if (global.json) {
      fmt::print("{}\n", util::json_text(once_json(s.model, rows), 2));
    } else {
      tui::FrameContext ctx;
      std::tie(ctx.width, ctx.height) = stdout_size();
      ctx.height = 0;  // as tall as it takes
      ctx.now_ms = util::monotonic_ms();
      ctx.now_unix_s = util::wall_ms() / 1000;
      ctx.title_host = util::host_name();
      view.color = view.color && ::isatty(STDOUT_FILENO) != 0;
      fmt::print("{}", tui::frame_text(tui::render(s.model, rows, view, ctx), view.color));
    }
    bool any = false;
    for (const auto& h : s.model.hosts()) any = any || h.snapshot.has_value();
    if (!any) {
      for (const auto& h : s.model.hosts()) {
        if (h.problem) print_error(make_error(Error::Code::Io, (h.name.empty() ? "this host" : h.name) + ": " + *h.problem));
      }
      return kExitCouldNotLook;
    }
    return kExitOk;
  }

  util::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) {
    print_error(make_error(Error::Code::Io, "eventfd failed"));
    return kExitCouldNotLook;
  }
  for (std::size_t i = 0; i < s.model.hosts().size(); ++i) {
    const bool local = s.local && i == *s.local;
    // An agent is asked at most twice a second, whatever the screen's refresh.
    const auto every = std::chrono::milliseconds(local ? interval_ms : std::max(interval_ms, 500LL));
    s.pollers.push_back(std::make_unique<tui::Poller>(
        local ? local_read(global, local_source, status.thresholds, leases, agent_listen, step_ms)
              : agent_read(s.model.hosts()[i].name, step_ms),
        every, wake.get()));
  }
  local_source.backend.reset();  // the local poller's reader holds it now

  int rc = kExitOk;
  {
    auto term = tui::Terminal::open(view.color);
    if (!term.ok()) {
      print_error(term.error());
      rc = kExitUsage;
    } else {
      host::ProcReader proc;
      const unsigned my_uid = static_cast<unsigned>(::geteuid());
      const std::string title_host = util::host_name();
      std::vector<tui::Row> rows;
      std::unique_ptr<tui::Task> task;  // doctor or cancel, one at a time
      bool task_is_doctor = false;
      const std::string self = self_path();
      const long long nvml_slow_ms = std::max(2000LL, 2 * interval_ms);
      bool quit = false;
      while (!quit && tui::pending_stop_signal() == 0) {
        for (std::size_t i = 0; i < s.pollers.size(); ++i) {
          if (auto data = s.pollers[i]->take()) s.model.update(i, std::move(*data), util::monotonic_ms());
        }
        if (task) {
          if (auto outcome = task->take()) {
            task.reset();
            if (task_is_doctor) {
              view.mode = tui::Mode::Report;
              view.report_title = outcome->title;
              view.report_lines = std::move(outcome->lines);
            } else {
              std::string said;
              for (const auto& l : outcome->lines) {
                if (!l.empty()) said += (said.empty() ? "" : "; ") + l;
              }
              view.message = fmt::format("{}: {}", outcome->title,
                                         said.empty() ? fmt::format("exit status {}", outcome->status) : said);
            }
          }
        }
        std::optional<tui::RowKey> before;
        if (view.selected < rows.size()) before = tui::key_of(rows[view.selected]);
        rows = s.model.rows(view.table, util::wall_ms() / 1000, util::monotonic_ms());
        tui::follow_selection(view, rows, before);
        tui::FrameContext ctx;
        std::tie(ctx.width, ctx.height) = (*term)->size();
        ctx.now_ms = util::monotonic_ms();
        ctx.now_unix_s = util::wall_ms() / 1000;
        ctx.title_host = title_host;
        if (s.local) {
          const long long waiting = s.pollers[*s.local]->busy_for_ms();
          if (waiting > nvml_slow_ms) ctx.nvml_waiting_ms = waiting;
        }
        (*term)->draw(tui::render(s.model, rows, view, ctx));

        // Wait for a key, new data, or the next second (the clock, ages and waits move on).
        pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {wake.get(), POLLIN, 0}};
        const long long to_next_second = 1000 - util::wall_ms() % 1000;
        const int ready = ::poll(fds, 2, static_cast<int>(to_next_second));
        if (ready > 0 && (fds[1].revents & POLLIN) != 0) {
          std::uint64_t n = 0;
          [[maybe_unused]] const auto got = ::read(wake.get(), &n, sizeof n);
        }
        if (ready > 0 && (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) break;  // the terminal is gone
        for (const auto& input : (*term)->read_input()) {
          const auto command = tui::handle_input(input, view, rows, gpu_choices(s.model));
          if (command.kind == tui::CommandKind::Quit) {
            quit = true;
            break;
          }
          if (command.kind == tui::CommandKind::SendSignal) {
            view.message = tui::send_signal(proc, command.row, command.signal, my_uid);
          } else if (command.kind == tui::CommandKind::OpenDetail) {
            view.detail = detail_of(s.model, command.row, proc);
            view.mode = tui::Mode::Detail;
          } else if (task && (command.kind == tui::CommandKind::RunDoctor || command.kind == tui::CommandKind::CancelConfirmed)) {
            view.message = "still running: " + task->title();
          } else if (command.kind == tui::CommandKind::RunDoctor) {
            task_is_doctor = true;
            auto args = pass_on(global);
            args.insert(args.end(), {"doctor", "--pid", std::to_string(command.row.pid), "--window", "5s"});
            task = std::make_unique<tui::Task>(fmt::format("tarmac doctor --pid {} ({})", command.row.pid, command.row.name),
                                               self, std::move(args), wake.get());
            view.message = fmt::format("tarmac doctor is watching PID {} for 5 s...", command.row.pid);
          } else if (command.kind == tui::CommandKind::CancelJob) {
            std::string why;
            const auto job = owning_job(config, proc, command.row, why);
            if (!job) {
              view.message = why;
            } else if (!detail::parse_id(job->first)) {
              view.message = fmt::format("job {} runs under tarmac run without the agent: end it from there, or signal it (k)",
                                         util::terminal_text(job->first));
            } else {
              view.mode = tui::Mode::Confirm;
              view.confirm_job = job->first;
              view.confirm_text = fmt::format("Cancel tarmac job {} of {} (PID {} runs in it)?", util::terminal_text(job->first),
                                              util::terminal_text(job->second), command.row.pid);
            }
          } else if (command.kind == tui::CommandKind::CancelConfirmed) {
            task_is_doctor = false;
            auto args = pass_on(global);
            args.insert(args.end(), {"cancel", "--", command.job});
            task = std::make_unique<tui::Task>(fmt::format("tarmac cancel {}", command.job), self, std::move(args), wake.get());
            view.message = fmt::format("cancelling job {}...", command.job);
          }
        }
      }
    }
  }
  // The terminal is restored; a poller stuck in a driver call is not waited for.
  bool stuck = false;
  for (auto& p : s.pollers) stuck = !p->stop(std::chrono::milliseconds(300)) || stuck;
  if (stuck) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(rc);
  }
  return rc;
}

}  // namespace

void add_top_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("top", "Interactive view of GPUs and their processes (docs/top.md)");
  auto options = std::make_shared<TopOptions>();
  cmd->add_option("-n,--interval", options->interval_s, "Seconds between readings (default 1, at least 0.1)")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_flag("--once", options->once, "Print one frame and exit (with --json: the data as JSON)");
  cmd->add_flag("--ascii", options->ascii, "ASCII only: no block or box-drawing characters");
  cmd->add_flag("--readonly", options->readonly, "No actions: signals are refused");
  cmd->add_flag("--tree", options->tree, "Start in the tree view (ranks under their launcher)");
  cmd->add_flag("--direct", options->direct,
                "Read NVML here, not this machine's agent (by default its live view is shown when one runs)");
  cmd->add_option("--sort", options->sort, "Sort by gpu, pid, user, mem (default), sm, cpu, rss, age or command");
  cmd->add_option("--host", options->hosts,
                  "An agent's address (host:port or URL; repeatable), read through its JSON API; \"local\" for this machine");
  cmd->callback([&global, &exit_code, options] { exit_code = run_top(global, *options); });
}

}  // namespace tarmac::cli
