// Ollama's native protocol for backfill (docs/backfill.md "Ollama's protocol"): a batch request's
// OpenAI body is sent as /api/chat or /api/generate, streamed (NDJSON, one JSON object a line, the
// last one with "done": true and the token counts), and the answer is turned back into the OpenAI
// body the output holds for any server (a chat.completion or a text_completion with its usage), so
// a batch's output does not depend on which protocol its server speaks. Streaming is what makes a
// cancel work mid-generation: the cancel flag closes the connection, which is how Ollama learns that
// a generation is to stop. Also what the yield needs: unload() (keep_alive 0) and loaded() (/api/ps).
//
// Every answer is hostile: a line that is not JSON, a stream that ends without its final object, an
// answer larger than the caller's bound are failures, never trusted halves.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/backfill/batch_input.hpp"
#include "tarmac/backfill/settings.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::backfill::ollama {

// The native request for an OpenAI request body of `endpoint`: its path (/api/chat, /api/generate)
// and its body, with stream: true and the sampling settings in `options` (max_tokens ->
// num_predict, temperature, top_p, stop, seed, presence_penalty, frequency_penalty). Invalid for
// what is not translated: n > 1, several prompts, message parts other than text, tools.
struct NativeRequest {
  std::string path;
  std::string body;
  std::string model;  // body.model, named again in the OpenAI answer
};
[[nodiscard]] Result<NativeRequest> to_native(Endpoint endpoint, std::string_view openai_body);

// Reads an answer's NDJSON stream piece by piece, as it arrives, keeping only the text generated so
// far and the final object's counts (never the whole stream), up to `max_text_bytes` of text.
class StreamReader {
 public:
  StreamReader(Endpoint endpoint, std::size_t max_text_bytes) : endpoint_(endpoint), max_text_bytes_(max_text_bytes) {}
  // Takes the next piece; false once the stream is to be read no further (an error line, a line
  // that is not a JSON object, the text over its bound): problem() then says why.
  [[nodiscard]] bool feed(std::string_view piece);
  // After the transfer: the OpenAI body for the stream, or why there is none (an error line; the
  // stream ended without its "done": true object). `model` is the batch's, named in the body.
  [[nodiscard]] Result<std::string> finish(std::string_view model);
  // Why feed() said stop; empty when it has not.
  [[nodiscard]] const std::string& problem() const { return problem_; }
  // Whether the stream's trouble is the server's own {"error": ...} line.
  [[nodiscard]] bool server_error() const { return server_error_; }
  [[nodiscard]] bool too_large() const { return too_large_; }
  // Whether the stream's last event came: nothing more is needed (net::Request::answered).
  [[nodiscard]] bool ended() const { return done_; }

 private:
  bool take_line(std::string_view line);

  Endpoint endpoint_;
  std::size_t max_text_bytes_;
  std::string partial_;  // a line not yet ended
  std::string text_;
  std::size_t kept_ = 0;  // text_'s size written back (escaped): what max_text_bytes bounds
  bool done_ = false;
  std::string done_reason_;
  std::optional<long long> prompt_tokens_;
  std::optional<long long> completion_tokens_;
  std::string problem_;
  bool server_error_ = false;
  bool too_large_ = false;
};

// Sends one batch request to the Ollama server at `server_url` (its base url): `http` carries the
// deadline, the cancel flag and max_body_bytes; its url and body are replaced. The Response is the
// one the OpenAI protocol would give: 200 and an OpenAI body, or the server's HTTP error status with
// an OpenAI error body ({"error": {"message": ...}}); an {"error": ...} line within the stream or a
// line that is not JSON is a 502 (the server failed mid-answer: sent again like any 5xx). Errors are
// net::perform's (a cancel, a timeout, a lost connection, an answer too large) and to_native's.
[[nodiscard]] Result<net::Response> perform(net::Request http, std::string_view server_url, Endpoint endpoint,
                                            std::string_view openai_body);

// Asks the server to unload `model` now (a generate request with no prompt and keep_alive 0): its
// GPU memory is freed once this returns. An error when the server answers anything but success.
[[nodiscard]] Result<void> unload(const ServerConfig& server, std::string_view model, long long timeout_ms = 10000);

// How long a yield waits for Ollama's unload (and for its list of loaded models), managed or
// external server alike: a managed server's SIGTERM follows whatever it answers, and the
// scheduler's kExternalUnloadMs waits as long for an external one.
inline constexpr long long kUnloadTimeoutMs = 5000;

// A model the server holds in memory (/api/ps).
struct LoadedModel {
  std::string name;
  long long size_bytes = 0;       // its whole size in memory
  long long size_vram_bytes = 0;  // the part in GPU memory: what a yield waits to see freed
};
// The models the server holds in memory now (/api/ps), in its order.
[[nodiscard]] Result<std::vector<LoadedModel>> loaded(const ServerConfig& server, long long timeout_ms = 10000);

}  // namespace tarmac::backfill::ollama
