// Descriptors closed off the caller's thread (closer.hpp).
#include "tarmac/util/closer.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

namespace tarmac::util {

namespace {

constexpr int kMaxThreads = 4;

// Never destroyed: its threads may still be in a close() when the process exits.
struct Closer {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<int> queue;
  int threads = 0;
  int idle = 0;

  void add(int fd) {
    bool start = false;
    {
      std::lock_guard lock(mutex);
      queue.push_back(fd);
      start = idle == 0 && threads < kMaxThreads;
      if (start) ++threads;
    }
    if (start) {
      try {
        std::thread([this] { run(); }).detach();
      } catch (const std::system_error&) {
        std::lock_guard lock(mutex);
        --threads;  // none could be made now: a running one (or the next add) takes it
        if (threads == 0) {
          // No thread at all: close it here rather than keep it for ever.
          while (!queue.empty()) {
            ::close(queue.front());
            queue.pop_front();
          }
        }
        return;
      }
    }
    cv.notify_one();
  }

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      ++idle;
      cv.wait(lock, [&] { return !queue.empty(); });
      --idle;
      const int fd = queue.front();
      queue.pop_front();
      lock.unlock();
      ::close(fd);
      lock.lock();
    }
  }
};

Closer& closer() {
  static Closer* instance = new Closer();  // leaked on purpose (see Closer)
  return *instance;
}

}  // namespace

void close_in_background(Fd fd) {
  if (fd) closer().add(fd.release());
}

void close_in_background(std::vector<Fd>& fds) {
  for (auto& fd : fds) close_in_background(std::move(fd));
  fds.clear();
}

}  // namespace tarmac::util
