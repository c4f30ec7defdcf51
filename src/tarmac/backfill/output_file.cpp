// What the agent checks of a batch's output (output_file.hpp, docs/backfill.md "Security").
#include "tarmac/backfill/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::backfill {

namespace {

constexpr std::size_t kMaxMountinfoBytes = 16U << 20;  // tens of thousands of mounts
constexpr std::array<std::string_view, 10> kAllowedTypes = {"ext2", "ext3",  "ext4", "xfs",  "btrfs",
                                                            "zfs",  "f2fs", "nfs",  "nfs4", "jfs"};

std::optional<std::uint64_t> mount_id(int fd) {
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_MNT_ID, &stx) != 0) return std::nullopt;
  if ((stx.stx_mask & STATX_MNT_ID) == 0) return std::nullopt;
  return stx.stx_mnt_id;
}

Result<std::string> read_mountinfo() {
  util::Fd fd(::open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC));
  if (!fd) return make_error(Error::Code::Io, fmt::format("cannot read /proc/self/mountinfo: {}", std::strerror(errno)));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(Error::Code::Io, fmt::format("cannot read /proc/self/mountinfo: {}", std::strerror(errno)));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxMountinfoBytes) return make_error(Error::Code::Io, "/proc/self/mountinfo is too long");
  }
  return text;
}

Error not_an_output(std::string message) { return make_error(Error::Code::Invalid, std::move(message)); }

}  // namespace

std::optional<std::string> mount_type(std::string_view mountinfo, std::uint64_t mnt_id) {
  const std::string id = std::to_string(mnt_id) + " ";
  for (std::size_t from = 0; from < mountinfo.size();) {
    auto nl = mountinfo.find('\n', from);
    if (nl == std::string_view::npos) nl = mountinfo.size();
    const std::string_view line = mountinfo.substr(from, nl - from);
    from = nl + 1;
    if (line.substr(0, id.size()) != id) continue;
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw": the type follows " - ".
    const auto dash = line.find(" - ");
    if (dash == std::string_view::npos) return std::nullopt;
    const std::string_view rest = line.substr(dash + 3);
    const std::string_view type = rest.substr(0, rest.find(' '));
    if (type.empty()) return std::nullopt;
    return std::string(type);
  }
  return std::nullopt;
}

bool output_file_system_allowed(std::string_view type) {
  for (const auto allowed : kAllowedTypes) {
    if (type == allowed) return true;
  }
  return false;
}

Result<void> check_output_file_system(int fd) {
  const auto id = mount_id(fd);
  if (!id) return not_an_output("cannot tell which file system the output is on (statx has no mount id: Linux 5.8 or later)");
  TARMAC_TRY_ASSIGN(const std::string mountinfo, read_mountinfo());
  const auto type = mount_type(mountinfo, *id);
  if (!type) return not_an_output("the output is on a file system the agent cannot see (another mount namespace?)");
  if (!output_file_system_allowed(*type)) {
    return not_an_output(fmt::format("the output is on a {} file system: a batch's output must be on a local disk "
                               "(ext4, xfs, btrfs, zfs, ...) or NFS",
                               util::terminal_text(*type)));
  }
  return {};
}

long long birth_time_ns(int fd) {
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_BTIME, &stx) != 0) return 0;
  if ((stx.stx_mask & STATX_BTIME) == 0) return 0;
  return static_cast<long long>(stx.stx_btime.tv_sec) * 1000000000LL + stx.stx_btime.tv_nsec;
}

Result<void> check_last_recorded_line(int fd, long long size, long long batch, const std::vector<RequestRow>& rows) {
  const RequestRow* last = nullptr;
  for (const auto& r : rows) {
    if (r.out_offset >= 0 && r.out_len > 0 && r.out_offset + r.out_len <= size &&
        (last == nullptr || r.out_offset > last->out_offset)) {
      last = &r;
    }
  }
  if (last == nullptr) return {};
  std::string line(static_cast<std::size_t>(last->out_len), '\0');
  const ssize_t got = ::pread(fd, line.data(), line.size(), static_cast<off_t>(last->out_offset));
  if (got != static_cast<ssize_t>(line.size())) return not_an_output("cannot read the output's last recorded line");
  const auto doc = nlohmann::json::parse(line, nullptr, false);
  const std::string want = output_line_id(batch, last->index);
  if (!doc.is_object() || doc.value("id", nlohmann::json()) != nlohmann::json(want)) {
    return not_an_output(fmt::format("the line at byte {} is not {} as the store recorded: this is not the batch's output",
                               last->out_offset, want));
  }
  return {};
}

Result<util::Fd> private_description(int fd) {
  const std::string path = fmt::format("/proc/self/fd/{}", fd);
  util::Fd own(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!own) return make_error(Error::Code::Io, fmt::format("cannot reopen the output: {}", std::strerror(errno)));
  struct stat given {}, opened {};
  if (::fstat(fd, &given) != 0 || ::fstat(own.get(), &opened) != 0 || given.st_dev != opened.st_dev ||
      given.st_ino != opened.st_ino) {
    return not_an_output("the output changed while the agent reopened it");
  }
  return own;
}

}  // namespace tarmac::backfill
