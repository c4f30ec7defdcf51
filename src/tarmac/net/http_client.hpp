// tarmac's one HTTP client (issue 16): libcurl, loaded at run time like the NVIDIA driver library,
// so the release binary stays static and a machine without libcurl loses only what needs it (the
// alert webhook, backfill), with a message naming the library. Every request has a deadline, can
// be cancelled from another thread, reads its answer in pieces (streaming), and bounds what it
// keeps of it. Only http:// and https:// are spoken, redirects are not followed, and the peer's
// certificate is always verified (against `ca_file` when given, else the system's store).
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::net {

// What a request watches to end early, set from another thread: set() ends the requests watching it
// at once, their connections shut down (libcurl alone would look at a flag about once a second
// while nothing arrives: the whole of a yield's time, before). reset() readies it for the next ones.
class Cancel {
 public:
  void set();
  void reset() { flag_ = false; }
  [[nodiscard]] bool is_set() const { return flag_.load(); }

  // perform()'s: the sockets of the requests watching it, shut down by set(). A socket is forgotten
  // before it is closed, so set() never reaches another's descriptor of the same number.
  void watch(int fd);
  void forget(int fd);

 private:
  std::atomic<bool> flag_{false};
  std::mutex m_;
  std::set<int> fds_;
};

// The two ends of a request's connection as libcurl has them, once it is made.
struct Connection {
  std::string peer_ip;  // the server's end: "127.0.0.1", "::1"
  unsigned peer_port = 0;
  std::string local_ip;  // ours
  unsigned local_port = 0;
};

class Session;

struct Request {
  std::string method = "POST";           // GET or POST
  std::string url;                       // http:// or https:// only
  std::vector<std::string> headers;      // "Name: value", each without CR or LF
  std::string body;                      // sent as is (POST)
  long long timeout_ms = 5000;           // the whole request, connecting included
  long long connect_timeout_ms = 0;      // 0: the whole timeout
  std::string ca_file;                   // a PEM bundle to trust instead of the system's
  Cancel* cancel = nullptr;              // set from another thread: the request ends at once
  // Called with each piece of the answer's body as it arrives; returning false ends the request
  // (an Error of code Io saying it was stopped). Without it, the body is kept in Response::body.
  std::function<bool(std::string_view)> on_data;
  std::size_t max_body_bytes = 1 << 20;  // kept in Response::body; more is an error
  // Whether the answer is whole by the caller's reading of on_data (a stream's last event seen).
  // Once it is, a server that neither ends the body nor sends more for answered_linger_ms (it holds
  // the connection) is not waited for: the request ends as answered, a Response with its status,
  // and the connection is closed, not kept. Looked at about once a second (libcurl's progress
  // calls). Empty: the body's own end is waited for, up to the timeout.
  std::function<bool()> answered;
  long long answered_linger_ms = 1000;
  // Called once the connection is made, before anything is sent on it; false: nothing is sent and
  // the request fails (Failure::Untrusted). Needs libcurl 7.80 (CURLOPT_PREREQFUNCTION): with an
  // older one the request fails rather than go unchecked.
  std::function<bool(const Connection&)> check_connection;
  // Where to keep the connection open for the next request (HTTP keep-alive); nullptr: closed after
  // this one. check_connection is asked again before each request on a kept connection.
  Session* session = nullptr;
};

struct Response {
  long status = 0;   // the HTTP status code
  std::string body;  // empty when on_data took it
};

// One thread's connections kept open between its requests to the same server (a new TCP connection
// per request costs more CPU than all else a batch's request does). Used by one thread at a time.
// The Cancel of its requests must outlive it (its sockets are forgotten by their Cancel when it
// closes them). A request whose cancel, check_connection (set or not) or ca_file differs from the
// last one's starts afresh: the connections kept are closed.
class Session {
 public:
  Session() = default;
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // Closes the connections kept, before a wait of unknown length: an open connection holds one of
  // the server's connection threads (llama-server's HTTP library has one per open connection, from
  // a fixed pool), which its other clients would wait for.
  void close();

 private:
  friend Result<Response> perform(const Request& request);
  void* easy_ = nullptr;  // libcurl's handle, which keeps the connections
  const Cancel* cancel_ = nullptr;
  bool checked_ = false;
  std::string ca_file_;
};

// A GET of `url` within `timeout_ms`: the body of a 200 answer of at most `max_bytes`; any other
// status is an error naming the URL and the status.
[[nodiscard]] Result<std::string> get(const std::string& url, long long timeout_ms, std::size_t max_bytes);

// What went wrong with a request that got no answer, as the cause of perform()'s Io errors
// (Error::cause_as<Failure>()): a caller retries Connection and Timeout, not the others.
enum class Failure {
  Unreachable,  // no connection was made (refused, no route, the name not resolved): nothing was sent
  Connection,  // TLS, or the connection lost before the whole answer
  Timeout,     // the request's deadline passed
  Cancelled,   // the cancel flag was set
  Refused,     // the answer was over max_body_bytes, or on_data said stop
  Untrusted,   // check_connection refused the connection: nothing was sent
};

// Whether `url` is one this client will send to: http:// or https://, a host, no credentials in
// it, no whitespace or control characters. The error names what is wrong.
[[nodiscard]] Result<void> check_url(std::string_view url);

// Whether `url`'s host is a loopback address (127.0.0.0/8, [::1], localhost): one whose other end
// this machine's /proc can name (host/tcp_owner.hpp). False for a url check_url refuses.
[[nodiscard]] bool is_loopback_url(std::string_view url);
// The TCP port of loopback `url` (is_loopback_url): the one it names, else its scheme's (80, 443);
// nullopt for any other url, or a port that is not 1 to 65535.
[[nodiscard]] std::optional<unsigned> loopback_port(std::string_view url);

// Sends `request` and waits for the whole answer (or the deadline, or the cancel flag). Any HTTP
// status is a Response: the caller decides what a 4xx or 5xx means. Errors: Invalid (a bad url or
// header), NotFound (libcurl is not installed), Io (resolving, connecting, TLS, a timeout, a
// cancel, an answer over max_body_bytes; its cause a Failure).
[[nodiscard]] Result<Response> perform(const Request& request);

// Whether libcurl could be loaded, or why not (the message names libcurl.so.4).
[[nodiscard]] Result<void> available();

}  // namespace tarmac::net
