// The backfill dispatcher's own cost (issue 16 "Performance"), printed as ratios to its goals:
//
//   1. CPU per request at about 100 requests/s against a fast fake OpenAI-compatible server that
//      runs in a child process (so only the dispatcher's CPU is this process's): goal < 1 ms, the
//      ledger's write, fsync and commit included.
//   2. With --llama-server BIN --model GGUF: llama-server's tokens/s through the dispatcher
//      (ledger and all) against the same requests sent straight to it by as many threads: goal
//      within 5 %.
//
// backfill_bench [--requests N] [--llama-server BIN --model GGUF]
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <string>
#include <thread>
#include <vector>

#include "../tests/unit/support/http_server.hpp"
#include "tarmac/backfill/dispatch.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/clock.hpp"

namespace {

using namespace tarmac;
using namespace tarmac::backfill;

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string body_of_request(int i) {
  return fmt::format(R"({{"model":"tiny","messages":[{{"role":"user","content":"Summarise: document {} about the water"}}]}})",
                     i);
}

// A store with one batch of `n` chat requests and its empty output, in a fresh directory.
struct Bench {
  std::string dir;
  long long id = 0;
  Batch batch;

  explicit Bench(int n, unsigned parallel) {
    char tmpl[] = "/tmp/tarmac-backfill-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    dir = tmpl;
    auto db = BatchDb::open(dir + "/tarmac.db");
    if (!db.ok()) std::abort();
    std::vector<BatchRequest> requests;
    for (int i = 0; i < n; ++i) {
      requests.push_back({fmt::format("r{}", i), Endpoint::ChatCompletions, body_of_request(i),
                          static_cast<std::size_t>(i + 1)});
    }
    batch.model = "tiny";
    batch.server = "bench";
    batch.parallel = parallel;
    batch.output_path = dir + "/out.jsonl";
    if (!db->create(batch, requests).ok()) std::abort();
    id = batch.id;
  }
  ~Bench() { std::filesystem::remove_all(dir); }

  // Sends the batch to `url` and returns the wall seconds until it is done.
  double run(const std::string& url, unsigned max_parallel, bool stream = true) {
    DispatchOptions o;
    o.db_path = dir + "/tarmac.db";
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    o.on_done = [&](long long) {
      std::lock_guard lock(m);
      done = true;
      cv.notify_all();
    };
    auto d = Dispatcher::open(o);
    if (!d.ok()) std::abort();
    ServerConfig s;
    s.url = url;
    s.max_parallel = max_parallel;
    s.stream = stream;
    util::Fd out(::open(batch.output_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    const long long t0 = util::monotonic_ms();
    if (!(*d)->start(batch, s, std::move(out)).ok()) std::abort();
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return done; });  // no polling: this process's CPU is the dispatcher's
    return static_cast<double>(util::monotonic_ms() - t0) / 1000;
  }

  long long completion_tokens() {
    auto db = BatchDb::open(dir + "/tarmac.db");
    return db->progress(id)->completion_tokens;
  }
};

// A streamed answer as llama-server sends it (docs/backfill.md "Streaming"): a role, four tokens,
// the finish reason, the usage, [DONE].
constexpr const char* kStream =
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"tiny\",\"choices\":"
    "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" one\"},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" two\"},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" three\"},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" four\"},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\n"
    "data: [DONE]\n\n";

// A fake server in a child process answering each request after `delay_ms`; returns its pid and url.
std::pair<pid_t, std::string> fake_in_child(int delay_ms) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    testing::FakeLlm fake(
        [delay_ms](int, const std::string& request) {
          std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
          if (request.find(R"("stream":true)") != std::string::npos) return testing::FakeLlm::Reply{"200 OK", kStream};
          return testing::FakeLlm::Reply{
              "200 OK", R"({"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"ok"}}],)"
                        R"("usage":{"prompt_tokens":3,"completion_tokens":4}})"};
        },
        0, /*keep_alive=*/true);  // as real servers: the dispatcher's kept connection is measured
    const std::string url = fake.url();
    (void)!::write(fds[1], url.data(), url.size());
    ::close(fds[1]);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char buf[128] = {};
  const ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
  ::close(fds[0]);
  if (n <= 0) std::abort();
  return {child, std::string(buf, static_cast<std::size_t>(n))};
}

// `stream`: each answer streamed (the default, docs/backfill.md "Streaming") and put back together;
// else the whole answer in one piece.
void cpu_per_request(int n, bool stream) {
  auto [child, url] = fake_in_child(10);  // one request in flight, 10 ms each: about 100 requests/s
  Bench bench(n, 1);
  const double cpu0 = cpu_seconds();
  const double wall = bench.run(url, 1, stream);
  const double cpu_ms = (cpu_seconds() - cpu0) * 1000 / n;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  fmt::print("dispatcher CPU per request, answers {}: {:.3f} ms at {:.0f} requests/s ({} requests); goal < 1 ms: "
             "ratio {:.2f}\n",
             stream ? "streamed" : "whole   ", cpu_ms, n / wall, n, cpu_ms / 1.0);
}

// Tokens/s of the same requests sent straight to the server by `parallel` threads.
double direct_tokens_per_s(const std::string& url, int n, unsigned parallel) {
  std::atomic<int> next{0};
  std::atomic<long long> tokens{0};
  const long long t0 = util::monotonic_ms();
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < parallel; ++t) {
    threads.emplace_back([&] {
      for (int i; (i = next++) < n;) {
        net::Request r;
        r.url = url + "/v1/chat/completions";
        r.headers = {"Content-Type: application/json"};
        r.body = body_of_request(i);
        r.timeout_ms = 60000;
        auto a = net::perform(r);
        if (!a.ok()) std::abort();
        const auto at = a->body.find("\"completion_tokens\":");
        if (at != std::string::npos) tokens += std::atoll(a->body.c_str() + at + 20);
      }
    });
  }
  for (auto& t : threads) t.join();
  return static_cast<double>(tokens) / (static_cast<double>(util::monotonic_ms() - t0) / 1000);
}

void llama_tokens(const std::string& server, const std::string& model, int n) {
  const int port = 20000 + static_cast<int>(::getpid() % 20000);
  const pid_t child = ::fork();
  if (child == 0) {
    const std::string p = std::to_string(port);
    ::execl(server.c_str(), server.c_str(), "-m", model.c_str(), "--host", "127.0.0.1", "--port", p.c_str(), "-np",
            "4", "-c", "2048", "-n", "32", "-t", "1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const std::string url = fmt::format("http://127.0.0.1:{}", port);
  for (int i = 0; i < 300; ++i) {
    net::Request h;
    h.method = "GET";
    h.url = url + "/health";
    if (auto r = net::perform(h); r.ok() && r->status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  (void)direct_tokens_per_s(url, 8, 4);  // warm the prompt cache alike for both
  const double direct = direct_tokens_per_s(url, n, 4);
  Bench bench(n, 4);
  const double wall = bench.run(url, 4);
  const double through = static_cast<double>(bench.completion_tokens()) / wall;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  fmt::print("llama-server tokens/s: {:.0f} through the dispatcher, {:.0f} direct ({} requests, 4 at once); "
             "goal within 5 %: ratio {:.3f}\n",
             through, direct, n, through / direct);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 300;
  std::string server, model;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--requests") n = std::atoi(argv[i + 1]);
    if (flag == "--llama-server") server = argv[i + 1];
    if (flag == "--model") model = argv[i + 1];
  }
  if (auto ok = net::available(); !ok.ok()) {
    fmt::print(stderr, "{}\n", ok.error().message);
    return 1;
  }
  cpu_per_request(n, true);
  cpu_per_request(n, false);
  if (!server.empty() && !model.empty()) llama_tokens(server, model, n);
  return 0;
}
