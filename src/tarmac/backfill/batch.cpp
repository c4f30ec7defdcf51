// Names of a batch's states and its output lines' ids (batch.hpp).
#include "tarmac/backfill/batch.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>

#include "tarmac/util/strings.hpp"

namespace tarmac::backfill {

namespace {
constexpr std::pair<BatchState, std::string_view> kBatchStates[] = {
    {BatchState::Queued, "queued"},       {BatchState::Running, "running"}, {BatchState::Done, "done"},
    {BatchState::Cancelled, "cancelled"}, {BatchState::Failed, "failed"},
};
constexpr std::pair<RequestState, std::string_view> kRequestStates[] = {
    {RequestState::Pending, "pending"},
    {RequestState::InFlight, "in_flight"},
    {RequestState::Done, "done"},
    {RequestState::Failed, "failed"},
};
constexpr std::string_view kLineIdPrefix = "batch_req_";
}  // namespace

std::string_view to_string(BatchState s) {
  for (const auto& [state, name] : kBatchStates) {
    if (state == s) return name;
  }
  return "failed";
}

std::string_view to_string(RequestState s) {
  for (const auto& [state, name] : kRequestStates) {
    if (state == s) return name;
  }
  return "failed";
}

std::optional<BatchState> batch_state_from(std::string_view text) {
  for (const auto& [state, name] : kBatchStates) {
    if (name == text) return state;
  }
  return std::nullopt;
}

std::optional<RequestState> request_state_from(std::string_view text) {
  for (const auto& [state, name] : kRequestStates) {
    if (name == text) return state;
  }
  return std::nullopt;
}

bool ended(BatchState s) { return s == BatchState::Done || s == BatchState::Cancelled || s == BatchState::Failed; }

std::string output_line_id(long long batch, long long index) {
  return fmt::format("{}{}_{}", kLineIdPrefix, batch, index);
}

std::optional<long long> index_from_line_id(std::string_view id, long long batch) {
  const std::string prefix = fmt::format("{}{}_", kLineIdPrefix, batch);
  if (id.substr(0, prefix.size()) != prefix) return std::nullopt;
  return util::parse_int(id.substr(prefix.size()), 0, LLONG_MAX);
}

void add_span(std::vector<Span>& spans, Span span) {
  if (span.end_ms < span.start_ms) span.end_ms = span.start_ms;
  if (!spans.empty() && span.start_ms >= spans.back().start_ms && span.start_ms - spans.back().end_ms <= kSpanJoinMs) {
    spans.back().end_ms = std::max(spans.back().end_ms, span.end_ms);
  } else {
    spans.push_back(span);
  }
  if (spans.size() > kMaxSpans) spans.erase(spans.begin(), spans.end() - static_cast<std::ptrdiff_t>(kMaxSpans));
}

std::string spans_text(const std::vector<Span>& spans) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : spans) out.push_back({s.start_ms, s.end_ms});
  return out.dump();
}

std::vector<Span> spans_from(std::string_view text) {
  std::vector<Span> out;
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (!doc.is_array()) return out;
  for (const auto& pair : doc) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number_integer()) continue;
    out.push_back({pair[0].get<long long>(), pair[1].get<long long>()});
    if (out.size() == kMaxSpans) break;
  }
  return out;
}

namespace {
std::tm local_tm(long long ms) {
  const time_t t = static_cast<time_t>(ms / 1000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  return tm;
}
}  // namespace

std::string span_local_text(const Span& span) {
  const std::tm a = local_tm(span.start_ms);
  const std::tm b = local_tm(span.end_ms);
  const bool same_day = a.tm_year == b.tm_year && a.tm_yday == b.tm_yday;
  return same_day ? fmt::format("{:%Y-%m-%d %H:%M}-{:%H:%M}", a, b) : fmt::format("{:%Y-%m-%d %H:%M}-{:%Y-%m-%d %H:%M}", a, b);
}

}  // namespace tarmac::backfill
