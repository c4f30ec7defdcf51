// The agent's batches over the scheduler's socket (service.hpp, docs/backfill.md "Commands").
#include "tarmac/backfill/service.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "tarmac/backfill/intake.hpp"
#include "tarmac/backfill/output_file.hpp"
#include "tarmac/sched/job.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::backfill {

using json = nlohmann::json;
using sched::json_field;

namespace {

constexpr unsigned kMaxParallel = 256;
constexpr std::size_t kMaxNameBytes = 128;
constexpr std::size_t kMaxPathBytes = 4096;

json failure(const std::string& code, const std::string& message) {
  return json{{"ok", false}, {"code", code}, {"error", message}};
}

Error refused(const std::string& code, const std::string& message) {
  return make_error(code == "denied" ? Error::Code::Invalid : Error::Code::NotFound, message, std::string(code));
}

json failure_of(const Error& e) {
  const auto* code = e.cause_as<std::string>();
  return failure(code != nullptr ? *code : "io", e.message);
}

bool printable(std::string_view text) {
  for (const unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return util::valid_utf8(text) == text;
}

// The output the CLI handed over: on a local disk or NFS (asked before anything that reaches the
// file system: a FUSE daemon need never answer), a regular file of `uid`'s with one link, readable
// and writable through this descriptor; empty for a new batch. O_APPEND is cleared: the ledger
// writes at the offsets the store accounts for.
Result<struct stat> check_output(int fd, uid_t uid, bool must_be_empty) {
  TARMAC_TRY(check_output_file_system(fd));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error(Error::Code::Io, "cannot look at the output");
  if (!S_ISREG(st.st_mode)) return make_error(Error::Code::Invalid, "the output is not a regular file");
  if (st.st_uid != uid) return make_error(Error::Code::Invalid, "the output is not the submitter's own file");
  if (st.st_nlink != 1) return make_error(Error::Code::Invalid, "the output has other hard links");
  if (must_be_empty && st.st_size != 0) {
    return make_error(Error::Code::Invalid, "the output is not empty: name a new file, or empty it first");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_RDWR) {
    return make_error(Error::Code::Invalid, "the output must be open for reading and writing");
  }
  if ((flags & O_APPEND) != 0 && ::fcntl(fd, F_SETFL, flags & ~O_APPEND) != 0) {
    return make_error(Error::Code::Io, "cannot clear O_APPEND on the output");
  }
  return st;
}

// Whether the output handed over for a resume is batch `b`'s: the same device and inode, the same
// birth time where the file system keeps one (an inode number is soon reused), and the last line
// the store recorded in it there with its id.
Result<void> check_same_output(BatchDb& db, const Batch& b, int fd, const struct stat& st) {
  const auto other = [&](std::string_view why) {
    return make_error(Error::Code::Invalid, fmt::format("that is not batch {}'s output ({}; it was {})", b.id, why,
                                                        b.output_path));
  };
  if (static_cast<long long>(st.st_dev) != b.output_dev || static_cast<long long>(st.st_ino) != b.output_ino) {
    return other("another file than the one submitted");
  }
  if (b.output_btime_ns != 0 && birth_time_ns(fd) != b.output_btime_ns) {
    return other("a file made later, with the inode number of the one submitted");
  }
  TARMAC_TRY_ASSIGN(const auto rows, db.rows(b.id));
  if (auto r = check_last_recorded_line(fd, st.st_size, b.id, rows); !r.ok()) return other(r.error().message);
  return {};
}

// What a submission asks for besides its requests; an error naming the first bad field.
Result<Batch> read_batch_fields(const json& req) {
  Batch b;
  b.model = json_field<std::string>(req, "model").value_or("");
  TARMAC_TRY(check_model(b.model));
  b.name = json_field<std::string>(req, "name").value_or("");
  if (b.name.size() > kMaxNameBytes || !printable(b.name)) {
    return make_error(Error::Code::Invalid, fmt::format("--name must be at most {} printable characters", kMaxNameBytes));
  }
  b.server = json_field<std::string>(req, "server").value_or("");
  for (const char c : b.server) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
      return make_error(Error::Code::Invalid, "--server must be a name of letters, digits, - and _");
    }
  }
  if (b.server.size() > 64) return make_error(Error::Code::Invalid, "--server is longer than 64 characters");
  b.window = json_field<std::string>(req, "window").value_or("");
  if (!b.window.empty()) TARMAC_TRY(check_window(b.window));
  const long long parallel = json_field<long long>(req, "parallel").value_or(1);
  if (parallel < 1 || parallel > kMaxParallel) {
    return make_error(Error::Code::Invalid, fmt::format("--parallel must be from 1 to {}", kMaxParallel));
  }
  b.parallel = static_cast<unsigned>(parallel);
  b.output_path = json_field<std::string>(req, "output_path").value_or("");
  if (b.output_path.empty() || b.output_path.size() > kMaxPathBytes || !printable(b.output_path)) {
    return make_error(Error::Code::Invalid, "output_path must be the output's path, as the submitter named it");
  }
  return b;
}

std::optional<int> two_digits(std::string_view s, int max) {
  if (s.size() != 2 || !std::isdigit(static_cast<unsigned char>(s[0])) ||
      !std::isdigit(static_cast<unsigned char>(s[1]))) {
    return std::nullopt;
  }
  const int v = (s[0] - '0') * 10 + (s[1] - '0');
  return v <= max ? std::optional<int>(v) : std::nullopt;
}

}  // namespace

Result<void> check_window(std::string_view w) {
  const auto bad = [&] {
    return make_error(Error::Code::Invalid,
                      fmt::format("--window {} is not HH:MM-HH:MM (00:00 to 23:59, such as 00:00-06:00)",
                                  util::json_text(json(std::string(w)))));
  };
  if (w.size() != 11 || w[2] != ':' || w[5] != '-' || w[8] != ':') return bad();
  if (!two_digits(w.substr(0, 2), 23) || !two_digits(w.substr(3, 2), 59) || !two_digits(w.substr(6, 2), 23) ||
      !two_digits(w.substr(9, 2), 59)) {
    return bad();
  }
  if (w.substr(0, 5) == w.substr(6, 5)) return make_error(Error::Code::Invalid, "--window starts and ends at once");
  return {};
}

Result<std::string> pick_server(const BackfillConfig& config, const std::string& asked) {
  std::vector<std::string> names;
  for (const auto& [name, server] : config.servers) names.push_back(name);
  if (names.empty()) {
    return make_error(Error::Code::Invalid,
                      "no LLM server is configured: add a [backfill.server.NAME] table with its url to the agent's "
                      "configuration (docs/configuration.md) and restart the agent");
  }
  if (asked.empty()) {
    if (names.size() == 1) return names.front();
    return make_error(Error::Code::Invalid, fmt::format("name the server with --server (configured: {})",
                                                        fmt::join(names, ", ")));
  }
  if (config.servers.count(asked) == 0) {
    return make_error(Error::Code::Invalid, fmt::format("no server '{}' is configured (configured: {})", asked,
                                                        fmt::join(names, ", ")));
  }
  return asked;
}

// When it was sent: [{"start_unix_ms", "end_unix_ms"}], the CLI writes them in its own time zone.
json windows_json(const std::vector<Span>& spans) {
  json out = json::array();
  for (const auto& s : spans) out.push_back({{"start_unix_ms", s.start_ms}, {"end_unix_ms", s.end_ms}});
  return out;
}

json batch_json(const Batch& b, const Progress& p, long long now_ms) {
  const long long answered = p.done + p.failed;
  const long long end = p.in_flight > 0 || p.pending > 0 ? now_ms : p.last_ended_ms;
  const double seconds = p.first_started_ms > 0 ? static_cast<double>(std::max(1LL, end - p.first_started_ms)) / 1000
                                                : 0;
  json out = {{"id", b.id},
              {"name", b.name},
              {"user", b.user},
              {"uid", b.uid},
              {"model", b.model},
              {"server", b.server},
              {"window", b.window},
              {"parallel", b.parallel},
              {"state", to_string(b.state)},
              {"reason", b.reason},
              {"output", b.output_path},
              {"requests", b.requests},
              {"done", p.done},
              {"failed", p.failed},
              {"pending", p.pending},
              {"in_flight", p.in_flight},
              {"prompt_tokens", p.prompt_tokens},
              {"completion_tokens", p.completion_tokens},
              {"gpu_hours", static_cast<double>(b.gpu_ms) / 3.6e6},
              {"windows", windows_json(b.windows)},
              {"submitted_unix_ms", b.submitted_ms},
              {"started_unix_ms", b.started_ms > 0 ? json(b.started_ms) : json(nullptr)},
              {"ended_unix_ms", b.ended_ms > 0 ? json(b.ended_ms) : json(nullptr)}};
  // Rates over the time since the first request was sent: unknown (null) before that.
  out["tokens_per_s"] = seconds > 0 ? json(static_cast<double>(p.completion_tokens) / seconds) : json(nullptr);
  const long long left = p.pending + p.in_flight;
  // None while it waits for its window: the rest is sent once the window opens, hours away maybe.
  const bool waiting = b.reason.starts_with(kWaitingForWindow);
  out["eta_s"] = seconds > 0 && answered > 0 && left > 0 && !ended(b.state) && !waiting
                     ? json(static_cast<long long>(static_cast<double>(left) * seconds / static_cast<double>(answered)))
                     : json(nullptr);
  return out;
}

Result<std::unique_ptr<Service>> Service::open(ServiceOptions options) {
  TARMAC_TRY_ASSIGN(auto db, BatchDb::open(options.db_path));
  if (options.dispatch.db_path.empty()) options.dispatch.db_path = options.db_path;
  if (!options.dispatch.log) options.dispatch.log = options.log;
  options.managed.config = options.config;
  if (!options.managed.log) options.managed.log = options.log;
  options.external.config = options.config;
  if (!options.external.log) options.external.log = options.log;
  // A batch the agent was storing when it stopped was never answered: its submitter was told it
  // may be queued, and it is not.
  TARMAC_TRY_ASSIGN(const long long half_stored, db.drop_loading(std::nullopt));
  TARMAC_TRY_ASSIGN(auto dispatcher, Dispatcher::open(options.dispatch));
  auto service = std::unique_ptr<Service>(new Service(std::move(options), std::move(db), std::move(dispatcher)));
  if (half_stored > 0) {
    service->log(util::LogLevel::Warning, fmt::format("backfill: removed {} batches the agent was storing when it "
                                                      "stopped (their submitters got no answer)",
                                                      half_stored));
  }
  IntakeOptions intake{service->opt_.db_path, service->opt_.limits, service->opt_.quota, service->opt_.log};
  TARMAC_TRY_ASSIGN(service->intake_,
                    Intake::open(std::move(intake), [raw = service.get()](Intaken in) { return raw->stored(std::move(in)); }));
  TARMAC_TRY_ASSIGN(auto unfinished, service->db_.batches(BatchDb::Which::Unfinished));
  for (auto& b : unfinished) {
    b.state = BatchState::Queued;  // nothing sends it until its output is handed over again
    b.reason = fmt::format("the agent restarted: its output waits to be handed over again (tarmac backfill resume {} "
                           "--output FILE)",
                           b.id);
    if (auto r = service->db_.save(b); !r.ok()) service->log(util::LogLevel::Warning, r.error().message);
  }
  if (!unfinished.empty()) {
    service->log(util::LogLevel::Info, fmt::format("backfill: read back {} unfinished batches", unfinished.size()));
  }
  return service;
}

void Service::log(util::LogLevel level, const std::string& message) const {
  if (opt_.log) opt_.log(level, message);
}

std::optional<json> Service::answer(const sched::Peer& peer, std::vector<util::Fd>& fds, const json& req,
                                   const sched::Defer& defer) {
  const auto op = json_field<std::string>(req, "op").value_or("");
  if (op == "backfill_submit") return submit(peer, fds, req, defer);
  if (op == "backfill_status") return status(peer, req);
  if (op == "backfill_cancel") return cancel(peer, req);
  if (op == "backfill_resume") return resume(peer, fds, req);
  return std::nullopt;
}

json Service::answer_batch(long long id) {
  auto batch = db_.batch(id);
  if (!batch.ok()) return failure("io", batch.error().message);
  if (!*batch) return failure("invalid", fmt::format("no batch {}", id));
  return answer_batch(**batch);
}

Result<Reconciled> Service::send(const Batch& batch, util::Fd output) {
  const auto server = opt_.config.servers.find(batch.server);
  if (server == opt_.config.servers.end()) {
    return make_error(Error::Code::Invalid, fmt::format("its server '{}' is no longer configured (a "
                                                        "[backfill.server.{}] table)",
                                                        batch.server, batch.server));
  }
  // A managed server's batch waits until its server runs on idle GPUs (ManagedServers::tick sends it);
  // each connection's other end must then be its account's (a user who takes its port between two
  // runs gets no prompt).
  const bool managed = managed_->manages(batch.server);
  ServerConfig config = server->second;
  if (managed) config.server_user = config.user;
  // An external server that yields its GPUs now: the batch waits with the server's others.
  const bool yielding = !managed && external_->sending(batch.server, batch.id, batch.model, batch.window);
  auto started = dispatcher_->start(batch, config, std::move(output), managed || yielding);
  if (!started.ok() && !managed) external_->not_sending(batch.server, batch.id);
  return started;
}

json Service::answer_batch(const Batch& b) {
  auto p = db_.progress(b.id);
  if (!p.ok()) return failure("io", p.error().message);
  return json{{"ok", true}, {"batch", batch_json(b, *p, util::wall_ms())}};
}

json Service::submit(const sched::Peer& peer, std::vector<util::Fd>& fds, const json& req, const sched::Defer& defer) {
  if (fds.size() != 2) return failure("invalid", "a submission carries two descriptors: the input and the output");
  auto fields = read_batch_fields(req);
  if (!fields.ok()) return failure("invalid", fields.error().message);
  Submission s;
  s.uid = peer.uid;
  s.batch = std::move(*fields);
  // What is quick is checked here, so that most refusals come at once; the intake checks the
  // quotas and the output's other batches again when it stores the batch.
  if (auto room = room_for_a_batch(db_, peer.uid, opt_.quota); !room.ok()) return failure_of(room.error());
  if (auto room = intake_->room_for(peer.uid); !room.ok()) return failure_of(room.error());
  auto server = pick_server(opt_.config, s.batch.server);
  if (!server.ok()) return failure("invalid", server.error().message);
  s.batch.server = *server;
  if (const auto& models = opt_.config.servers.at(s.batch.server).models;
      !models.empty() && std::find(models.begin(), models.end(), s.batch.model) == models.end()) {
    return failure("invalid", fmt::format("server {} serves only the models {}: not --model {}", s.batch.server,
                                          fmt::join(models, ", "), s.batch.model));
  }
  auto output = check_output(fds[1].get(), peer.uid, true);
  if (!output.ok()) return failure("invalid", output.error().message);
  if (auto free = output_is_free(db_, *output); !free.ok()) return failure_of(free.error());
  if (auto refusal = refuse_draining(*output)) return *refusal;
  const std::string format = json_field<std::string>(req, "format").value_or("jsonl");
  s.texts = format == "texts";
  s.template_text = json_field<std::string>(req, "template").value_or("");
  s.input = std::move(fds[0]);
  s.output = std::move(fds[1]);
  s.output_stat = *output;
  // Reading, parsing and storing a 200 MiB input takes seconds: the intake's thread does it, and
  // the answer comes from stored(), on this thread, once it has.
  s.answer = defer();
  intake_->add(std::move(s));
  return json();
}

std::optional<json> Service::refuse_draining(const struct stat& output) {
  if (!dispatcher_->drains_output(output.st_dev, output.st_ino)) return std::nullopt;
  return failure("invalid", "that file was the output of a cancelled batch whose last write has not returned yet (a "
                            "hung file system?): name a new file, or try again once it has");
}

json Service::stored(Intaken in) {
  if (in.refusal) {
    json refusal = failure_of(*in.refusal);
    if (in.line > 0) refusal["line"] = in.line;
    return refusal;  // nothing is queued
  }
  Batch& batch = in.batch;
  struct stat st {};
  st.st_dev = static_cast<dev_t>(batch.output_dev);
  st.st_ino = static_cast<ino_t>(batch.output_ino);
  // A cancel of the batch that wrote to this file may have been answered while the intake read.
  std::optional<json> refusal = refuse_draining(st);
  if (!refusal) {
    auto made = db_.loaded(batch.id);
    if (!made.ok() || !*made) {
      refusal = failure("io", fmt::format("cannot record the batch in the store: {}",
                                          made.ok() ? "it was removed while it was stored" : made.error().message));
    }
  }
  if (refusal) {
    if (auto r = db_.drop_loading(batch.id); !r.ok()) log(util::LogLevel::Warning, r.error().message);
    return *refusal;
  }
  log(util::LogLevel::Info, fmt::format("backfill: batch {} of {}: {} requests for {} on server {} (read and stored in "
                                        "{} ms)",
                                        batch.id, batch.user, batch.requests, batch.model, batch.server, in.took_ms));
  if (auto sent = send(batch, std::move(in.own_output)); !sent.ok()) not_sent(batch, sent.error());
  return answer_batch(batch.id);
}

// A batch the dispatcher could not take (libcurl missing, its server gone): it waits, saying why,
// for its owner to hand its output over again once that is mended.
void Service::not_sent(Batch& batch, const Error& why) {
  batch.state = BatchState::Queued;
  batch.reason = fmt::format("not sent: {}; once that is mended: tarmac backfill resume {} --output FILE", why.message,
                             batch.id);
  log(util::LogLevel::Warning, fmt::format("backfill: batch {}: {}", batch.id, batch.reason));
  if (auto r = db_.save(batch); !r.ok()) log(util::LogLevel::Warning, r.error().message);
}

Result<Batch> Service::find(const sched::Peer& peer, const json& req) {
  const auto id = json_field<long long>(req, "id");
  if (!id) return refused("invalid", "no batch id");
  TARMAC_TRY_ASSIGN(auto batch, db_.batch(*id));
  // Another user's batch is answered as one that does not exist: its owner and its existence are
  // theirs to know.
  if (!batch || (peer.uid != 0 && peer.uid != batch->uid)) return refused("invalid", fmt::format("no batch {}", *id));
  return std::move(*batch);
}

json Service::status(const sched::Peer& peer, const json& req) {
  if (req.contains("id")) {
    auto batch = find(peer, req);
    return batch.ok() ? answer_batch(*batch) : failure_of(batch.error());
  }
  auto all = db_.batches(BatchDb::Which::All);
  if (!all.ok()) return failure("io", all.error().message);
  json out = json::array();
  for (const auto& b : *all) {
    if (peer.uid != 0 && peer.uid != b.uid) continue;
    auto p = db_.progress(b.id);
    if (!p.ok()) return failure("io", p.error().message);
    out.push_back(batch_json(b, *p, util::wall_ms()));
  }
  return json{{"ok", true}, {"batches", out}};
}

json Service::cancel(const sched::Peer& peer, const json& req) {
  auto found = find(peer, req);
  if (!found.ok()) return failure_of(found.error());
  Batch batch = std::move(*found);
  if (ended(batch.state)) {
    return failure("ended", fmt::format("batch {} has already ended ({})", batch.id, to_string(batch.state)));
  }
  // Nothing more is sent or written (the output is closed); the requests in flight go back to pending.
  const long long interrupted = dispatcher_->release(batch.id);
  auto now = db_.batch(batch.id);  // the dispatcher may have ended it meanwhile
  if (!now.ok() || !*now) return failure("io", now.ok() ? "the batch is gone" : now.error().message);
  batch = std::move(**now);
  if (ended(batch.state)) {
    return failure("ended", fmt::format("batch {} has already ended ({})", batch.id, to_string(batch.state)));
  }
  batch.state = BatchState::Cancelled;
  batch.ended_ms = util::wall_ms();
  batch.reason = fmt::format("cancelled by {} ({} requests in flight interrupted)", account_name(peer.uid), interrupted);
  if (auto r = db_.save(batch); !r.ok()) return failure("io", r.error().message);
  return answer_batch(batch);
}

json Service::resume(const sched::Peer& peer, std::vector<util::Fd>& fds, const json& req) {
  auto found = find(peer, req);
  if (!found.ok()) return failure_of(found.error());
  Batch batch = std::move(*found);
  if (ended(batch.state)) {
    return failure("ended", fmt::format("batch {} has already ended ({})", batch.id, to_string(batch.state)));
  }
  if (fds.size() != 1) return failure("invalid", "a resume carries one descriptor: the output");
  auto output = check_output(fds[0].get(), batch.uid, false);
  if (!output.ok()) return failure("invalid", output.error().message);
  if (auto same = check_same_output(db_, batch, fds[0].get(), *output); !same.ok()) {
    return failure("invalid", same.error().message);
  }
  if (dispatcher_->holds(batch.id)) return answer_batch(batch);  // the agent holds its output already
  auto own = private_description(fds[0].get());
  if (!own.ok()) return failure_of(own.error());
  auto reconciled = send(batch, std::move(*own));
  if (!reconciled.ok()) {
    not_sent(batch, reconciled.error());
    return failure("io", reconciled.error().message);
  }
  log(util::LogLevel::Info, fmt::format("backfill: batch {}: output handed over again ({} lines adopted, {} bytes cut, "
                                        "{} lines missing sent again)",
                                        batch.id, reconciled->adopted, reconciled->cut_bytes, reconciled->lost));
  return answer_batch(batch.id);
}

}  // namespace tarmac::backfill
