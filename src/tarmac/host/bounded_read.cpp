#include "tarmac/host/bounded_read.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "tarmac/util/fs.hpp"

namespace tarmac::host {
namespace {

// Helpers kept waiting for the next read; more than that end after their read (a pass reads a
// few files at a time: one or two callers, the agent's sampler and its reaper).
constexpr unsigned kMaxIdleHelpers = 2;

}  // namespace

struct BoundedReader::State {
  struct Job {
    std::string path;
    bool started = false;
    bool done = false;
    bool abandoned = false;  // its caller's deadline passed while it ran: it counts as stuck
    // Its caller waits for it: the helper wakes the caller when it is done. Only the last read of
    // a round wakes it (and one it waits for alone), not each of them: a status of 32 processes
    // woke its caller 64 times for its command lines and environments, a futex round trip each.
    bool wake = false;
    std::chrono::steady_clock::time_point finished;  // when done: the next read's deadline counts from it
    std::optional<std::string> text;
  };

  std::mutex mutex;
  std::condition_variable work;  // helpers wait here for a job
  std::condition_variable done;  // callers wait here for theirs
  std::deque<std::shared_ptr<Job>> queue;
  std::multiset<std::string> stuck_paths;
  unsigned idle = 0;
  bool closing = false;
  ReadFn read;
};

// Holds the state, so the reader may go away while a helper is stuck.
void BoundedReader::help(const std::shared_ptr<State>& state) {
  // Signals are for the threads that handle them: a helper stuck in the kernel never takes one.
  sigset_t all;
  sigfillset(&all);
  (void)::pthread_sigmask(SIG_SETMASK, &all, nullptr);
  auto& s = *state;
  std::unique_lock lock(s.mutex);
  for (;;) {
    ++s.idle;
    s.work.wait(lock, [&] { return s.closing || !s.queue.empty(); });
    --s.idle;
    if (s.queue.empty()) return;  // closing
    const auto job = s.queue.front();
    s.queue.pop_front();
    job->started = true;
    lock.unlock();
    auto text = s.read(job->path);  // may block for as long as the target holds its lock
    lock.lock();
    job->text = std::move(text);
    job->done = true;
    job->finished = std::chrono::steady_clock::now();
    if (job->abandoned) s.stuck_paths.erase(s.stuck_paths.find(job->path));
    if (job->wake) s.done.notify_all();
    if (s.closing || s.idle >= kMaxIdleHelpers) return;
  }
}

BoundedReader::BoundedReader(Limits limits, ReadFn read) : limits_(limits), state_(std::make_shared<State>()) {
  state_->read = read ? std::move(read) : ReadFn(util::read_file);
}

BoundedReader::~BoundedReader() {
  const std::lock_guard lock(state_->mutex);
  state_->closing = true;
  state_->work.notify_all();
}

BoundedReader& BoundedReader::shared() {
  // Never destroyed: a helper may still be stuck at exit, and the process's end ends it.
  static BoundedReader* const reader = new BoundedReader();
  return *reader;
}

unsigned BoundedReader::stuck() const {
  const std::lock_guard lock(state_->mutex);
  return static_cast<unsigned>(state_->stuck_paths.size());
}

std::vector<BoundedRead> BoundedReader::read_many(const std::vector<std::string>& paths) {
  auto& s = *state_;
  std::vector<BoundedRead> out(paths.size());
  const auto limit = std::chrono::milliseconds(std::max(0LL, limits_.deadline_ms));
  const auto result = [](State::Job& job) {
    return job.text ? BoundedRead{ReadOutcome::Read, std::move(job.text)} : BoundedRead{ReadOutcome::Failed, {}};
  };
  std::vector<std::size_t> pending(paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) pending[i] = i;
  std::vector<bool> waited_unstarted(paths.size(), false);  // queued a whole deadline once already
  std::unique_lock lock(s.mutex);
  while (!pending.empty()) {
    // This round: every path still to read, queued at once.
    std::vector<std::pair<std::size_t, std::shared_ptr<State::Job>>> jobs;
    for (const std::size_t i : pending) {
      if (s.stuck_paths.size() >= limits_.max_stuck || s.stuck_paths.count(paths[i]) != 0) {
        out[i] = {ReadOutcome::Refused, {}};
        continue;
      }
      auto job = std::make_shared<State::Job>();
      job->path = paths[i];
      s.queue.push_back(job);
      jobs.emplace_back(i, std::move(job));
    }
    pending.clear();
    if (jobs.empty()) break;
    // A helper for this round unless one is idle beyond those the reads queued ahead of it need
    // (another caller's reads, one of which may be stuck).
    if (s.idle <= s.queue.size() - jobs.size()) {
      try {
        std::thread(help, state_).detach();
      } catch (const std::system_error&) {
        // No thread to be had: without one the reads cannot be bounded, so they are not made.
        for (auto& [i, job] : jobs) {
          s.queue.erase(std::find(s.queue.begin(), s.queue.end(), job));
          out[i] = {ReadOutcome::Refused, {}};
        }
        break;
      }
    }
    const State::Job& last = *jobs.back().second;
    jobs.back().second->wake = true;
    s.work.notify_all();
    bool requeue_rest = false;  // after a read that missed its deadline: the unstarted go to a new round
    auto settled = std::chrono::steady_clock::now();
    for (auto& [i, job] : jobs) {
      if (requeue_rest && !job->started && !job->done) {
        s.queue.erase(std::find(s.queue.begin(), s.queue.end(), job));
        pending.push_back(i);
        continue;
      }
      // Each read its own deadline, counted from when the one before it was settled. The caller
      // sleeps until the round's last read is done or this read's deadline passes, whichever is
      // first. A read still running then (another helper took the last), and each read after a
      // late one, wakes the caller itself.
      while (!job->done) {
        if (requeue_rest || last.done) job->wake = true;
        if (s.done.wait_until(lock, settled + limit) == std::cv_status::timeout) break;
      }
      if (job->done) {
        out[i] = result(*job);
        settled = job->finished;
        continue;
      }
      settled = std::chrono::steady_clock::now();
      requeue_rest = true;
      if (job->started) {
        job->abandoned = true;  // stuck: it counts against max_stuck until it ends
        s.stuck_paths.insert(job->path);
        out[i] = {ReadOutcome::Late, {}};
      } else {
        // Queued the whole time behind another caller's stuck read: nothing of it ran. Tried
        // once more, on a helper of its own; unknown if that round cannot start it either.
        s.queue.erase(std::find(s.queue.begin(), s.queue.end(), job));
        if (waited_unstarted[i]) {
          out[i] = {ReadOutcome::Late, {}};
        } else {
          waited_unstarted[i] = true;
          pending.push_back(i);
        }
      }
    }
  }
  return out;
}

BoundedRead BoundedReader::read(const std::string& path) {
  auto& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.stuck_paths.size() >= limits_.max_stuck || s.stuck_paths.count(path) != 0) return {ReadOutcome::Refused, {}};
  auto job = std::make_shared<State::Job>();
  job->path = path;
  job->wake = true;
  s.queue.push_back(job);
  if (s.idle < s.queue.size()) {
    try {
      std::thread(help, state_).detach();
    } catch (const std::system_error&) {
      // No thread to be had: without one the read cannot be bounded, so it is not made.
      s.queue.erase(std::find(s.queue.begin(), s.queue.end(), job));
      return {ReadOutcome::Refused, {}};
    }
  }
  s.work.notify_one();
  const auto deadline = std::chrono::milliseconds(std::max(0LL, limits_.deadline_ms));
  if (s.done.wait_for(lock, deadline, [&] { return job->done; })) {
    return job->text ? BoundedRead{ReadOutcome::Read, std::move(job->text)} : BoundedRead{ReadOutcome::Failed, {}};
  }
  if (!job->started) {
    // Queued behind other reads the whole time: nothing of it runs, nothing is stuck.
    s.queue.erase(std::find(s.queue.begin(), s.queue.end(), job));
  } else {
    job->abandoned = true;
    s.stuck_paths.insert(path);
  }
  return {ReadOutcome::Late, {}};
}

}  // namespace tarmac::host
