// `tarmac backfill submit|status|cancel|resume|results` (docs/backfill.md "Commands"): batches of
// LLM requests the agent owns. The CLI, as the user, opens the input and the output and hands them
// to the agent over its socket; the agent never opens a path a user named.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_backfill_commands(CLI::App& app, const GlobalOptions& global, int& exit_code);

namespace detail {

// The lines of batch `batch`'s output `text` in input order (by the index in each line's `id`);
// lines that are not the batch's (edited by hand) are left out and counted in `skipped`.
[[nodiscard]] std::vector<std::string> results_in_order(const std::string& text, long long batch,
                                                        std::size_t& skipped);
// `tarmac backfill status`: one row per batch (names shown escaped), or "no batches".
void print_batches(std::FILE* out, const nlohmann::json& batches, bool color);
// `tarmac backfill status ID`: the batch's figures, one per line.
[[nodiscard]] std::string batch_text(const nlohmann::json& batch);

}  // namespace detail

}  // namespace tarmac::cli
