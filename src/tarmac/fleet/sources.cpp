#include "tarmac/fleet/sources.hpp"

#include <algorithm>
#include <atomic>
#include <fmt/format.h>
#include <functional>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "tarmac/net/http_client.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::fleet {

namespace {

// 8,000 GPUs answer each query with at most 2 MiB (about 0.25 KiB a series): 32 MiB is ten times
// the largest fleet measured (bench/fleet_scale.py), and bounds the parsed tree too.
constexpr std::size_t kMaxPrometheusBody = 32U << 20;
constexpr std::size_t kMaxGpusBody = 1U << 20;        // an agent's GPUs (as tarmac top reads them)
constexpr std::size_t kMaxProcessesBody = 8U << 20;   // an agent's processes
constexpr std::size_t kMaxAgents = 4096;
constexpr std::size_t kAgentWorkers = 32;             // agents asked at once

// Runs `work(i)` for i in [0, n) on at most `workers` threads; a thread that cannot be started
// leaves its share to the others (and to the caller's thread, when none can).
void run_pool(std::size_t n, std::size_t workers, const std::function<void(std::size_t)>& work) {
  std::atomic<std::size_t> next{0};
  const auto drain = [&] {
    for (std::size_t i = next++; i < n; i = next++) work(i);
  };
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < std::min(n, workers); ++w) {
    try {
      threads.emplace_back(drain);
    } catch (const std::system_error&) {
      break;
    }
  }
  drain();
  for (auto& t : threads) t.join();
}

// A Prometheus API GET: the body of a 200 answer; for another status, the error Prometheus gives
// in its JSON body (a query refused for --query.max-samples, a bad expression), else the status.
Result<std::string> ask_prometheus(const std::string& url, long long timeout_ms) {
  net::Request request;
  request.method = "GET";
  request.url = url;
  request.timeout_ms = timeout_ms;
  request.max_body_bytes = kMaxPrometheusBody;
  TARMAC_TRY_ASSIGN(net::Response answer, net::perform(request));
  if (answer.status == 200) return std::move(answer.body);
  std::string why = fmt::format("answered HTTP {}", answer.status);
  if (answer.body.size() <= 64 * 1024 && util::json_depth(answer.body) <= 4) {
    const auto j = nlohmann::json::parse(answer.body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) {
      why += ": " + util::terminal_text(j["error"].get<std::string>().substr(0, 512));
    }
  }
  return make_error(Error::Code::External, why);
}

std::string base_of(const std::string& address) {
  std::string url = address.find("://") == std::string::npos ? "http://" + address : address;
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

}  // namespace

std::string query_encode(std::string_view value) {
  std::string out;
  for (const unsigned char c : value) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.' ||
        c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

Result<Fleet> read_prometheus(const std::string& url, long long timeout_ms) {
  const std::string base = base_of(url);
  TARMAC_TRY(net::check_url(base));
  constexpr std::size_t kQueries = std::size(PromQueries::kAll);
  std::vector<Result<std::string>> got(kQueries, make_error(Error::Code::Internal, "not asked"));
  run_pool(kQueries, kQueries, [&](std::size_t i) {
    got[i] = ask_prometheus(fmt::format("{}/api/v1/query?query={}", base, query_encode(PromQueries::kAll[i])),
                            timeout_ms);
  });
  PromAnswers answers;
  for (auto& r : got) {
    if (!r.ok()) return make_error(r.error().code, fmt::format("Prometheus at {}: {}", base, r.error().message));
    answers.push_back(std::move(*r));
  }
  TARMAC_TRY_ASSIGN(Fleet fleet, fleet_from_prometheus(answers));
  fleet.source = "Prometheus " + base;
  return fleet;
}

Result<FleetReport> read_prometheus_report(const std::string& url, long long since_ms, long long until_ms,
                                           std::optional<double> price_per_gpu_hour, long long timeout_ms) {
  const std::string base = base_of(url);
  TARMAC_TRY(net::check_url(base));
  const long long since_s = since_ms / 1000;
  const long long until_s = until_ms / 1000;
  if (until_s <= since_s) return make_error(Error::Code::Invalid, "the report's range is empty");
  const auto queries = report_queries(until_s - since_s);
  // Prometheus stops a query tarmac has given up on.
  const std::string limit = fmt::format("&timeout={}s", std::max(1LL, timeout_ms / 1000));
  std::vector<std::string> urls;
  for (const auto& q : queries) {
    urls.push_back(fmt::format("{}/api/v1/query?query={}&time={}{}", base, query_encode(q), until_s, limit));
  }
  const std::size_t instant = urls.size();
  // The heat map's points: the mean of each whole UTC hour of the range, at the hour's end, a
  // week's hours a query.
  constexpr long long kWeek = 7 * 86400;
  const long long last_end = (until_s + 3599) / 3600 * 3600;
  for (long long start = since_s / 3600 * 3600 + 3600; start <= last_end; start += kWeek) {
    urls.push_back(fmt::format("{}/api/v1/query_range?query={}&start={}&end={}&step=3600{}", base,
                               query_encode(heat_query(until_s - since_s)), start, std::min(last_end, start + kWeek - 3600), limit));
  }
  std::vector<Result<std::string>> got(urls.size(), make_error(Error::Code::Internal, "not asked"));
  // At most 16 at once: a long range's weeks must not open a connection each.
  run_pool(urls.size(), std::min<std::size_t>(urls.size(), 16),
           [&](std::size_t i) { got[i] = ask_prometheus(urls[i], timeout_ms); });
  std::vector<std::string> answers;
  for (auto& r : got) {
    if (!r.ok()) return make_error(r.error().code, fmt::format("Prometheus at {}: {}", base, r.error().message));
    answers.push_back(std::move(*r));
  }
  const std::vector<std::string> heat(std::make_move_iterator(answers.begin() + static_cast<std::ptrdiff_t>(instant)),
                                      std::make_move_iterator(answers.end()));
  answers.resize(instant);
  TARMAC_TRY_ASSIGN(FleetReport report,
                    fleet_report_from_prometheus(answers, heat, since_s * 1000, until_s * 1000, price_per_gpu_hour));
  report.source = "Prometheus " + base;
  return report;
}

Result<Fleet> read_agents(const std::vector<std::string>& addresses, long long timeout_ms) {
  if (addresses.size() > kMaxAgents) {
    return make_error(Error::Code::Invalid, fmt::format("at most {} agents at once", kMaxAgents));
  }
  struct Answer {
    Result<std::vector<Row>> rows = make_error(Error::Code::Internal, "not asked");
  };
  std::vector<Answer> answers(addresses.size());
  run_pool(addresses.size(), kAgentWorkers, [&](std::size_t i) {
    const std::string base = base_of(addresses[i]);
    if (auto checked = net::check_url(base); !checked.ok()) {
      answers[i].rows = checked.take_error();
      return;
    }
    auto gpus = net::get(base + "/api/v1/gpus", timeout_ms, kMaxGpusBody);
    if (!gpus.ok()) {
      answers[i].rows = gpus.take_error();
      return;
    }
    auto procs = net::get(base + "/api/v1/processes", timeout_ms, kMaxProcessesBody);
    if (!procs.ok()) {
      answers[i].rows = procs.take_error();
      return;
    }
    answers[i].rows = rows_from_agent(*gpus, *procs, addresses[i]);
  });
  Fleet fleet;
  fleet.source = addresses.size() == 1 ? "agent " + addresses.front() : fmt::format("{} agents", addresses.size());
  std::size_t answered = 0;
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    if (!answers[i].rows.ok()) {
      fleet.problems.push_back(fmt::format("agent {}: {}", addresses[i], answers[i].rows.error().message));
      continue;
    }
    ++answered;
    for (auto& r : *answers[i].rows) fleet.rows.push_back(std::move(r));
  }
  if (answered == 0 && !addresses.empty()) {
    return make_error(Error::Code::Io, fmt::format("no agent answered: {}", fmt::join(fleet.problems, "; ")));
  }
  sort_grounded_first(fleet.rows);
  return fleet;
}

}  // namespace tarmac::fleet
