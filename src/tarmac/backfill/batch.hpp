// A batch and its requests as the agent keeps them (docs/backfill.md "State"): the batch's own row
// and one row per request, moving pending -> in_flight -> done or failed.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/backfill/batch_input.hpp"

namespace tarmac::backfill {

// queued: waiting for a server (or its window); running: being sent; done: every request answered
// (done or failed); cancelled: by its owner or root; failed: the batch itself cannot go on (its
// output cannot be written, its server is unknown).
enum class BatchState { Queued, Running, Done, Cancelled, Failed };
enum class RequestState { Pending, InFlight, Done, Failed };

[[nodiscard]] std::string_view to_string(BatchState s);
[[nodiscard]] std::string_view to_string(RequestState s);
[[nodiscard]] std::optional<BatchState> batch_state_from(std::string_view text);
[[nodiscard]] std::optional<RequestState> request_state_from(std::string_view text);
// Whether nothing more happens to a batch in `s`.
[[nodiscard]] bool ended(BatchState s);

// A span of wall time a batch was sent in: from its first request of a stint to the stint's end.
struct Span {
  long long start_ms = 0;  // ms since the epoch
  long long end_ms = 0;
  bool operator==(const Span&) const = default;
};

// The spans a batch keeps: its last kMaxSpans, a span that starts within kSpanJoinMs of the last
// one's end extending it (a yield and the resume after it are one night's work, not two).
inline constexpr std::size_t kMaxSpans = 32;
inline constexpr long long kSpanJoinMs = 10 * 60 * 1000;
void add_span(std::vector<Span>& spans, Span span);
// As the store keeps them: a JSON array of [start_ms, end_ms] pairs; and back, leaving out what is
// not such a pair (an empty or damaged column reads as none).
[[nodiscard]] std::string spans_text(const std::vector<Span>& spans);
[[nodiscard]] std::vector<Span> spans_from(std::string_view text);
// "2026-12-02 00:03-05:58" in local time; the end's date is written too when it is another day.
[[nodiscard]] std::string span_local_text(const Span& span);

struct Batch {
  long long id = 0;
  uid_t uid = 0;  // the submitter, from the socket's SO_PEERCRED
  std::string user;
  std::string name;
  std::string model;
  std::string server;  // [backfill.server.NAME]; empty: the configured default
  std::string window;  // "HH:MM-HH:MM", empty: any time
  unsigned parallel = 1;
  BatchState state = BatchState::Queued;
  std::string reason;       // why it waits or ended as it did, for people
  std::string output_path;  // as the submitter named it: shown, and read by `results` as the submitter
  long long output_dev = 0;  // the output file's identity when it was handed over, checked again later
  long long output_ino = 0;
  // Its birth time (statx STATX_BTIME, ns since the epoch) when the file system keeps one; 0 when
  // not: an inode number is soon reused, a birth time with it names one file (docs/backfill.md "Security").
  long long output_btime_ns = 0;
  long long output_bytes = 0;  // how much of the output the store accounts for (docs/backfill.md "Exactly once")
  long long requests = 0;
  long long body_bytes = 0;  // the request bodies it keeps in the store (dropped when it ends): quotas count them
  long long submitted_ms = 0;
  long long started_ms = 0;
  long long ended_ms = 0;
  long long gpu_ms = 0;  // GPU-milliseconds its server held while it ran
  std::vector<Span> windows;  // when it was sent (add_span): written only by BatchDb::add_window
};

// One request's row (its body is read only when it is sent).
struct RequestRow {
  long long index = 0;  // 0-based position in the input: the order `results` re-emits
  std::string custom_id;
  Endpoint endpoint = Endpoint::ChatCompletions;
  RequestState state = RequestState::Pending;
  int attempts = 0;
  std::optional<long long> prompt_tokens;
  std::optional<long long> completion_tokens;
  long long started_ms = 0;
  long long ended_ms = 0;
  std::string error;
  long long out_offset = -1;  // where its output line starts; -1 while it has none
  long long out_len = 0;
};

// What the store counts of a batch's requests.
struct Progress {
  long long pending = 0;
  long long in_flight = 0;
  long long done = 0;
  long long failed = 0;
  long long prompt_tokens = 0;
  long long completion_tokens = 0;
  long long first_started_ms = 0;  // 0: none sent yet
  long long last_ended_ms = 0;
};

// The output line's `id` for request `index` of batch `batch`: "batch_req_<batch>_<index>", so that
// `results` orders the output by input position without asking the agent.
[[nodiscard]] std::string output_line_id(long long batch, long long index);
// The index an output line's `id` names for `batch`; nullopt for any other id.
[[nodiscard]] std::optional<long long> index_from_line_id(std::string_view id, long long batch);

}  // namespace tarmac::backfill
