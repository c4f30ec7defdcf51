// Backfill's configuration, the [backfill.server.NAME] tables (docs/configuration.md): the LLM
// servers that batches are sent to. Header-only, like sched/settings.hpp, so that config reads it
// without depending on what backfill does with it.
#pragma once

#include <pwd.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::backfill {

// external: a server already running at `url` (Ollama's service, a vLLM pod): tarmac can only stop
// sending to it. managed: a command tarmac starts as a backfill job of the scheduler on idle GPUs,
// and stops when a normal job needs them (backfill/managed.hpp).
enum class ServerKind { External, Managed };

// How often a running server's GPU time is written to the ledger, managed or external.
inline constexpr long long kAccountMs = 10 * 1000;
// openai: /v1/chat/completions and /v1/completions (llama-server, vLLM, Ollama all serve them).
// ollama: Ollama's native /api/chat and /api/generate, streamed (ollama.hpp).
enum class ServerProtocol { OpenAi, Ollama };

struct ServerConfig {
  ServerKind kind = ServerKind::External;
  ServerProtocol protocol = ServerProtocol::OpenAi;
  std::string url;                     // "http://127.0.0.1:8080": a request's url is appended to it
  long long timeout_ms = 10 * 60 * 1000;  // one request, connecting included: a generation can be long
  unsigned retries = 3;                // a 5xx, a refused connection or a timeout is sent again this often
  unsigned max_parallel = 4;           // requests in flight at once, all its batches together
  // openai: each request is sent with "stream": true and its answer put back together (openai.hpp);
  // false: sent as it is, the answer read whole. Ollama's native protocol is always streamed.
  bool stream = true;
  // The account whose process serves a loopback url: each connection's other end must be its
  // (host/tcp_owner.hpp), or nothing is sent on it. Empty: not checked. A managed server's is its `user`.
  std::string server_user;
  // Managed servers only (the url is then http://127.0.0.1:PORT, known once the server runs).
  std::vector<std::string> command;    // argv, "{port}" and "{model}" replaced in each word; no shell
  std::string preset;                  // "llama-server", "ollama" or "vllm": the command and health path
  std::string binary;                  // the preset's program, when not found on the agent's PATH
  unsigned gpus = 1;                   // how many idle GPUs it runs on
  std::string user;                    // the account it runs as: required, never root
  // The models its batches may name (--model); empty: any. A managed server opens the one named
  // ({model}) as its account: the list keeps users to the models meant for it.
  std::vector<std::string> models;
  long long ready_timeout_ms = 5 * 60 * 1000;  // from its start until its health path answers 200
};

// The uid of account `user` (a server's server_user); NotFound names it.
[[nodiscard]] inline Result<uid_t> server_user_uid(const std::string& user) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) return pw.pw_uid;
  return make_error(Error::Code::NotFound, "server_user '" + user + "' is no account on this machine");
}

// The server's base URL and `path` ("/v1/completions", "/api/ps"), without a doubled '/'.
[[nodiscard]] inline std::string server_url(std::string_view base, std::string_view path) {
  while (!base.empty() && base.back() == '/') base.remove_suffix(1);
  return std::string(base) + std::string(path);
}

struct BackfillConfig {
  std::map<std::string, ServerConfig> servers;  // by NAME
};

}  // namespace tarmac::backfill
