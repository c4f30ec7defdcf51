#include "tarmac/sched/client.hpp"

#include "tarmac/util/closer.hpp"

#include <algorithm>
#include <limits>

namespace tarmac::sched {

Client::Client(Connection conn, Peer peer, long long now_ms, std::uint64_t serial)
    : conn_(std::move(conn)), peer_(std::move(peer)), serial_(serial), last_request_ms_(now_ms),
      last_write_ms_(now_ms) {}

Client::~Client() { util::close_in_background(fds); }

void Client::push(const std::string& line, std::size_t max_output, long long now_ms) {
  if (gone_) return;
  const std::size_t unread = conn_.pending_output();
  if (unread > 0 && unread + line.size() + 1 > max_output) {
    drop();
    return;
  }
  if (unread == 0) last_write_ms_ = now_ms;
  conn_.queue_line(line);
  flush(now_ms);
}

void Client::flush(long long now_ms) {
  if (gone_) return;
  const std::size_t before = conn_.pending_output();
  if (before == 0) return;
  if (conn_.flush() == Connection::Flush::Failed) {
    drop();
    return;
  }
  if (conn_.pending_output() < before) last_write_ms_ = now_ms;
}

long long Client::deadline_ms(long long idle_timeout_ms) const {
  if (has_output()) return last_write_ms_ + idle_timeout_ms;
  if (watching == 0 && !awaiting_) return last_request_ms_ + idle_timeout_ms;
  return std::numeric_limits<long long>::max();
}

Admission admit(uid_t uid, std::size_t user_open, std::size_t total_open, const ClientLimits& limits) {
  if (uid == 0) return total_open < limits.max_clients ? Admission::Admit : Admission::Full;
  if (total_open + std::min(limits.root_reserve, limits.max_clients) >= limits.max_clients) return Admission::Full;
  if (limits.user_connection_cap > 0 && user_open >= limits.user_connection_cap) return Admission::UserCap;
  return Admission::Admit;
}

}  // namespace tarmac::sched
