// The OpenAI-compatible protocol for backfill (docs/backfill.md "Streaming"): a batch request's body
// is sent with "stream": true (and stream_options.include_usage, for its token counts), its answer
// read as it arrives (server-sent events: "data: {chunk}" lines, "data: [DONE]" at the end) and put
// back together into the one chat.completion or text_completion body the output holds, the same as
// the server would have answered unstreamed. Streaming is what shows a server that stopped
// generating mid-answer, and makes a cancel end the generation on every server (a closed
// connection is noticed at the next token sent on it). A request whose answer the reader could not
// put back together exactly (tools, logprobs, echo, best_of) is sent as it is, unstreamed.
//
// Every answer is hostile: an event that is not JSON, a stream that ends without its [DONE], an
// answer larger than the caller's bound are failures, never trusted halves.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "tarmac/backfill/batch_input.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::backfill::openai {

// The body to send streamed for an OpenAI request body of `endpoint`: the body with "stream": true
// and "stream_options": {"include_usage": true}; nullopt when it asks for what the reader does not
// put back together (tools, functions, logprobs, echo, best_of): it is sent as it is. Invalid when
// the body is not a JSON object.
[[nodiscard]] Result<std::optional<std::string>> streamed_body(Endpoint endpoint, std::string_view body);

// Reads a streamed answer piece by piece, keeping only each choice's text so far, its finish
// reason, and the usage (never the whole stream), up to `max_text_bytes` of text in all (as it is
// written back, escaped), one event at most 1 MiB. An answer that is not a stream (an HTTP error's
// JSON body, a server that ignored "stream") is kept as it is, up to the same bound. A stream is an
// answer only once it has ended with [DONE] and every choice with its finish reason.
class StreamReader {
 public:
  StreamReader(Endpoint endpoint, std::size_t max_text_bytes) : endpoint_(endpoint), max_text_bytes_(max_text_bytes) {}
  // Takes the next piece; false once the answer is to be read no further (an event that is not a
  // JSON object, the text over its bound): problem() then says why.
  [[nodiscard]] bool feed(std::string_view piece);
  // After the transfer: the answer's body as the server would have given it unstreamed, or why
  // there is none (an error event; the stream ended before its [DONE]).
  [[nodiscard]] Result<std::string> finish();
  [[nodiscard]] const std::string& problem() const { return problem_; }
  // Whether the trouble is the server's own {"error": ...} event within the stream.
  [[nodiscard]] bool server_error() const { return server_error_; }
  [[nodiscard]] bool too_large() const { return too_large_; }
  // Whether any "data:" event came: the answer is a stream.
  [[nodiscard]] bool streamed() const { return streamed_; }
  // Whether the stream's last event came: nothing more is needed (net::Request::answered).
  [[nodiscard]] bool ended() const { return done_; }

 private:
  bool take_line(std::string_view line);
  bool take_event(std::string_view data);
  void take_error(std::string_view data);
  bool grow(std::size_t more);
  bool too_large(std::string_view what);  // false, the answer's problem `what` (empty: its text's bound)

  struct Choice {
    std::string text;       // message.content (chat) or text (completions)
    std::string reasoning;      // a thinking model's, which llama-server and vLLM send apart
    std::string reasoning_key;  // its name in their delta: "reasoning_content" or "reasoning"; empty: none
    std::string role = "assistant";
    std::optional<std::string> finish_reason;
  };

  Endpoint endpoint_;
  std::size_t max_text_bytes_;
  std::size_t kept_ = 0;   // what the choices' text takes written back (escaped), all together
  std::string partial_;    // a line not yet ended
  std::string raw_;        // the answer as it came, while it is no stream
  bool streamed_ = false;
  bool done_ = false;      // data: [DONE]
  bool next_is_error_ = false;  // "event: error" came: the next data is the failure
  std::string id_;
  std::string model_;
  std::string fingerprint_;
  long long created_ = 0;
  std::map<long long, Choice> choices_;
  std::optional<std::string> usage_;  // the last usage object, as JSON text
  std::string problem_;
  bool server_error_ = false;
  bool too_large_ = false;
};

// Sends one batch request to `http.url` (the server's url + the request's), streamed when
// `stream` and streamed_body() says it can be: `http` carries the deadline, the cancel flag and
// max_body_bytes; its body is replaced. The Response is the one the server would give unstreamed:
// its status and body; an {"error": ...} event within the stream or an event that is not JSON is a
// 502 with OpenAI's error body (the server failed mid-answer: sent again like any 5xx). A stream
// that ends before its [DONE] is a lost connection. Errors are net::perform's.
[[nodiscard]] Result<net::Response> perform(net::Request http, Endpoint endpoint, std::string_view body, bool stream);

}  // namespace tarmac::backfill::openai
