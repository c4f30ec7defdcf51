// Names of a batch's states and its output lines' ids (batch.hpp).
#include "tarmac/backfill/batch.hpp"

#include <fmt/format.h>

#include <climits>

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

}  // namespace tarmac::backfill
