// The agent's HTTP endpoints (docs/metrics.md): /metrics, /api/v1/gpus, /api/v1/processes,
// /api/v1/history, /healthz, /report and the dashboard at /. Reads the live view the sampling loop
// publishes and the store; never writes anything.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tarmac/serve/http.hpp"
#include "tarmac/serve/live.hpp"
#include "tarmac/serve/metrics.hpp"
#include "tarmac/serve/web_config.hpp"

namespace tarmac::serve {

struct ServiceOptions {
  std::string host = "127.0.0.1";
  unsigned port = 9478;
  std::string db_path;   // the store, for /api/v1/history and /report
  std::string hostname;  // the Hostname label
  // The alerts firing now; may be empty. The agent evaluates them before it publishes each sample,
  // so /metrics reads them once per sample.
  std::function<std::vector<FiringAlert>()> alerts;
  // The reaper's numbers (docs/reap.md "As a service"), read at every scrape; unset: none written.
  std::function<std::optional<ReaperMetrics>()> reaper;
  // The batches' numbers (docs/backfill.md), read at every scrape; unset: none written.
  std::function<std::optional<BackfillMetrics>()> backfill;
  // The batches sent on each GPU now (the dashboard's cards); unset: none.
  std::function<std::vector<GpuBatch>()> batches_on_gpus;
  // A sample older than this (real time) makes /healthz answer 503.
  long long stale_after_ms = 60'000;
  // http.web_config_file, read: TLS and passwords. nullopt: plain HTTP to whoever reaches the port.
  std::optional<WebConfig> web;
  bool trusted_files = false;  // as root: the certificate, key and CA must be root's (read_trusted_file)
  // http.insecure: serve beyond loopback without TLS and authentication (start() refuses otherwise).
  bool insecure = false;
  // http.expose_command_lines: beyond loopback, whole command lines instead of the program's name.
  bool expose_command_lines = false;
  std::string hostname_label = "Hostname";  // http.hostname_label
};

class Service {
 public:
  Service(const LiveState& live, ServiceOptions options);
  ~Service();

  // Loads the TLS files and listens. Fails when a file is unusable, when the address cannot be
  // bound, and when the address is beyond loopback and the endpoint would be open to anyone on
  // the network (no TLS, or no authentication) without `insecure`.
  [[nodiscard]] Result<void> start();
  [[nodiscard]] unsigned port() const { return server_ ? server_->port() : 0; }
  // What start() warns about (serving beyond loopback with `insecure`); "" for nothing.
  [[nodiscard]] const std::string& warning() const { return warning_; }
  // "https" or "http".
  [[nodiscard]] std::string scheme() const { return options_.web && options_.web->tls ? "https" : "http"; }
  void stop();

  // One request, as the server's thread calls it (public for tests).
  [[nodiscard]] Response handle(const Request& request);

 private:
  Response metrics();
  Response report();

  const LiveState& live_;
  ServiceOptions options_;
  std::unique_ptr<HttpServer> server_;  // made by start(), with the security it loads
  Commands commands_ = Commands::Full;
  std::string warning_;
  std::atomic<double> last_scrape_seconds_{0};
  // The sample part of /metrics for the view it was rendered from (server thread only).
  std::shared_ptr<const LiveView> rendered_view_;
  std::string rendered_;
  long long rss_bytes_ = 0;
  std::chrono::steady_clock::time_point rss_read_at_{};
};

// The dashboard page, embedded from src/tarmac/serve/dashboard.html at build time.
[[nodiscard]] std::string_view dashboard_html();

}  // namespace tarmac::serve
