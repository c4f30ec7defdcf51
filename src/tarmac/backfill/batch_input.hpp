// A batch's input (docs/backfill.md "Input"), read strictly and with bounds, since the agent (root)
// reads it for any user: the OpenAI Batch JSONL format (one request a line: custom_id, method POST,
// url /v1/chat/completions or /v1/completions, body), which vLLM's run-batch also reads; or a JSON
// array of texts and a template, one chat request per text. Pure: text in, requests or the first
// problem (with its line) out; nothing is queued from an input with any problem.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::backfill {

enum class Endpoint { ChatCompletions, Completions };

// "/v1/chat/completions", "/v1/completions".
[[nodiscard]] std::string_view to_url(Endpoint endpoint);
[[nodiscard]] std::optional<Endpoint> endpoint_from_url(std::string_view url);

// Bounds on what one submission may hold (docs/backfill.md "Limits"): past any, the input is refused.
struct InputLimits {
  std::size_t max_input_bytes = 200U << 20;  // OpenAI's batch file limit (200 MB) in MiB
  std::size_t max_line_bytes = 1U << 20;     // one request (a 128k-token prompt is about 512 KiB)
  std::size_t max_requests = 50000;          // OpenAI's limit per batch
  std::size_t max_custom_id_bytes = 256;
  std::size_t max_depth = 64;                // nesting of arrays and objects in one line
  std::size_t max_template_bytes = 64U << 10;
  std::size_t max_model_bytes = 256;
  // The request bodies of one batch together, as stored: the input's bound plus room for the model
  // each body gains. A template multiplies its texts, so this bounds what a batch costs, not the file.
  std::size_t max_batch_body_bytes = 256U << 20;
};

// One request of a batch, checked: its body is a JSON object (compact text) with `model` set.
struct BatchRequest {
  std::string custom_id;
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string body;
  std::size_t line = 0;  // 1-based line of the JSONL input, or 1 + the index of the text
};

// Why an input is refused: the words, and the line they are about (0: the whole input).
struct InputProblem {
  std::size_t line = 0;
};

// Whether `model` is a name a batch may carry: 1 to max_model_bytes printable ASCII characters.
[[nodiscard]] Result<void> check_model(std::string_view model, const InputLimits& limits = {});

// The requests of an OpenAI Batch JSONL input, in order. Each line is an object with exactly the
// keys custom_id (unique, 1 to max_custom_id_bytes characters, no control characters), method
// ("POST"), url (an Endpoint's) and body (an object: `messages` for chat, `prompt` for completions;
// no `stream: true`; its `model`, when present, must be `model`, which is set when absent). Blank
// lines are skipped; a trailing CR is ignored. The bodies together stay within max_batch_body_bytes.
// The error (Invalid, with an InputProblem as its cause) says "line N: ..." for the first problem.
[[nodiscard]] Result<std::vector<BatchRequest>> parse_jsonl(std::string_view input, std::string_view model,
                                                            const InputLimits& limits = {});

// One chat request per text of `texts` (a JSON array of strings), each the user message
// `template_text` with every "{text}" replaced by the text; custom ids "text-0", "text-1", ... by
// index. The template must contain "{text}". A text whose request would pass max_line_bytes is
// refused before it is filled in (a template of 10,000 slots would multiply it), and the bodies
// together stay within max_batch_body_bytes.
[[nodiscard]] Result<std::vector<BatchRequest>> parse_texts(std::string_view texts, std::string_view template_text,
                                                            std::string_view model, const InputLimits& limits = {});

// The deepest nesting of arrays and objects in the JSON `text`, counted outside strings. Parsing is
// not recursive, but writing a document back out is: a line of 100,000 '[' would overflow the
// stack, so every document from outside is measured first.
[[nodiscard]] std::size_t json_nesting_depth(std::string_view text);

// The line an input error is about (its InputProblem), 0 when none.
[[nodiscard]] std::size_t problem_line(const Error& error);

}  // namespace tarmac::backfill
