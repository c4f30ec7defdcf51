#include "tarmac/reap/tty_notice.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/fs.hpp"

namespace tarmac::reap {
namespace {

constexpr std::size_t kMaxLineBytes = 512;

// The kernel's new_encode_dev, undone: major in bits 8-19, minor in bits 0-7 and 20-31.
unsigned tty_major(long long tty_nr) { return static_cast<unsigned>((tty_nr >> 8) & 0xfff); }
unsigned tty_minor(long long tty_nr) { return static_cast<unsigned>((tty_nr & 0xff) | ((tty_nr >> 12) & 0xfff00)); }

// "/dev/pts/3" or "/dev/tty2" for the terminal's number; nullopt for any other kind of device.
std::optional<std::string> terminal_path(long long tty_nr) {
  const auto name = host::tty_name(tty_nr);
  if (!name || name->find('(') != std::string::npos) return std::nullopt;
  return "/dev/" + *name;
}

// The line as it goes out: escaped, cut to a bound, one newline at its end. The escaped text keeps
// valid UTF-8 as it is, so the cut falls between two characters, never inside one.
std::string terminal_line(std::string_view line) {
  const std::string text = util::terminal_text(line);
  return "\r\ntarmac: " + std::string(util::utf8_prefix(text, kMaxLineBytes)) + "\r\n";
}

// The holder's /proc/PID/stat, while `holder` still names the process it was.
std::optional<host::StatFields> holder_stat(const host::ProcReader& proc, const host::ProcessIdentity& holder) {
  const auto text = util::read_file(fmt::format("{}/{}/stat", proc.root(), holder.pid));
  auto stat = text ? host::parse_stat(*text) : std::nullopt;
  if (!stat || stat->starttime_ticks != holder.starttime_ticks) return std::nullopt;
  return stat;
}

// L2 of reap's third review: a terminal is found by its device number alone, and a container's own
// devpts instance numbers its terminals as the host's does (its pts/3 is 136:3 too). Only a holder
// that shares the agent's mount namespace sees the agent's /dev/pts; any other is not written to.
std::optional<std::string> other_mount_namespace(const host::ProcReader& proc, unsigned pid) {
  struct stat mine {};
  struct stat theirs {};
  if (::stat((proc.root() + "/self/ns/mnt").c_str(), &mine) != 0) {
    return fmt::format("the agent's mount namespace: {}", std::strerror(errno));
  }
  if (::stat(fmt::format("{}/{}/ns/mnt", proc.root(), pid).c_str(), &theirs) != 0) {
    return fmt::format("its mount namespace: {}", std::strerror(errno));
  }
  if (mine.st_dev != theirs.st_dev || mine.st_ino != theirs.st_ino) {
    return std::string("it runs in another mount namespace, whose terminals may be other devices of the same numbers");
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> terminal_mismatch(int fd, long long tty_nr, unsigned uid) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fmt::format("fstat: {}", std::strerror(errno));
  if (!S_ISCHR(st.st_mode)) return std::string("not a character device");
  if (major(st.st_rdev) != tty_major(tty_nr) || minor(st.st_rdev) != tty_minor(tty_nr)) {
    return fmt::format("device {}:{} is not the holder's terminal {}:{}", major(st.st_rdev), minor(st.st_rdev),
                       tty_major(tty_nr), tty_minor(tty_nr));
  }
  if (st.st_uid != uid) return fmt::format("owned by uid {}, not the holder's uid {}", st.st_uid, uid);
  return std::nullopt;
}

TtyNotice notify_terminal(const host::ProcReader& proc, const host::ProcessIdentity& holder, unsigned uid,
                          std::string_view line) {
  const auto stat = holder_stat(proc, holder);
  if (!stat) return {TtyOutcome::NoTerminal, "the holder has ended"};
  const auto path = terminal_path(stat->tty_nr);
  if (!path) return {TtyOutcome::NoTerminal, "no controlling terminal"};
  if (auto why = other_mount_namespace(proc, holder.pid)) return {TtyOutcome::Skipped, *why};
  // The namespace read was the holder's: its pid still names it.
  if (!holder_stat(proc, holder)) return {TtyOutcome::NoTerminal, "the holder has ended"};
  // O_NOCTTY: root opening a terminal must never make it the agent's; O_NONBLOCK: a terminal
  // whose output is stopped (Ctrl-S) or full must not hold the reaper's thread.
  util::Fd fd(::open(path->c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return {TtyOutcome::Failed, fmt::format("{}: {}", *path, std::strerror(errno))};
  if (auto why = terminal_mismatch(fd.get(), stat->tty_nr, uid)) return {TtyOutcome::Skipped, *path + ": " + *why};
  const std::string text = terminal_line(line);
  const ssize_t n = ::write(fd.get(), text.data(), text.size());  // one try: never wait on a user's terminal
  if (n < 0) return {TtyOutcome::Failed, fmt::format("{}: {}", *path, std::strerror(errno))};
  return {TtyOutcome::Written, *path};
}

const char* to_string(TtyOutcome outcome) {
  switch (outcome) {
    case TtyOutcome::Written: return "written";
    case TtyOutcome::NoTerminal: return "no-terminal";
    case TtyOutcome::Skipped: return "skipped";
    case TtyOutcome::Failed: return "failed";
  }
  return "?";
}

}  // namespace tarmac::reap
