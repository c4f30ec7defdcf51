#include "tarmac/serve/live_wire.hpp"

#include "tarmac/gpu/device_fields.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fmt/format.h>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

namespace tarmac::serve {

namespace {

using nlohmann::json;

constexpr int kWireVersion = 1;
constexpr std::size_t kMaxString = 4096;
constexpr std::size_t kMaxDevices = 1024;
constexpr std::size_t kMaxProcesses = 4096;  // per device
constexpr std::size_t kMaxMig = 8;           // a board has at most 7 (docs/mig.md)
constexpr std::size_t kMaxList = 4096;       // CPUs, XIDs, read errors

template <class T, class F>
void process_fields(T& p, F&& f) {
  f("pid", p.pid);
  f("used_mem_bytes", p.used_mem_bytes);
  f("sm_util_pct", p.sm_util_pct);
  f("mem_util_pct", p.mem_util_pct);
  f("enc_util_pct", p.enc_util_pct);
  f("dec_util_pct", p.dec_util_pct);
  f("jpg_util_pct", p.jpg_util_pct);
  f("ofa_util_pct", p.ofa_util_pct);
  f("mig", p.mig);
  f("start_ticks", p.host.start_ticks);
}

// Writing: only what has a value (an absent key reads back as "not read").
struct Put {
  json& j;
  template <class T>
  void operator()(const char* name, const std::optional<T>& v) const {
    if (v) j[name] = *v;
  }
  void operator()(const char* name, unsigned v) const { j[name] = v; }
  void operator()(const char* name, const std::vector<unsigned>& v) const {
    if (!v.empty()) j[name] = v;
  }
};

// Reading: every value checked against its type and range; the first problem is kept.
struct Get {
  const json& j;
  std::string& problem;
  const char* where;

  void fail(const char* name, const char* expected) const {
    if (problem.empty()) problem = fmt::format("{}.{} is not {}", where, name, expected);
  }

  template <class T>
  bool read(const char* name, const json& v, T& out) const {
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) return fail(name, "true or false"), false;
      out = v.get<bool>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string() || v.get_ref<const std::string&>().size() > kMaxString) return fail(name, "a short string"), false;
      out = v.get<std::string>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || std::fabs(v.get<double>()) > 1e15) {
        return fail(name, "a number"), false;
      }
      out = v.get<double>();
    } else if constexpr (std::is_unsigned_v<T>) {
      if (!v.is_number_unsigned() || v.get<std::uint64_t>() > std::numeric_limits<T>::max()) {
        return fail(name, "a whole number in range"), false;
      }
      out = static_cast<T>(v.get<std::uint64_t>());
    } else {
      static_assert(std::is_signed_v<T> && std::is_integral_v<T>);
      if (!v.is_number_integer() || v.get<std::int64_t>() < std::numeric_limits<T>::min() ||
          v.get<std::int64_t>() > std::numeric_limits<T>::max()) {
        return fail(name, "a whole number in range"), false;
      }
      out = static_cast<T>(v.get<std::int64_t>());
    }
    return true;
  }

  template <class T>
  void operator()(const char* name, std::optional<T>& out) const {
    out.reset();
    const auto it = j.find(name);
    if (it == j.end() || it->is_null()) return;
    T v{};
    if (read(name, *it, v)) out = std::move(v);
  }
  void operator()(const char* name, unsigned& out) const {
    const auto it = j.find(name);
    if (it == j.end()) return fail(name, "there");
    read(name, *it, out);
  }
  void operator()(const char* name, std::vector<unsigned>& out) const {
    out.clear();
    const auto it = j.find(name);
    if (it == j.end()) return;
    if (!it->is_array() || it->size() > kMaxList) return fail(name, "a short list");
    for (const auto& v : *it) {
      unsigned n = 0;
      if (!read(name, v, n)) return;
      out.push_back(n);
    }
  }
};

template <class T, class Fields>
json write(const T& value, Fields fields) {
  json j = json::object();
  fields(value, Put{j});
  return j;
}

template <class T, class Fields>
void read_into(const json& j, T& value, Fields fields, std::string& problem, const char* where) {
  if (!j.is_object()) {
    if (problem.empty()) problem = fmt::format("{} is not an object", where);
    return;
  }
  fields(value, Get{j, problem, where});
}

// The lambdas that name each list of fields (templates cannot be passed by name).
// Each list of fields (gpu/device_fields.hpp) applied to an object: `f(name, member)`.
constexpr auto kIdentity = [](auto& v, auto&& f) { gpu::identity_fields([&](const char* n, auto m) { f(n, v.*m); }); };
constexpr auto kModes = [](auto& v, auto&& f) { gpu::modes_fields([&](const char* n, auto m) { f(n, v.*m); }); };
constexpr auto kSample = [](auto& v, auto&& f) { gpu::sample_fields([&](const char* n, auto m) { f(n, v.*m); }); };
constexpr auto kSlow = [](auto& v, auto&& f) { gpu::slow_fields([&](const char* n, auto m) { f(n, v.*m); }); };
constexpr auto kMig = [](auto& v, auto&& f) { gpu::mig_fields([&](const char* n, auto m) { f(n, v.*m); }); };
constexpr auto kProcess = [](auto& v, auto&& f) { process_fields(v, f); };

const char* process_type_name(gpu::ProcessType t) {
  switch (t) {
    case gpu::ProcessType::Compute: return "compute";
    case gpu::ProcessType::Graphics: return "graphics";
    case gpu::ProcessType::Mps: return "mps";
  }
  return "compute";
}

std::optional<gpu::ProcessType> process_type_named(const std::string& s) {
  if (s == "compute") return gpu::ProcessType::Compute;
  if (s == "graphics") return gpu::ProcessType::Graphics;
  if (s == "mps") return gpu::ProcessType::Mps;
  return std::nullopt;
}

std::optional<gpu::Activity> activity_named(const std::string& s) {
  for (const auto a : gpu::kActivities) {
    if (s == gpu::to_string(a)) return a;
  }
  return std::nullopt;
}

constexpr gpu::Link kLinks[] = {gpu::Link::Self, gpu::Link::NvLink, gpu::Link::Internal, gpu::Link::Pix, gpu::Link::Pxb,
                                gpu::Link::Phb,  gpu::Link::Node,   gpu::Link::Sys,      gpu::Link::Unknown};
constexpr unsigned kMaxNvlinks = 64;  // links between one pair (a board has at most 18)

json topology_json(const gpu::Topology& t) {
  json links = json::array();
  for (const auto& row : t.links) {
    json r = json::array();
    for (const auto l : row) r.push_back(gpu::to_string(l));
    links.push_back(std::move(r));
  }
  return {{"links", std::move(links)}, {"nvlink_count", t.nvlink_count}};
}

// A square matrix of `n` rows, as nvml_backend reads it; "" when it is, else what it is not.
std::string read_topology(const json& j, std::size_t n, gpu::Topology& out) {
  const auto square = [n](const json& m) {
    if (!m.is_array() || m.size() != n) return false;
    for (const auto& row : m) {
      if (!row.is_array() || row.size() != n) return false;
    }
    return true;
  };
  if (!j.is_object()) return "topology is not an object";
  const json links = j.value("links", json());
  const json counts = j.value("nvlink_count", json());
  if (!square(links) || !square(counts)) return fmt::format("topology is not two {0}x{0} matrices", n);
  for (std::size_t a = 0; a < n; ++a) {
    auto& lrow = out.links.emplace_back();
    auto& crow = out.nvlink_count.emplace_back();
    for (std::size_t b = 0; b < n; ++b) {
      const json& l = links[a][b];
      const auto* name = l.is_string() ? &l.get_ref<const std::string&>() : nullptr;
      const auto* link = name == nullptr ? nullptr
                                         : std::find_if(std::begin(kLinks), std::end(kLinks),
                                                        [&](gpu::Link k) { return *name == gpu::to_string(k); });
      if (link == nullptr || link == std::end(kLinks)) return "topology.links holds what is not a link";
      const json& c = counts[a][b];
      if (!c.is_number_unsigned() || c.get<std::uint64_t>() > kMaxNvlinks) return "topology.nvlink_count is not a count of links";
      lrow.push_back(*link);
      crow.push_back(static_cast<unsigned>(c.get<std::uint64_t>()));
    }
  }
  return "";
}

json device_json(const gpu::Device& d, const LiveView& view) {
  json j = json::object();
  j["id"] = write(d.id, kIdentity);
  j["modes"] = write(d.modes, kModes);
  j["sample"] = write(d.sample, kSample);
  if (d.slow) j["slow"] = write(*d.slow, kSlow);
  j["processes"] = json::array();
  for (const auto& p : d.processes) {
    json pj = write(p, kProcess);
    pj["type"] = process_type_name(p.type);
    if (p.mig_instance) pj["mig_instance"] = {p.mig_instance->first, p.mig_instance->second};
    j["processes"].push_back(std::move(pj));
  }
  j["mig"] = json::array();
  for (const auto& m : d.mig) j["mig"].push_back(write(m, kMig));
  if (d.lost) j["lost"] = *d.lost;
  j["errors"] = json::array();
  for (const auto& e : d.errors) j["errors"].push_back({{"what", e.what}, {"message", e.message}});
  if (!d.new_xids.empty()) j["new_xids"] = d.new_xids;
  if (d.last_xid) j["last_xid"] = *d.last_xid;

  // What the agent measured over time, its clock turned into the snapshot's.
  const unsigned index = d.id.index;
  const auto to_snapshot_clock = [&](long long agent_ms) { return view.snapshot.timestamp_unix_ms - (view.ts_ms - agent_ms); };
  if (const auto c = view.classes.find(index); c != view.classes.end()) j["activity"] = gpu::to_string(c->second);
  if (const auto s = view.since.find(index); s != view.since.end()) {
    j["class_since_unix_ms"] = to_snapshot_clock(s->second.class_ms);
    if (s->second.held_idle_ms) j["held_idle_since_unix_ms"] = to_snapshot_clock(*s->second.held_idle_ms);
  }
  if (const auto m = view.mig_classes.find(index); m != view.mig_classes.end()) {
    j["mig_activity"] = json::array();
    for (const auto& a : m->second) j["mig_activity"].push_back({{"activity", gpu::to_string(a.activity)}, {"measured", a.measured}});
  }
  return j;
}

}  // namespace

std::string live_wire(const LiveView& view, long long now_unix_ms, bool with_topology) {
  json j = json::object();
  j["v"] = kWireVersion;
  j["age_ms"] = std::max(0LL, now_unix_ms - view.published_unix_ms);
  const gpu::Snapshot& s = view.snapshot;
  j["timestamp_unix_ms"] = s.timestamp_unix_ms;
  if (s.driver_version) j["driver_version"] = *s.driver_version;
  if (s.nvml_version) j["nvml_version"] = *s.nvml_version;
  if (s.cuda_driver_version) j["cuda_driver_version"] = *s.cuda_driver_version;
  j["devices"] = json::array();
  for (const auto& d : s.devices) j["devices"].push_back(device_json(d, view));
  if (s.topology && with_topology) j["topology"] = topology_json(*s.topology);
  // Strings come from the driver and /proc: invalid UTF-8 is replaced, never a reason to fail.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<std::string> window_wire(const std::vector<std::shared_ptr<const LiveView>>& views, long long now_unix_ms,
                                     std::size_t max_bytes) {
  std::vector<std::string> wired;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < views.size(); ++i) {
    wired.push_back(live_wire(*views[i], now_unix_ms, i + 1 == views.size()));
    bytes += wired.back().size();
  }
  if (bytes <= max_bytes || wired.size() <= 2) return wired;
  const std::size_t keep = std::clamp<std::size_t>(max_bytes / (bytes / wired.size() + 1), 2, wired.size());
  std::vector<std::string> out;
  for (std::size_t k = 0; k < keep; ++k) out.push_back(std::move(wired[k * (wired.size() - 1) / (keep - 1)]));
  return out;
}

Result<AgentView> parse_live_wire(std::string_view text) { return parse_live_wire_json(json::parse(text, nullptr, false)); }

Result<AgentView> parse_live_wire_json(const json& j) {
  if (!j.is_object()) return make_error(Error::Code::Invalid, "the agent's view is not a JSON object");
  if (const auto v = j.find("v"); v == j.end() || *v != kWireVersion) {
    return make_error(Error::Code::Invalid, "the agent's view is of another version (an agent older or newer than this tarmac)");
  }
  std::string problem;
  AgentView out;
  Get top{j, problem, "view"};
  std::optional<long long> ts, age;
  top("timestamp_unix_ms", ts);
  top("age_ms", age);
  top("driver_version", out.snapshot.driver_version);
  top("nvml_version", out.snapshot.nvml_version);
  top("cuda_driver_version", out.snapshot.cuda_driver_version);
  // Times a clock can give (to the year 37,000): sums and differences of them cannot overflow.
  constexpr long long kMaxMs = 1LL << 50;
  if (ts.value_or(0) < 0 || ts.value_or(0) > kMaxMs || age.value_or(0) > kMaxMs) {
    return make_error(Error::Code::Invalid, "the agent's view has a time no clock gives");
  }
  out.snapshot.timestamp_unix_ms = ts.value_or(0);
  out.age_ms = std::max(0LL, age.value_or(0));
  const auto devices = j.find("devices");
  if (devices == j.end() || !devices->is_array() || devices->size() > kMaxDevices) {
    return make_error(Error::Code::Invalid, "the agent's view has no list of devices");
  }
  for (const auto& dj : *devices) {
    if (!dj.is_object()) return make_error(Error::Code::Invalid, "the agent's view lists a device that is not an object");
    gpu::Device d;
    read_into(dj.value("id", json()), d.id, kIdentity, problem, "id");
    read_into(dj.value("modes", json::object()), d.modes, kModes, problem, "modes");
    read_into(dj.value("sample", json::object()), d.sample, kSample, problem, "sample");
    if (const auto slow = dj.find("slow"); slow != dj.end()) read_into(*slow, d.slow.emplace(), kSlow, problem, "slow");
    const auto mig = dj.find("mig");
    if (mig != dj.end() && mig->is_array() && mig->size() <= kMaxMig) {
      for (const auto& mj : *mig) read_into(mj, d.mig.emplace_back(), kMig, problem, "mig");
    } else if (mig != dj.end()) {
      problem = "mig is not a list of at most 8";
    }
    const auto procs = dj.find("processes");
    if (procs != dj.end() && procs->is_array() && procs->size() <= kMaxProcesses) {
      for (const auto& pj : *procs) {
        gpu::GpuProcess& p = d.processes.emplace_back();
        read_into(pj, p, kProcess, problem, "process");
        if (!pj.is_object()) break;
        p.host.pid = p.pid;
        if (p.mig && *p.mig >= d.mig.size()) p.mig.reset();
        std::optional<std::string> type;
        Get{pj, problem, "process"}("type", type);
        p.type = process_type_named(type.value_or("compute")).value_or(gpu::ProcessType::Compute);
        if (const auto mi = pj.find("mig_instance"); mi != pj.end()) {
          std::optional<unsigned> gi, ci;
          if (mi->is_array() && mi->size() == 2) {
            const json pair = {{"gi", (*mi)[0]}, {"ci", (*mi)[1]}};
            Get{pair, problem, "process.mig_instance"}("gi", gi);
            Get{pair, problem, "process.mig_instance"}("ci", ci);
          }
          if (gi && ci) p.mig_instance = std::make_pair(*gi, *ci);
        }
      }
    } else if (procs != dj.end()) {
      problem = "processes is not a bounded list";
    }
    Get dev{dj, problem, "device"};
    dev("lost", d.lost);
    dev("last_xid", d.last_xid);
    dev("new_xids", d.new_xids);
    if (const auto errors = dj.find("errors"); errors != dj.end() && errors->is_array() && errors->size() <= kMaxList) {
      for (const auto& ej : *errors) {
        std::optional<std::string> what, message;
        if (!ej.is_object()) continue;
        Get{ej, problem, "error"}("what", what);
        Get{ej, problem, "error"}("message", message);
        d.errors.push_back({what.value_or("?"), message.value_or("")});
      }
    }
    std::optional<std::string> activity;
    dev("activity", activity);
    if (activity && !activity_named(*activity)) problem = fmt::format("'{}' is not an activity class", *activity);
    std::optional<long long> since, held;
    dev("class_since_unix_ms", since);
    dev("held_idle_since_unix_ms", held);
    std::vector<gpu::MigActivity> mig_classes;
    if (const auto ma = dj.find("mig_activity"); ma != dj.end() && ma->is_array() && ma->size() <= kMaxMig) {
      for (const auto& aj : *ma) {
        std::optional<std::string> a;
        std::optional<bool> measured;
        if (!aj.is_object()) continue;
        Get{aj, problem, "mig_activity"}("activity", a);
        Get{aj, problem, "mig_activity"}("measured", measured);
        mig_classes.push_back({activity_named(a.value_or("")).value_or(gpu::Activity::Idle), measured.value_or(false)});
      }
    }
    if (!problem.empty()) return make_error(Error::Code::Invalid, "the agent's view: " + problem);
    out.classes.push_back(activity_named(activity.value_or("")).value_or(gpu::Activity::Idle));
    out.class_since_unix_ms.push_back(since);
    out.held_idle_since_unix_ms.push_back(held);
    out.mig_classes.push_back(std::move(mig_classes));
    out.snapshot.devices.push_back(std::move(d));
  }
  if (const auto topo = j.find("topology"); topo != j.end()) {
    if (problem.empty()) problem = read_topology(*topo, out.snapshot.devices.size(), out.snapshot.topology.emplace());
  }
  if (!problem.empty()) return make_error(Error::Code::Invalid, "the agent's view: " + problem);
  return out;
}

}  // namespace tarmac::serve
