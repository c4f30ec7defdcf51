// Test support for the ledger's tests: a store and an output in a fresh directory, a batch of N
// requests, a fake server's answers, a dispatcher that drains the batch one request at a time, and
// the check that matters: every custom_id in the output exactly once, the store agreeing.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tarmac/backfill/batch_db.hpp"
#include "tarmac/backfill/ledger.hpp"

namespace tarmac::backfill::test_support {

class BatchFixture {
 public:
  // A batch of `n` requests in a store of its own, or in `same_store`'s (its output still its own).
  explicit BatchFixture(std::size_t n, const BatchFixture* same_store = nullptr) {
    char tmpl[] = "/tmp/tarmac-backfill-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    dir_ = tmpl;
    db_path_ = same_store != nullptr ? same_store->db_path_ : dir_ + "/tarmac.db";
    output_path_ = dir_ + "/out.jsonl";
    auto db = BatchDb::open(db_path_);
    EXPECT_TRUE(db.ok()) << db.error().message;
    std::vector<BatchRequest> requests;
    for (std::size_t i = 0; i < n; ++i) {
      requests.push_back({"req-" + std::to_string(i), Endpoint::ChatCompletions,
                          R"({"model":"m","messages":[{"role":"user","content":"hi req-)" + std::to_string(i) + R"("}]})", i + 1});
    }
    Batch batch;
    batch.user = "amy";
    batch.model = "m";
    batch.output_path = output_path_;
    EXPECT_TRUE(db->create(batch, requests).ok());
    id_ = batch.id;
    util::Fd out(::open(output_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    EXPECT_TRUE(out.valid());
    n_ = n;
  }
  ~BatchFixture() { std::filesystem::remove_all(dir_); }

  [[nodiscard]] long long id() const { return id_; }
  [[nodiscard]] std::size_t size() const { return n_; }
  [[nodiscard]] const std::string& db_path() const { return db_path_; }
  [[nodiscard]] const std::string& output_path() const { return output_path_; }
  [[nodiscard]] BatchDb open_db() const {
    auto db = BatchDb::open(db_path_);
    if (!db.ok()) std::abort();
    return std::move(db).value();
  }
  [[nodiscard]] util::Fd open_output() const {
    return util::Fd(::open(output_path_.c_str(), O_RDWR | O_CLOEXEC));
  }
  [[nodiscard]] std::string output() const {
    std::ifstream in(output_path_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void write_output(const std::string& text) const {
    std::ofstream(output_path_, std::ios::binary | std::ios::trunc) << text;
  }

 private:
  std::string dir_, db_path_, output_path_;
  long long id_ = 0;
  std::size_t n_ = 0;
};

// What a fake server answers to `s`: request 3 of every ten failed with a 500, the rest a completion.
inline Answer fake_answer(const Sendable& s) {
  Answer a;
  a.index = s.row.index;
  a.custom_id = s.row.custom_id;
  a.ended_ms = 1000 + s.row.index;
  if (s.row.index % 10 == 3) {
    a.status = 500;
    a.body = R"({"error":"overloaded"})";
    a.error_code = "http_500";
    a.error_message = "the server answered 500";
  } else {
    a.status = 200;
    a.body = R"({"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"ok )" +
             s.row.custom_id + R"("}}],"usage":{"prompt_tokens":5,"completion_tokens":7}})";
  }
  return a;
}

// Sends every pending request through `ledger` until none is left, as a dispatcher does: a request
// whose line could not be written goes back to pending. Returns the custom ids it sent.
inline std::vector<std::string> drain(BatchDb& db, Ledger& ledger, long long batch) {
  std::vector<std::string> sent;
  for (int rounds = 0; rounds < 1000; ++rounds) {
    auto taken = db.take_pending(batch, 3, 5000);
    EXPECT_TRUE(taken.ok());
    if (!taken.ok() || taken->empty()) break;
    for (const auto& s : *taken) {
      sent.push_back(s.row.custom_id);
      auto done = ledger.complete(fake_answer(s));
      if (!done.ok()) EXPECT_TRUE(db.back_to_pending(batch, s.row.index, done.error().message).ok());
    }
  }
  return sent;
}

// Nothing of the output lies at or past `at`, where the ledger is about to write: a fake write
// checks this before each line.
inline void expect_nothing_past(int fd, off_t at) {
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, at) << "bytes were left past the end the store accounts for";
}

// Each custom_id of the output (in order), from lines that must all be whole JSON.
inline std::vector<std::string> output_ids(const std::string& output) {
  std::vector<std::string> ids;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << line;
    if (j.is_object()) ids.push_back(j.value("custom_id", ""));
  }
  EXPECT_TRUE(output.empty() || output.back() == '\n');
  return ids;
}

// Every request's line exactly once, and the store agrees: all answered, each at its place, the
// output's length the store's.
inline void expect_exactly_once(const BatchFixture& f) {
  const std::string out = f.output();
  std::map<std::string, int> seen;
  for (const auto& id : output_ids(out)) ++seen[id];
  ASSERT_EQ(seen.size(), f.size());
  for (const auto& [id, count] : seen) EXPECT_EQ(count, 1) << id;
  auto db = f.open_db();
  auto batch = db.batch(f.id());
  ASSERT_TRUE(batch.ok() && batch->has_value());
  EXPECT_EQ((*batch)->output_bytes, static_cast<long long>(out.size()));
  auto rows = db.rows(f.id());
  ASSERT_TRUE(rows.ok());
  for (const auto& r : *rows) {
    EXPECT_TRUE(r.state == RequestState::Done || r.state == RequestState::Failed) << r.custom_id;
    ASSERT_GE(r.out_offset, 0) << r.custom_id;
    const auto line = out.substr(static_cast<std::size_t>(r.out_offset), static_cast<std::size_t>(r.out_len));
    EXPECT_NE(line.find("\"custom_id\":\"" + r.custom_id + "\""), std::string::npos) << line;
  }
}

}  // namespace tarmac::backfill::test_support
