// Test support for the agent's batch requests (service.hpp): a Service on a store in a fresh
// directory, and the descriptors a client hands over, built as a hostile client would: a sealed
// memfd or anything else for the input, a file of a chosen owner for the output.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tarmac/backfill/service.hpp"
#include "tarmac/util/fd.hpp"

namespace tarmac::backfill::test_support {

// A user other than the one running the tests: files are given to it when the tests run as root
// (the second user of the integration tests), else the tests' own uid stands in for it.
inline uid_t submitter_uid() { return ::getuid() == 0 ? 1001 : ::getuid(); }

inline util::Fd sealed_input(const std::string& text, int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) {
  util::Fd fd(::memfd_create("test-input", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  if (seals != 0) EXPECT_EQ(::fcntl(fd.get(), F_ADD_SEALS, seals), 0);
  return fd;
}

inline std::string request_lines(int n, const std::string& prefix = "r", std::size_t pad = 0) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += R"({"custom_id":")" + prefix + std::to_string(i) +
           R"(","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":")" +
           std::string(pad, 'p') + R"("}]}})" + "\n";
  }
  return out;
}

// Midday, while the fixture's clock says midnight.
inline constexpr const char* kClosedWindow = "12:00-13:00";

class ServiceFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tarmac-backfill-svc-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    open_service();
  }
  void TearDown() override {
    service_.reset();
    std::filesystem::remove_all(dir_);
  }
  void open_service() {
    service_.reset();
    ServiceOptions options{dir_ + "/tarmac.db", {}, limits_, quota_};
    // A server nobody listens on, and a clock always outside the batches' window (kClosedWindow):
    // what these tests check is the agent's answers, and nothing is ever sent.
    options.config.servers["local"].url = "http://127.0.0.1:9";
    options.config.servers["local"].models = models_;
    options.dispatch.local_minute = [] { return 0; };
    auto s = Service::open(std::move(options));
    ASSERT_TRUE(s.ok()) << s.error().message;
    service_ = std::move(*s);
  }
  // A new file `name` in the test folder, owned by `uid`, open as `flags`.
  util::Fd output(const std::string& name, uid_t uid, int flags = O_RDWR) {
    const std::string path = dir_ + "/" + name;
    util::Fd fd(::open(path.c_str(), flags | O_CREAT | O_CLOEXEC, 0600));
    EXPECT_TRUE(fd.valid()) << path;
    if (uid != ::getuid()) EXPECT_EQ(::fchown(fd.get(), uid, static_cast<gid_t>(-1)), 0);
    return fd;
  }
  // An answer given later (a submission's): its last step, posted from the intake's thread.
  struct Posted {
    std::mutex mutex;
    std::condition_variable cv;
    sched::Finish finish;
  };
  // The answer to `req`, as the scheduler's thread gives it: a submission's last step is run here
  // once the intake has posted it, as the agent's loop runs it.
  nlohmann::json ask(uid_t uid, std::vector<util::Fd> fds, nlohmann::json req) {
    sched::Peer peer;
    peer.uid = uid;
    auto posted = std::make_shared<Posted>();
    bool deferred = false;
    auto answer = service_->answer(peer, fds, req, [&] {
      deferred = true;
      return [posted](sched::Finish finish) {
        std::lock_guard lock(posted->mutex);
        posted->finish = std::move(finish);
        posted->cv.notify_all();
      };
    });
    EXPECT_TRUE(answer.has_value());
    if (!deferred) return answer.value_or(nlohmann::json::object());
    std::unique_lock lock(posted->mutex);
    EXPECT_TRUE(posted->cv.wait_for(lock, std::chrono::seconds(60), [&] { return bool(posted->finish); }))
        << "the submission was never answered";
    return posted->finish ? posted->finish() : nlohmann::json::object();
  }
  nlohmann::json submit(uid_t uid, util::Fd input, util::Fd out, const std::string& name = "out.jsonl") {
    std::vector<util::Fd> fds;
    fds.push_back(std::move(input));
    fds.push_back(std::move(out));
    return ask(uid, std::move(fds),
               {{"op", "backfill_submit"}, {"model", "m"}, {"output_path", dir_ + "/" + name}, {"window", kClosedWindow}});
  }
  // A batch of `n` requests from `uid` with its own new output `name`.
  nlohmann::json submit_new(uid_t uid, const std::string& name, int n = 1, std::size_t pad = 0) {
    return submit(uid, sealed_input(request_lines(n, "r", pad)), output(name, uid), name);
  }
  static std::string words(const nlohmann::json& answer) { return answer.value("error", ""); }

  std::string dir_;
  InputLimits limits_;
  BatchQuota quota_;
  std::vector<std::string> models_;  // the server's `models`; empty: any
  std::unique_ptr<Service> service_;
};

}  // namespace tarmac::backfill::test_support
