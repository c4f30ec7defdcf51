// What the parts of the agent's scheduler (daemon_state.hpp) share: the request failure's form,
// names for people, and reading a job's small files. Private to src/tarmac/sched.
#pragma once

#include <pwd.h>
#include <sys/types.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sched::detail {

using nlohmann::json;

// A request's answer when it fails: the words, and how the client should exit.
inline json failure(const std::string& code, const std::string& message) {
  return json{{"ok", false}, {"code", code}, {"error", message}};
}

// The name to show for `uid` (the number when it has no passwd entry). Only a name: a job's gid and
// groups come from its submitter's credentials, never from a lookup of this name.
inline std::string user_name(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) return found->pw_name;
  return std::to_string(uid);
}

inline std::string indices_text(const std::vector<unsigned>& v) {
  std::string out;
  for (unsigned i : v) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

// The contents of a job file, trimmed; nullopt when missing.
inline std::optional<std::string> read_small(const std::string& path) {
  auto text = util::read_file(path);
  if (!text) return std::nullopt;
  return std::string(util::trim(*text));
}

}  // namespace tarmac::sched::detail
