#include "tarmac/serve/service.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fmt/format.h>

#include "tarmac/report/report.hpp"
#include "tarmac/host/process_info.hpp"
#include "tarmac/serve/api.hpp"
#include "tarmac/serve/auth.hpp"
#include "tarmac/serve/openssl.hpp"
#include "tarmac/serve/tls.hpp"
#include "tarmac/store/reader.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::serve {

namespace {

using Steady = std::chrono::steady_clock;
constexpr long long kReportMs = 7LL * 24 * 3600 * 1000;

long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// VmRSS from /proc/self/status, in bytes.
long long resident_bytes() {
  const auto status = util::read_file("/proc/self/status");
  if (!status) return 0;
  const auto at = status->find("VmRSS:");
  if (at == std::string::npos) return 0;
  const auto end = status->find('\n', at);
  const std::string field(util::trim(status->substr(at + 6, end - at - 6)));
  const auto kb = util::parse_int(field.substr(0, field.find(' ')));
  return kb ? *kb * 1024 : 0;
}

Response json_response(std::string body) {
  Response r;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

// The report as it may leave the host when only programs' names may (Commands::ProgramOnly): the
// commands' GPU-hours merged by program.
void hide_arguments(report::Report& r) {
  std::vector<report::Consumer> merged;
  for (auto& c : r.commands) {
    const std::string program = host::program_name(c.name);
    const std::string name = program.empty() ? c.name : program;
    auto it = std::find_if(merged.begin(), merged.end(), [&](const report::Consumer& m) { return m.name == name; });
    if (it == merged.end()) {
      merged.push_back({name, c.gpu_hours, c.processes});
    } else {
      it->gpu_hours += c.gpu_hours;
      it->processes += c.processes;
    }
  }
  std::sort(merged.begin(), merged.end(), [](const auto& a, const auto& b) { return a.gpu_hours > b.gpu_hours; });
  r.commands = std::move(merged);
  for (auto& h : r.holding) {
    for (auto& p : h.processes) p.command = host::program_name(p.command);
  }
  for (auto& a : r.zombies.recent) a.command = host::program_name(a.command);
}

Response not_ready() {
  Response r = text_response(503, "no sample yet: the agent is starting");
  r.extra_headers = "Retry-After: 1\r\n";
  return r;
}

}  // namespace

Service::Service(const LiveState& live, ServiceOptions options) : live_(live), options_(std::move(options)) {}

Service::~Service() { stop(); }

Result<void> Service::start() {
  ServerSecurity security;
  if (options_.web && options_.web->tls) {
    TARMAC_TRY_ASSIGN(security.tls, TlsContext::load(*options_.web->tls, options_.trusted_files));
  }
  if (options_.web && !options_.web->users.empty()) {
    // BasicAuth remembers credentials by their SHA-256 (OpenSSL's): without the library it would
    // let nobody in, so the agent says why now rather than answering every request 401.
    if (const auto& loaded = openssl(); !loaded.ok()) return loaded.error();
    security.auth = std::make_shared<BasicAuth>(options_.web->users);
  }
  const bool guarded = security.tls && options_.web->authenticates();
  server_ = std::make_unique<HttpServer>([this](const Request& r) { return handle(r); }, ServerLimits{}, security);
  // What may be served is decided from the address bound, before the first connection is answered.
  TARMAC_TRY(server_->bind(options_.host, options_.port));
  if (server_->loopback_only()) return server_->serve();
  if (!options_.expose_command_lines) commands_ = Commands::ProgramOnly;
  if (guarded) return server_->serve();
  const std::string missing = !security.tls && !security.auth ? "TLS and authentication"
                              : !security.tls                 ? "TLS (passwords would cross the network in clear)"
                                                              : "authentication (basic_auth_users or "
                                                                "RequireAndVerifyClientCert)";
  const std::string where = fmt::format("{}:{}", options_.host, options_.port);
  if (!options_.insecure) {
    server_.reset();
    return make_error(Error::Code::Invalid,
                      fmt::format("http.listen {} is reachable beyond this machine, and the endpoint has no {}: anyone "
                                  "on the network could read it. Give http.web_config_file (docs/fleet.md), or set "
                                  "http.insecure = true to serve it so anyway",
                                  where, missing));
  }
  warning_ = fmt::format("serving {} beyond loopback without {} (http.insecure = true): anyone who reaches the port "
                         "reads the GPUs and their processes' users{}",
                         where, missing, commands_ == Commands::Full ? " and command lines" : "");
  return server_->serve();
}

void Service::stop() {
  if (server_) server_->stop();
}

Response Service::metrics() {
  const auto started = Steady::now();
  const auto view = live_.view();
  if (!view) return not_ready();
  // Scrapes between two samples get the same values: render them once per sample.
  if (view != rendered_view_) {
    // The job mapping as the agent read it for this sample (one read serves the store and /metrics).
    SampleLabels labels{options_.hostname, options_.hostname_label, commands_, view->jobs, view->pods, view->pods_listed};
    rendered_ = render_sample_metrics(*view, labels,
                                      options_.alerts ? options_.alerts() : std::vector<FiringAlert>{});
    rendered_view_ = view;
  }
  MetricsExtras extras;
  extras.hostname = options_.hostname;
  extras.last_scrape_seconds = last_scrape_seconds_.load();
  // VmRSS once a second at most: reading /proc per scrape would cost more than the rest of one.
  if (const auto now = Steady::now(); now - rss_read_at_ > std::chrono::seconds(1)) {
    rss_bytes_ = resident_bytes();
    rss_read_at_ = now;
  }
  extras.resident_bytes = rss_bytes_;
  const ServerStats unserved;  // handle() called without start(), as the unit tests do
  const ServerStats& stats = server_ ? server_->stats() : unserved;
  extras.http_requests = stats.requests.load();
  extras.http_rejected = stats.rejected.load();
  extras.http_accept_failures = stats.accept_failures.load();
  extras.http_tls_failures = stats.tls_failures.load();
  extras.http_auth_failures = stats.auth_failures.load();
  extras.now_unix_ms = unix_ms();
  if (options_.reaper) extras.reaper = options_.reaper();
  if (options_.backfill) extras.backfill = options_.backfill();
  Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body.reserve(rendered_.size() + 2048);
  r.body = rendered_;
  r.body += render_agent_metrics(*view, extras);
  last_scrape_seconds_.store(std::chrono::duration<double>(Steady::now() - started).count());
  return r;
}

Response Service::report() {
  auto reader = store::Reader::open(options_.db_path);
  if (!reader.ok()) return text_response(503, fmt::format("no report yet: {}", reader.error().message));
  auto recorded = reader->recorded();
  if (!recorded.ok()) return text_response(503, recorded.error().message);
  if (!*recorded) return text_response(503, "no report yet: nothing is recorded");
  report::ReportOptions options;
  options.range.until_ms = (*recorded)->until_ms + 1;
  options.range.since_ms = std::max((*recorded)->since_ms, options.range.until_ms - kReportMs);
  auto built = report::build(*reader, options);
  if (!built.ok()) return text_response(500, built.error().message);
  if (commands_ == Commands::ProgramOnly) hide_arguments(*built);
  Response r;
  r.content_type = "text/html; charset=utf-8";
  r.body = report::render_html(*built);
  return r;
}

Response Service::handle(const Request& request) {
  const std::string& path = request.path;
  if (path == "/metrics") return metrics();
  if (path == "/healthz") {
    const auto view = live_.view();
    if (!view) return not_ready();
    const long long age = unix_ms() - view->published_unix_ms;
    if (age > options_.stale_after_ms) {
      return text_response(503, fmt::format("stale: the last sample is {} s old", age / 1000));
    }
    return text_response(200, "ok");
  }
  if (path == "/" || path == "/index.html") {
    Response r;
    r.content_type = "text/html; charset=utf-8";
    r.body = std::string(dashboard_html());
    return r;
  }
  if (path == "/api/v1/gpus" || path == "/api/v1/processes") {
    const auto view = live_.view();
    if (!view) return not_ready();
    if (path == "/api/v1/gpus") {
      return json_response(
          gpus_json(*view, options_.hostname, options_.alerts ? options_.alerts() : std::vector<FiringAlert>{},
                    options_.batches_on_gpus ? options_.batches_on_gpus() : std::vector<GpuBatch>{}, commands_));
    }
    return json_response(processes_json(*view, commands_));
  }
  if (path == "/api/v1/history") {
    const auto view = live_.view();
    const long long now = view ? view->ts_ms : unix_ms();
    auto body = history_json(options_.db_path, request.query, now);
    if (!body.ok()) {
      return text_response(body.error().code == Error::Code::Invalid ? 400 : 503, body.error().message);
    }
    return json_response(std::move(*body));
  }
  if (path == "/report") return report();
  return text_response(404, fmt::format("no such page: {} (try /, /metrics, /api/v1/gpus, /api/v1/processes, "
                                        "/api/v1/history, /healthz, /report)",
                                        path));
}

}  // namespace tarmac::serve
