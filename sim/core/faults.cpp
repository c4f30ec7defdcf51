#include "faults.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fmt/format.h>

#include "tarmac/nvml/nvml_types.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sim {

namespace {

constexpr unsigned long long kXidGpuFellOffTheBus = 79;

}  // namespace

FaultBook::FaultBook(const Scenario& scenario, std::optional<StateDir> state)
    : scenario_(scenario), state_(std::move(state)) {
  rebuild();
  refresh();
}

void FaultBook::refresh() {
  if (!state_) return;
  struct stat st {};
  FileId now;
  if (::stat(state_->faults().c_str(), &st) == 0) {
    now = {st.st_ino, static_cast<long long>(st.st_mtim.tv_sec) * 1'000'000'000LL + st.st_mtim.tv_nsec,
           static_cast<long long>(st.st_size)};
  }
  if (now == seen_) return;
  seen_ = now;
  runtime_.clear();
  if (now.size >= 0) {
    auto text = read_file(state_->faults());
    if (text) {
      const std::vector<std::string> lines = util::split(*text, '\n');
      for (std::size_t i = 0; i < lines.size(); ++i) {
        const std::string_view line = util::trim(lines[i]);
        if (line.empty() || line.front() == '#') continue;
        // `tarmac-sim fault` validated the line; one that no longer parses is skipped, not fatal.
        auto rule = parse_fault_spec(line, scenario_.gpus.size(), 0);
        if (!rule) continue;
        rule->id = fmt::format("r{}", i + 1);
        runtime_.push_back(std::move(*rule));
      }
    }
  }
  rebuild();
}

void FaultBook::rebuild() {
  rules_ = scenario_.faults;
  rules_.insert(rules_.end(), runtime_.begin(), runtime_.end());
  events_ = scenario_.events;
  for (const FaultRule& r : rules_) {
    if (r.event) events_.push_back(*r.event);
  }
  for (unsigned g = 0; g < scenario_.gpus.size(); ++g) {
    if (auto at = lost_at(g)) events_.push_back({g, *at, tarmac::nvml::nvmlEventTypeXidCriticalError, kXidGpuFellOffTheBus});
  }
  std::stable_sort(events_.begin(), events_.end(), [](const EventSpec& a, const EventSpec& b) { return a.at < b.at; });
}

bool FaultBook::consume(const FaultRule& rule) {
  if (!rule.calls) return true;
  if (!state_) return local_uses_[rule.id]++ < *rule.calls;
  // The count lives in a file under a lock so that "the next N calls" means the next N calls
  // of any process of the simulation.
  FileLock lock(state_->uses() / rule.id);
  if (!lock.locked()) return false;
  char buf[32] = {};
  const ssize_t n = ::pread(lock.fd(), buf, sizeof buf - 1, 0);
  unsigned long long used = 0;
  if (n > 0) used = static_cast<unsigned long long>(util::parse_int(util::trim(std::string_view(buf, static_cast<std::size_t>(n)))).value_or(0));
  if (used >= *rule.calls) return false;
  const std::string next = std::to_string(used + 1) + "\n";
  if (::ftruncate(lock.fd(), 0) != 0 || ::pwrite(lock.fd(), next.data(), next.size(), 0) < 0) return false;
  return true;
}

FaultDecision FaultBook::on_call(std::string_view function, std::optional<unsigned> gpu, double t) {
  FaultDecision d;
  for (const FaultRule& r : rules_) {
    if (!r.matches(function, gpu, t)) continue;
    if (!consume(r)) continue;
    d.delay_ms += r.delay_ms;
    if (r.rc && !d.rc) d.rc = r.rc;  // the first matching return code wins
  }
  return d;
}

std::optional<double> FaultBook::lost_at(unsigned gpu) const {
  std::optional<double> at;
  for (const FaultRule& r : rules_) {
    if (r.lost_at && r.gpu == gpu && (!at || *r.lost_at < *at)) at = r.lost_at;
  }
  return at;
}

unsigned long long FaultBook::ecc_events(unsigned gpu, unsigned long long type, double t) const {
  return static_cast<unsigned long long>(std::count_if(events_.begin(), events_.end(), [&](const EventSpec& e) {
    return e.gpu == gpu && e.type == type && e.at <= t;
  }));
}

Result<void> append_runtime_fault(const StateDir& state, const FaultRule& rule) {
  FileLock lock(state.faults_lock());
  auto existing = read_file(state.faults());
  std::string text = existing ? *existing : std::string();
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += format_fault_rule(rule) + "\n";
  return write_file_atomic(state.faults(), text);
}

Result<void> clear_runtime_faults(const StateDir& state) {
  FileLock lock(state.faults_lock());
  // Runtime rules are named by their line: forget the counts so that new rules start afresh.
  std::error_code ec;
  for (std::filesystem::directory_iterator it(state.uses(), ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with("r")) std::filesystem::remove(it->path(), ec);
  }
  return write_file_atomic(state.faults(), "");
}

}  // namespace tarmac::sim
