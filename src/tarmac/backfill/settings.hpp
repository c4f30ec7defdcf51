// Backfill's configuration, the [backfill.server.NAME] tables (docs/configuration.md): the LLM
// servers that batches are sent to. Header-only, like sched/settings.hpp, so that config reads it
// without depending on what backfill does with it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tarmac::backfill {

// external: a server already running at `url` (Ollama's service, a vLLM pod): tarmac can only stop
// sending to it. managed: a command tarmac starts as a backfill job of the scheduler on idle GPUs,
// and stops when a normal job needs them (backfill/managed.hpp).
enum class ServerKind { External, Managed };
// openai: /v1/chat/completions and /v1/completions (llama-server, vLLM, Ollama all serve them).
// ollama: Ollama's native /api/generate and /api/chat (not built yet).
enum class ServerProtocol { OpenAi, Ollama };

struct ServerConfig {
  ServerKind kind = ServerKind::External;
  ServerProtocol protocol = ServerProtocol::OpenAi;
  std::string url;                     // "http://127.0.0.1:8080": a request's url is appended to it
  long long timeout_ms = 10 * 60 * 1000;  // one request, connecting included: a generation can be long
  unsigned retries = 3;                // a 5xx, a refused connection or a timeout is sent again this often
  unsigned max_parallel = 4;           // requests in flight at once, whatever a batch's --parallel asks
  // Managed servers only (the url is then http://127.0.0.1:PORT, known once the server runs).
  std::vector<std::string> command;    // argv, "{port}" and "{model}" replaced in each word; no shell
  std::string preset;                  // "llama-server", "ollama" or "vllm": the command and health path
  std::string binary;                  // the preset's program, when not found on the agent's PATH
  unsigned gpus = 1;                   // how many idle GPUs it runs on
  std::string user;                    // the account it runs as: required, never root
  long long ready_timeout_ms = 5 * 60 * 1000;  // from its start until its health path answers 200
};

struct BackfillConfig {
  std::map<std::string, ServerConfig> servers;  // by NAME
};

}  // namespace tarmac::backfill
