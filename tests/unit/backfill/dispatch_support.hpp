// What the dispatcher's tests share (dispatch_test.cpp, dispatch_stop_test.cpp): the fake server's
// answers, a quick dispatcher, a server and a batch for it, and waiting for the batch's end.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fmt/format.h>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../support/http_server.hpp"
#include "ledger_support.hpp"
#include "tarmac/backfill/dispatch.hpp"

namespace tarmac::backfill::test_support {

using json = nlohmann::json;
using testing::FakeLlm;

// The custom id a request's body names ("hi req-N" is its message, ledger_support.hpp).
inline std::string custom_id_of(const std::string& request) {
  const std::string body = testing::body_of(request);
  const auto at = body.find("hi req-");
  return at == std::string::npos ? "" : body.substr(at + 3, body.find('"', at) - at - 3);
}

inline std::string completion(int tokens) {
  return fmt::format(R"({{"object":"chat.completion","choices":[{{"message":{{"role":"assistant","content":"x"}}}}],)"
                     R"("usage":{{"prompt_tokens":3,"completion_tokens":{}}}}})",
                     tokens);
}

// An output on a hung NFS server: the fdatasyncs that `hangs` picks (by their number, from 0, and
// their descriptor) do not return until release(). hung() counts the syncs begun.
class HungSync {
 public:
  explicit HungSync(std::function<bool(int number, int fd)> hangs) : hangs_(std::move(hangs)) {}
  // For DispatchOptions::io.sync: the object must outlive the dispatcher.
  std::function<int(int)> sync() {
    return [this](int fd) {
      if (hangs_(hung_++, fd)) {
        while (!released_) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      return ::fdatasync(fd);
    };
  }
  void release() { released_ = true; }
  [[nodiscard]] int hung() const { return hung_; }

 private:
  std::function<bool(int, int)> hangs_;
  std::atomic<int> hung_{0};
  std::atomic<bool> released_{false};
};

inline DispatchOptions quick(const BatchFixture& f) {
  DispatchOptions o;
  o.db_path = f.db_path();
  o.backoff_ms = 5;
  o.max_backoff_ms = 20;
  o.window_recheck_ms = 10;
  return o;
}

inline ServerConfig server_at(const std::string& url, unsigned max_parallel = 4, unsigned retries = 3) {
  ServerConfig s;
  s.url = url;
  s.max_parallel = max_parallel;
  s.retries = retries;
  s.timeout_ms = 5000;
  return s;
}

inline ServerConfig server_at(const FakeLlm& fake, unsigned max_parallel = 4, unsigned retries = 3) {
  return server_at(fake.url(), max_parallel, retries);
}

inline Batch batch_of(const BatchFixture& f, unsigned parallel, const std::string& window = "") {
  auto db = f.open_db();
  auto b = db.batch(f.id());
  EXPECT_TRUE(b.ok() && b->has_value());
  Batch batch = **b;
  batch.parallel = parallel;
  batch.server = "fake";
  batch.window = window;
  return batch;
}

// Waits until the batch has ended (every request answered), up to 20 s.
inline bool wait_done(const BatchFixture& f) {
  auto db = f.open_db();
  return FakeLlm::wait_for(
      [&] {
        auto b = db.batch(f.id());
        return b.ok() && b->has_value() && (*b)->state == BatchState::Done;
      },
      20000);
}

inline std::vector<json> output_lines(const BatchFixture& f) {
  std::vector<json> lines;
  const std::string out = f.output();
  for (std::size_t from = 0; from < out.size(); from = out.find('\n', from) + 1) {
    lines.push_back(json::parse(out.substr(from, out.find('\n', from) - from)));
  }
  return lines;
}

// The batch's reason in the store.
inline std::string reason_of(const BatchFixture& f) {
  auto b = f.open_db().batch(f.id());
  return b.ok() && b->has_value() ? (*b)->reason : "";
}

}  // namespace tarmac::backfill::test_support
