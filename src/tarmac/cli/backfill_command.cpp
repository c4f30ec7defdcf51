// `tarmac backfill ...` (backfill_command.hpp, docs/backfill.md "Commands").
#include "tarmac/cli/backfill_command.hpp"

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <pwd.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <memory>

#include "tarmac/backfill/batch.hpp"
#include "tarmac/backfill/batch_input.hpp"
#include "tarmac/cli/app.hpp"
#include "tarmac/cli/jobs_command.hpp"
#include "tarmac/cli/table.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

using json = nlohmann::json;

namespace {

constexpr int kSubmitAnswerTimeoutMs = 10 * 60 * 1000;

struct SubmitFlags {
  std::string model, input, texts, template_text, output, server, window, name;
  unsigned parallel = 1;
};

struct IdFlags {
  std::string id;
  std::string output;
};

// How a request to the agent failed: it said no, or no agent was reached (nothing was sent), or
// no answer came after the request was sent (a timeout, a dropped connection): it may have acted.
enum class AskFailure { None, Refused, NoAnswer };

// One request to the agent with `fds`; prints why when it fails (no agent: exit 3).
std::optional<json> ask_backfill(const GlobalOptions& global, const char* command, const json& req, int& exit_code,
                                 const std::vector<int>& fds = {}, AskFailure* failure = nullptr) {
  // A submission is answered once the agent has read and stored it, after those of other users
  // that came first: up to 200 MiB each, seconds apiece.
  const int timeout_ms = std::string_view(command) == "submit" ? kSubmitAnswerTimeoutMs : 30000;
  auto answer = ask_agent(agent_socket(global), req, fds, timeout_ms);
  if (failure != nullptr) {
    const bool unreached = !answer.ok() && answer.error().code == Error::Code::NotFound;  // connect failed
    *failure = answer.ok() ? (answer->body.value("ok", false) ? AskFailure::None : AskFailure::Refused)
                           : (unreached ? AskFailure::Refused : AskFailure::NoAnswer);
  }
  if (!answer.ok()) {
    fmt::print(stderr, "tarmac backfill {}: {} (is `tarmac agent` running? it owns the batches)\n", command,
               answer.error().message);
    exit_code = kExitCouldNotLook;
    return std::nullopt;
  }
  if (!answer->body.value("ok", false)) {
    fmt::print(stderr, "tarmac backfill {}: {}\n", command, failure_text(answer->body));
    exit_code = exit_code_for(answer->body);
    return std::nullopt;
  }
  exit_code = kExitOk;
  return std::move(answer->body);
}

// The input file's bytes in a sealed memfd: the agent reads a copy that can neither change nor
// block it (a FIFO, a FUSE file) while it reads.
Result<util::Fd> sealed_copy(const std::string& path) {
  util::Fd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!in) return make_error(Error::Code::Invalid, fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return make_error(Error::Code::Invalid, fmt::format("{} is not a regular file", path));
  }
  const std::size_t max = backfill::InputLimits{}.max_input_bytes;
  if (static_cast<std::uint64_t>(st.st_size) > max) {
    return make_error(Error::Code::Invalid, fmt::format("{} is {}, more than the {} a batch may hold", path,
                                                        util::format_bytes(static_cast<std::uint64_t>(st.st_size)),
                                                        util::format_bytes(max)));
  }
  util::Fd copy(::memfd_create("tarmac-backfill-input", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!copy) return make_error(Error::Code::Io, fmt::format("memfd_create: {}", std::strerror(errno)));
  std::vector<char> buf(1 << 20);
  std::size_t total = 0;
  for (;;) {
    const ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(Error::Code::Invalid, fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    if (n == 0) break;
    total += static_cast<std::size_t>(n);
    if (total > max) return make_error(Error::Code::Invalid, fmt::format("{} grew past the batch limit", path));
    if (!util::write_all(copy.get(), std::string_view(buf.data(), static_cast<std::size_t>(n)))) {
      return make_error(Error::Code::Io, fmt::format("cannot copy {}: {}", path, std::strerror(errno)));
    }
  }
  if (::fcntl(copy.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    return make_error(Error::Code::Io, fmt::format("cannot seal the copy of {}: {}", path, std::strerror(errno)));
  }
  return copy;
}

// The output, opened as the user: a new file (O_EXCL, never through a symlink), or an existing
// empty regular file of the user's. `created` says whether to remove it when the batch is refused.
Result<util::Fd> open_output(const std::string& path, bool& created) {
  created = false;
  // 0600: the answers to a user's prompts are theirs alone.
  util::Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd) {
    created = true;
    return fd;
  }
  if (errno != EEXIST) return make_error(Error::Code::Invalid, fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  fd.reset(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return make_error(Error::Code::Invalid, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::getuid()) {
    return make_error(Error::Code::Invalid, fmt::format("{} exists and is not a regular file of yours", path));
  }
  if (st.st_size != 0) {
    return make_error(Error::Code::Invalid, fmt::format("{} exists and is not empty: name a new file", path));
  }
  return fd;
}

// While it lives, files are opened with `uid`'s and `gid`'s rights (the fsuid and fsgid): root
// acting on a user's batch then opens no more than that user could.
class FsIdentity {
 public:
  FsIdentity(uid_t uid, gid_t gid)
      : gid_(static_cast<gid_t>(::setfsgid(gid))), uid_(static_cast<uid_t>(::setfsuid(uid))) {}
  ~FsIdentity() {
    ::setfsuid(uid_);
    ::setfsgid(gid_);
  }
  FsIdentity(const FsIdentity&) = delete;
  FsIdentity& operator=(const FsIdentity&) = delete;

 private:
  gid_t gid_;
  uid_t uid_;
};

// The primary group of `uid`; its uid when it has no passwd entry.
gid_t primary_gid(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) return found->pw_gid;
  return static_cast<gid_t>(uid);
}

// `path` (a batch's output) opened with `flags` as its owner `owner` when root runs the command:
// root's own rights would let a path the owner controls (a parent directory swapped for a symlink
// to /dev) open what the owner cannot. Never through a last symlink, never blocking on a FIFO, and
// only a regular file is kept (/dev/zero would never end, a FIFO never answer).
Result<util::Fd> open_batch_output(const std::string& path, int flags, uid_t owner) {
  std::optional<FsIdentity> as_owner;
  if (::geteuid() == 0 && owner != 0) as_owner.emplace(owner, primary_gid(owner));
  util::Fd fd(::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    return make_error(Error::Code::Invalid,
                      fmt::format("cannot open {}: {}", util::terminal_text(path), std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return make_error(Error::Code::Invalid, fmt::format("{} is not a regular file", util::terminal_text(path)));
  }
  return fd;
}

// The whole of regular file `fd`, as long as it was when looked at.
Result<std::string> read_whole(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error(Error::Code::Io, std::strerror(errno));
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(Error::Code::Io, std::strerror(errno));
    if (n == 0) break;  // cut shorter meanwhile
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  return text;
}

std::string absolute(const std::string& path) {
  std::error_code ec;
  const auto abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

void submit(const GlobalOptions& global, const SubmitFlags& f, int& exit_code) {
  const bool texts = !f.texts.empty();
  if (texts == !f.input.empty() || (texts && f.template_text.empty()) || (!texts && !f.template_text.empty())) {
    fmt::print(stderr, "tarmac backfill submit: give either --input FILE.jsonl, or --texts FILE.json with "
                       "--template\n");
    exit_code = kExitUsage;
    return;
  }
  auto input = sealed_copy(texts ? f.texts : f.input);
  if (!input.ok()) {
    fmt::print(stderr, "tarmac backfill submit: {}\n", input.error().message);
    exit_code = kExitUsage;
    return;
  }
  bool created = false;
  auto output = open_output(f.output, created);
  if (!output.ok()) {
    fmt::print(stderr, "tarmac backfill submit: --output: {}\n", output.error().message);
    exit_code = kExitUsage;
    return;
  }
  json req = {{"op", "backfill_submit"}, {"model", f.model},       {"format", texts ? "texts" : "jsonl"},
              {"output_path", util::valid_utf8(absolute(f.output))}, {"name", f.name}, {"server", f.server},
              {"window", f.window},  {"parallel", f.parallel}};
  if (texts) req["template"] = util::valid_utf8(f.template_text);
  AskFailure failure = AskFailure::None;
  auto answer = ask_backfill(global, "submit", req, exit_code, {input->get(), output->get()}, &failure);
  if (!answer) {
    // Only a refusal says nothing is queued. Without an answer the batch may be recorded with this
    // very file as its output: removed, its answers would go nowhere and it could never be resumed.
    if (created && failure == AskFailure::Refused) (void)::unlink(f.output.c_str());
    if (failure == AskFailure::NoAnswer) {
      fmt::print(stderr, "tarmac backfill submit: the batch may have been queued all the same: see `tarmac backfill "
                         "status`; {} is kept\n",
                 util::terminal_text(f.output));
    }
    return;
  }
  const json& batch = (*answer)["batch"];
  if (global.json) {
    fmt::print("{}\n", util::json_text(batch, 2));
    return;
  }
  fmt::print("batch {} queued: {} requests for {}, answers to {}\n", batch.value("id", 0LL),
             batch.value("requests", 0LL), util::terminal_text(batch.value("model", "")),
             util::terminal_text(batch.value("output", "")));
}

std::optional<long long> parse_batch_id(const char* command, const std::string& text, int& exit_code) {
  const auto id = util::parse_int(text, 1, LLONG_MAX);
  if (!id) {
    fmt::print(stderr, "tarmac backfill {}: '{}' is not a batch id\n", command, util::terminal_text(text));
    exit_code = kExitUsage;
  }
  return id;
}

void status(const GlobalOptions& global, const IdFlags& f, int& exit_code) {
  json req = {{"op", "backfill_status"}};
  if (!f.id.empty()) {
    const auto id = parse_batch_id("status", f.id, exit_code);
    if (!id) return;
    req["id"] = *id;
  }
  auto answer = ask_backfill(global, "status", req, exit_code);
  if (!answer) return;
  if (f.id.empty()) {
    if (global.json) fmt::print("{}\n", util::json_text(json{{"batches", (*answer)["batches"]}}, 2));
    else detail::print_batches(stdout, (*answer)["batches"], use_color(global, stdout));
  } else {
    if (global.json) fmt::print("{}\n", util::json_text((*answer)["batch"], 2));
    else fmt::print("{}", detail::batch_text((*answer)["batch"]));
  }
}

void cancel(const GlobalOptions& global, const IdFlags& f, int& exit_code) {
  const auto id = parse_batch_id("cancel", f.id, exit_code);
  if (!id) return;
  auto answer = ask_backfill(global, "cancel", json{{"op", "backfill_cancel"}, {"id", *id}}, exit_code);
  if (!answer) return;
  if (global.json) fmt::print("{}\n", util::json_text((*answer)["batch"], 2));
  else fmt::print("batch {} cancelled\n", *id);
}

void resume(const GlobalOptions& global, const IdFlags& f, int& exit_code) {
  const auto id = parse_batch_id("resume", f.id, exit_code);
  if (!id) return;
  uid_t owner = ::getuid();
  if (::geteuid() == 0) {  // root resumes a user's batch with that user's rights: ask whose it is
    auto batch = ask_backfill(global, "resume", json{{"op", "backfill_status"}, {"id", *id}}, exit_code);
    if (!batch) return;
    owner = static_cast<uid_t>((*batch)["batch"].value("uid", 0LL));
  }
  auto out = open_batch_output(f.output, O_RDWR, owner);
  if (!out.ok()) {
    fmt::print(stderr, "tarmac backfill resume: {}\n", out.error().message);
    exit_code = kExitUsage;
    return;
  }
  auto answer = ask_backfill(global, "resume", json{{"op", "backfill_resume"}, {"id", *id}}, exit_code, {out->get()});
  if (!answer) return;
  if (global.json) fmt::print("{}\n", util::json_text((*answer)["batch"], 2));
  else fmt::print("batch {}: the agent holds its output again\n", *id);
}

void results(const GlobalOptions& global, const IdFlags& f, int& exit_code) {
  const auto id = parse_batch_id("results", f.id, exit_code);
  if (!id) return;
  auto answer = ask_backfill(global, "results", json{{"op", "backfill_status"}, {"id", *id}}, exit_code);
  if (!answer) return;
  const std::string path = (*answer)["batch"].value("output", "");
  // Read as the batch's owner: the output is their file, at a path they named.
  auto in = open_batch_output(path, O_RDONLY, static_cast<uid_t>((*answer)["batch"].value("uid", 0LL)));
  auto text = in.ok() ? read_whole(in->get()) : Result<std::string>(in.error());
  if (!text.ok()) {
    fmt::print(stderr, "tarmac backfill results: {}{}\n", in.ok() ? "cannot read " + util::terminal_text(path) + ": " : "",
               text.error().message);
    exit_code = kExitCouldNotLook;
    return;
  }
  // Lines are the owner's bytes: escaped for a terminal, kept as they are for a pipe.
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  std::size_t skipped = 0;
  for (const auto& line : detail::results_in_order(*text, *id, skipped)) {
    fmt::print("{}\n", terminal ? util::terminal_text(line) : line);
  }
  if (skipped > 0) {
    fmt::print(stderr, "tarmac backfill results: {} lines of {} are not batch {}'s and were left out\n", skipped,
               util::terminal_text(path), *id);
  }
}

std::string count_text(const json& b, const char* key) { return std::to_string(b.value(key, 0LL)); }

std::string rate_text(const json& b) {
  const auto it = b.find("tokens_per_s");
  return it != b.end() && it->is_number() ? fmt::format("{:.1f}", it->get<double>()) : "-";
}

std::string eta_text(const json& b) {
  const auto it = b.find("eta_s");
  return it != b.end() && it->is_number_integer() ? util::format_duration_ms(it->get<long long>() * 1000) : "-";
}

}  // namespace

namespace detail {

std::vector<std::string> results_in_order(const std::string& text, long long batch, std::size_t& skipped) {
  std::map<long long, std::string> ordered;
  skipped = 0;
  for (std::size_t from = 0; from < text.size();) {
    auto nl = text.find('\n', from);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(from, nl - from);
    from = nl + 1;
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, false);
    const auto index = j.is_object() && j.contains("id") && j["id"].is_string()
                           ? backfill::index_from_line_id(j["id"].get<std::string>(), batch)
                           : std::nullopt;
    if (!index || ordered.count(*index) > 0) {
      ++skipped;
      continue;
    }
    ordered.emplace(*index, line);
  }
  std::vector<std::string> out;
  out.reserve(ordered.size());
  for (auto& [index, line] : ordered) out.push_back(std::move(line));
  return out;
}

void print_batches(std::FILE* out, const json& batches, bool color) {
  if (!batches.is_array() || batches.empty()) {
    fmt::print(out, "no batches\n");
    return;
  }
  Table table({{"ID", Align::Right},
               {"USER"},
               {"NAME"},
               {"STATE"},
               {"DONE", Align::Right},
               {"FAILED", Align::Right},
               {"PENDING", Align::Right},
               {"TOK/S", Align::Right},
               {"ETA", Align::Right},
               {"GPU-H", Align::Right},
               {"MODEL"}});
  for (const auto& b : batches) {
    if (!b.is_object()) continue;
    const std::string state = b.value("state", "");
    const Style style = state == "done" ? Style::Good : state == "failed" ? Style::Bad : Style::Plain;
    table.add_row({{count_text(b, "id")},
                   {b.value("user", "")},
                   {b.value("name", "")},
                   {state, style},
                   {count_text(b, "done")},
                   {count_text(b, "failed")},
                   {std::to_string(b.value("pending", 0LL) + b.value("in_flight", 0LL))},
                   {rate_text(b)},
                   {eta_text(b)},
                   {fmt::format("{:.2f}", b.value("gpu_hours", 0.0))},
                   {b.value("model", "")}});
  }
  table.print(out, color);
}

// When the batch was sent, in local time: "2026-12-02 00:03-05:58, 2026-12-03 00:00-01:12".
std::string windows_text(const json& b) {
  std::vector<std::string> parts;
  const auto it = b.find("windows");
  if (it != b.end() && it->is_array()) {
    for (const auto& w : *it) {
      if (!w.is_object()) continue;
      const auto start = w.value("start_unix_ms", 0LL);
      const auto end = w.value("end_unix_ms", 0LL);
      if (start > 0 && end >= start) parts.push_back(backfill::span_local_text({start, end}));
    }
  }
  return parts.empty() ? std::string("not yet") : fmt::format("{}", fmt::join(parts, ", "));
}

std::string batch_text(const json& b) {
  const auto t = [&](const char* key) { return util::terminal_text(b.value(key, "")); };
  std::string out = fmt::format("batch {} ({}) of {}: {}\n", b.value("id", 0LL), t("name"), t("user"), t("state"));
  if (!b.value("reason", "").empty()) out += fmt::format("  {}\n", t("reason"));
  out += fmt::format("  requests: {} done, {} failed, {} pending, {} in flight, of {}\n", count_text(b, "done"),
                     count_text(b, "failed"), count_text(b, "pending"), count_text(b, "in_flight"),
                     count_text(b, "requests"));
  out += fmt::format("  tokens: {} in, {} out, {} per second; ETA {}\n", count_text(b, "prompt_tokens"),
                     count_text(b, "completion_tokens"), rate_text(b), eta_text(b));
  out += fmt::format("  GPU-hours: {:.2f}; ran {}\n", b.value("gpu_hours", 0.0), windows_text(b));
  out += fmt::format("  model {}, server {}, window {}, parallel {}\n", t("model"),
                     b.value("server", "").empty() ? std::string("(default)") : t("server"),
                     b.value("window", "").empty() ? std::string("any time") : t("window"),
                     b.value("parallel", 1LL));
  out += fmt::format("  output: {}\n", t("output"));
  return out;
}

}  // namespace detail

void add_backfill_commands(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* top = app.add_subcommand("backfill", "Batches of LLM requests the agent runs on idle GPUs (docs/backfill.md)");
  top->require_subcommand(1);
  {
    auto f = std::make_shared<SubmitFlags>();
    auto* cmd = top->add_subcommand("submit", "Queue a batch: OpenAI Batch JSONL, or texts and a template");
    cmd->add_option("--model", f->model, "The model every request uses")->required();
    cmd->add_option("--input", f->input, "Requests in the OpenAI Batch JSONL format");
    cmd->add_option("--texts", f->texts, "A JSON array of texts, one request each through --template");
    cmd->add_option("--template", f->template_text, "The prompt for each text, with {text} where it goes");
    cmd->add_option("--output", f->output, "Where the answers go (a new file, or an empty one of yours)")->required();
    cmd->add_option("--server", f->server, "A configured [backfill.server.NAME]");
    cmd->add_option("--window", f->window, "Work only within HH:MM-HH:MM, such as 00:00-06:00");
    cmd->add_option("--parallel", f->parallel, "Requests in flight at once (1 to 256)");
    cmd->add_option("--name", f->name, "A name for the batch");
    cmd->callback([&global, &exit_code, f] { submit(global, *f, exit_code); });
  }
  {
    auto f = std::make_shared<IdFlags>();
    auto* cmd = top->add_subcommand("status", "Your batches (all, as root), or one: done, failed, pending, tokens/s, "
                                              "ETA, GPU-hours");
    cmd->add_option("ID", f->id, "A batch");
    cmd->callback([&global, &exit_code, f] { status(global, *f, exit_code); });
  }
  {
    auto f = std::make_shared<IdFlags>();
    auto* cmd = top->add_subcommand("cancel", "Cancel a batch (yours, or any as root)");
    cmd->add_option("ID", f->id, "The batch")->required();
    cmd->callback([&global, &exit_code, f] { cancel(global, *f, exit_code); });
  }
  {
    auto f = std::make_shared<IdFlags>();
    auto* cmd = top->add_subcommand("resume", "Hand a batch's output to the agent again after it restarted");
    cmd->add_option("ID", f->id, "The batch")->required();
    cmd->add_option("--output", f->output, "The batch's output file")->required();
    cmd->callback([&global, &exit_code, f] { resume(global, *f, exit_code); });
  }
  {
    auto f = std::make_shared<IdFlags>();
    auto* cmd = top->add_subcommand("results", "A batch's output, in the order of its input");
    cmd->add_option("ID", f->id, "The batch")->required();
    cmd->callback([&global, &exit_code, f] { results(global, *f, exit_code); });
  }
}

}  // namespace tarmac::cli
