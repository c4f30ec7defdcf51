#include "tarmac/diagnose/backfill_json.hpp"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tarmac::diagnose {

namespace {

std::optional<std::string> text_at(const nlohmann::json& j, const char* key) {
  const auto v = j.find(key);
  if (v == j.end() || !v->is_string() || v->get_ref<const std::string&>().size() > kBackfillTextMax) return std::nullopt;
  return v->get<std::string>();
}

std::optional<long long> count_at(const nlohmann::json& j, const char* key) {
  const auto v = j.find(key);
  if (v == j.end() || !v->is_number_unsigned() || v->get<std::uint64_t>() > (std::uint64_t{1} << 50)) return std::nullopt;
  return static_cast<long long>(v->get<std::uint64_t>());
}

}  // namespace

nlohmann::json backfill_json(const Backfill& b) {
  return {{"model", b.model}, {"server", b.server}, {"answered", b.answered}, {"requests", b.requests}};
}

std::optional<Backfill> parse_backfill(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  auto model = text_at(j, "model");
  auto server = text_at(j, "server");
  const auto answered = count_at(j, "answered");
  const auto requests = count_at(j, "requests");
  if (!model || !server || !answered || !requests) return std::nullopt;
  return Backfill{std::move(*model), std::move(*server), *answered, *requests};
}

}  // namespace tarmac::diagnose
