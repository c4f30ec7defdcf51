// The agent's live view for local commands (serve/live_wire.hpp): every value of the model travels
// and comes back equal; what the agent measured over time comes along in the snapshot's clock;
// a hostile or broken answer is an error that names it, never a crash or a half-read view.
#include "tarmac/serve/live_wire.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>
#include <type_traits>

#include "tarmac/gpu/device_fields.hpp"

namespace tarmac::serve {
namespace {

// Sets every field of a list to a value of its own (n counts up), so a field that does not travel,
// or lands in another, shows.
template <class S>
auto setter(S& s, int& n) {
  return [&s, &n](const char*, auto member) {
    auto& v = s.*member;
    using V = std::remove_reference_t<decltype(v)>;
    ++n;
    if constexpr (gpu::is_optional<V>::value) {
      using T = typename V::value_type;
      if constexpr (std::is_same_v<T, std::string>) {
        v = "value-" + std::to_string(n);
      } else if constexpr (std::is_same_v<T, bool>) {
        v = n % 2 == 0;
      } else if constexpr (std::is_floating_point_v<T>) {
        v = n + 0.25;
      } else {
        v = static_cast<T>(n);
      }
    } else if constexpr (std::is_same_v<V, unsigned>) {
      v = static_cast<unsigned>(n);
    } else {
      v = {static_cast<unsigned>(n), static_cast<unsigned>(n + 1)};  // cpu_affinity
    }
  };
}

template <class S>
auto comparer(const S& a, const S& b) {
  return [&a, &b](const char* name, auto member) { EXPECT_EQ(a.*member, b.*member) << name; };
}

gpu::Device full_device(unsigned index) {
  int n = static_cast<int>(index) * 1000;
  gpu::Device d;
  gpu::identity_fields(setter(d.id, n));
  d.id.index = index;
  gpu::modes_fields(setter(d.modes, n));
  gpu::sample_fields(setter(d.sample, n));
  gpu::slow_fields(setter(d.slow.emplace(), n));
  for (unsigned k = 0; k < 2; ++k) gpu::mig_fields(setter(d.mig.emplace_back(), n));
  gpu::GpuProcess p;
  p.pid = 4242 + index;
  p.type = gpu::ProcessType::Mps;
  p.used_mem_bytes = 7ULL << 30;
  p.sm_util_pct = 12;
  p.mem_util_pct = 3;
  p.mig = 1;
  p.mig_instance = std::make_pair(5U, 0U);
  p.host.start_ticks = 123456789ULL;
  p.host.command_line = "python secret.py --token abc";  // not sent: the client reads /proc itself
  p.host.user = "bob";
  d.processes.push_back(p);
  d.errors.push_back({"power", "Unknown Error"});
  d.new_xids = {79};
  d.last_xid = 79;
  return d;
}

LiveView view_with(std::vector<gpu::Device> devices) {
  LiveView v;
  v.ts_ms = 50'000;  // the agent's clock: 10 s after the class began
  v.published_unix_ms = 1'700'000'000'000;
  v.snapshot.timestamp_unix_ms = 1'700'000'000'000;
  v.snapshot.driver_version = "550.54.15";
  v.snapshot.nvml_version = "12.550.54.15";
  v.snapshot.cuda_driver_version = 12040;
  v.snapshot.devices = std::move(devices);
  return v;
}

TEST(LiveWire, EveryValueTravelsAndComesBackEqual) {
  LiveView v = view_with({full_device(0), full_device(1)});
  v.classes = {{0, gpu::Activity::Holding}, {1, gpu::Activity::Busy}};
  v.since = {{0, gpu::ActivitySince{40'000, 20'000}}, {1, gpu::ActivitySince{45'000, std::nullopt}}};
  v.mig_classes = {{0, {{gpu::Activity::Busy, false}, {gpu::Activity::Idle, true}}}};
  auto parsed = parse_live_wire(live_wire(v, v.published_unix_ms + 300));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->age_ms, 300);
  EXPECT_EQ(parsed->snapshot.timestamp_unix_ms, v.snapshot.timestamp_unix_ms);
  EXPECT_EQ(parsed->snapshot.driver_version, "550.54.15");
  EXPECT_EQ(parsed->snapshot.nvml_version, "12.550.54.15");
  EXPECT_EQ(parsed->snapshot.cuda_driver_version, 12040);
  ASSERT_EQ(parsed->snapshot.devices.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    const gpu::Device& a = v.snapshot.devices[i];
    const gpu::Device& b = parsed->snapshot.devices[i];
    gpu::identity_fields(comparer(a.id, b.id));
    EXPECT_EQ(a.id.cpu_affinity, b.id.cpu_affinity);
    gpu::modes_fields(comparer(a.modes, b.modes));
    gpu::sample_fields(comparer(a.sample, b.sample));
    ASSERT_TRUE(b.slow.has_value());
    gpu::slow_fields(comparer(*a.slow, *b.slow));
    ASSERT_EQ(b.mig.size(), 2U);
    for (std::size_t k = 0; k < 2; ++k) gpu::mig_fields(comparer(a.mig[k], b.mig[k]));
    ASSERT_EQ(b.processes.size(), 1U);
    const auto& p = b.processes[0];
    EXPECT_EQ(p.pid, a.processes[0].pid);
    EXPECT_EQ(p.host.pid, p.pid);
    EXPECT_EQ(p.type, gpu::ProcessType::Mps);
    EXPECT_EQ(p.used_mem_bytes, 7ULL << 30);
    EXPECT_EQ(p.sm_util_pct, 12U);
    EXPECT_EQ(p.mem_util_pct, 3U);
    EXPECT_EQ(p.mig, 1U);
    EXPECT_EQ(p.mig_instance, std::make_pair(5U, 0U));
    EXPECT_EQ(p.host.start_ticks, 123456789ULL);
    EXPECT_FALSE(p.host.command_line.has_value()) << "host facts are the client's to read";
    EXPECT_FALSE(p.host.user.has_value());
    ASSERT_EQ(b.errors.size(), 1U);
    EXPECT_EQ(b.errors[0].message, "Unknown Error");
    EXPECT_EQ(b.new_xids, std::vector<unsigned>{79});
    EXPECT_EQ(b.last_xid, 79U);
  }
  EXPECT_EQ(parsed->classes, (std::vector<gpu::Activity>{gpu::Activity::Holding, gpu::Activity::Busy}));
  // The agent's clock (ms since it started) turned into the snapshot's: 10 s and 30 s before it.
  EXPECT_EQ(parsed->class_since_unix_ms[0], 1'700'000'000'000 - 10'000);
  EXPECT_EQ(parsed->held_idle_since_unix_ms[0], 1'700'000'000'000 - 30'000);
  EXPECT_EQ(parsed->class_since_unix_ms[1], 1'700'000'000'000 - 5'000);
  EXPECT_FALSE(parsed->held_idle_since_unix_ms[1].has_value());
  ASSERT_EQ(parsed->mig_classes[0].size(), 2U);
  EXPECT_EQ(parsed->mig_classes[0][0].activity, gpu::Activity::Busy);
  EXPECT_FALSE(parsed->mig_classes[0][0].measured);
  EXPECT_TRUE(parsed->mig_classes[0][1].measured);
  EXPECT_TRUE(parsed->mig_classes[1].empty());
}

TEST(LiveWire, UnreadValuesStayUnread) {
  gpu::Device d;
  d.id.index = 3;
  d.sample.util_gpu_pct = 0;  // zero is a value, not "unread"
  auto parsed = parse_live_wire(live_wire(view_with({d}), 0));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const auto& b = parsed->snapshot.devices.at(0);
  EXPECT_EQ(b.id.index, 3U);
  EXPECT_EQ(b.sample.util_gpu_pct, 0U);
  EXPECT_FALSE(b.sample.temp_c.has_value());
  EXPECT_FALSE(b.id.name.has_value());
  EXPECT_FALSE(b.slow.has_value());
  EXPECT_EQ(parsed->classes.at(0), gpu::Activity::Idle);  // the agent named no class
  EXPECT_FALSE(parsed->class_since_unix_ms.at(0).has_value());
}

std::string with_device(const std::string& device) {
  return R"({"v":1,"timestamp_unix_ms":1,"devices":[)" + device + "]}";
}

TEST(LiveWire, HostileAnswersAreRefusedByName) {
  const std::string id = R"("id":{"index":0})";
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "not a JSON object"},
      {"[]", "not a JSON object"},
      {R"({"v":2,"devices":[]})", "another version"},
      {R"({"v":1})", "no list of devices"},
      {R"({"v":1,"devices":{}})", "no list of devices"},
      {with_device("3"), "not an object"},
      {with_device("{}"), "id is not an object"},
      {with_device(R"({"id":{}})"), "id.index"},
      {with_device(R"({"id":{"index":-1}})"), "id.index"},
      {with_device(R"({"id":{"index":4294967296}})"), "id.index"},
      {with_device("{" + id + R"(,"sample":{"temp_c":"hot"}})"), "sample.temp_c"},
      {with_device("{" + id + R"(,"sample":{"util_gpu_pct":1.5}})"), "sample.util_gpu_pct"},
      {with_device("{" + id + R"(,"sample":{"mem_used_bytes":-5}})"), "sample.mem_used_bytes"},
      {with_device("{" + id + R"(,"slow":{"gpm_sm_active_pct":1e300}})"), "slow.gpm_sm_active_pct"},
      {with_device("{" + id + R"(,"modes":{"persistence_mode":1}})"), "modes.persistence_mode"},
      {with_device("{" + id + R"(,"id":{"index":0,"name":")" + std::string(5000, 'x') + R"("}})"), "id.name"},
      {with_device("{" + id + R"(,"activity":"sleeping"})"), "not an activity class"},
      {with_device("{" + id + R"(,"processes":[{"pid":"1"}]})"), "process.pid"},
      {with_device("{" + id + R"(,"processes":{}})"), "processes"},
      {with_device("{" + id + R"(,"mig":[{},{},{},{},{},{},{},{},{}]})"), "mig"},
      {with_device("{" + id + R"(,"class_since_unix_ms":"yesterday"})"), "class_since_unix_ms"},
  };
  for (const auto& [text, named] : cases) {
    auto parsed = parse_live_wire(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.error().message.find(named), std::string::npos) << text << " -> " << parsed.error().message;
  }
}

TEST(LiveWire, TooManyDevicesOrProcessesAreRefused) {
  std::string devices;
  for (int i = 0; i < 1025; ++i) devices += std::string(i ? "," : "") + R"({"id":{"index":0}})";
  EXPECT_FALSE(parse_live_wire(with_device(devices)).ok());
  std::string procs;
  for (int i = 0; i < 4097; ++i) procs += std::string(i ? "," : "") + R"({"pid":1})";
  EXPECT_FALSE(parse_live_wire(with_device(R"({"id":{"index":0},"processes":[)" + procs + "]}")).ok());
}

TEST(LiveWire, AProcessOnAMigDeviceThatIsNotThereLosesTheIndex) {
  auto parsed = parse_live_wire(with_device(R"({"id":{"index":0},"processes":[{"pid":7,"mig":5}]})"));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_FALSE(parsed->snapshot.devices[0].processes[0].mig.has_value());
}

TEST(LiveWire, TheTopologyTravelsAndABadOneIsRefused) {
  LiveView v = view_with({full_device(0), full_device(1)});
  gpu::Topology& t = v.snapshot.topology.emplace();
  t.links = {{gpu::Link::Self, gpu::Link::NvLink}, {gpu::Link::NvLink, gpu::Link::Self}};
  t.nvlink_count = {{0, 12}, {12, 0}};
  auto parsed = parse_live_wire(live_wire(v, 0));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  ASSERT_TRUE(parsed->snapshot.topology.has_value());
  EXPECT_EQ(parsed->snapshot.topology->links, t.links);
  EXPECT_EQ(parsed->snapshot.topology->nvlink_count, t.nvlink_count);
  auto none = parse_live_wire(live_wire(view_with({full_device(0)}), 0));
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_FALSE(none->snapshot.topology.has_value());
  auto left_out = parse_live_wire(live_wire(v, 0, false));  // status's: no topology
  ASSERT_TRUE(left_out.ok()) << left_out.error().message;
  EXPECT_FALSE(left_out->snapshot.topology.has_value());
  // A topology read well does not hide a bad value before it, nor is a time out of any clock's range taken.
  for (const std::string bad : {R"({"v":1,"age_ms":"x","devices":[],"topology":{"links":[],"nvlink_count":[]}})",
                                R"({"v":1,"timestamp_unix_ms":-5,"devices":[]})",
                                R"({"v":1,"timestamp_unix_ms":9223372036854775807,"devices":[]})",
                                R"({"v":1,"age_ms":9223372036854775807,"devices":[]})"}) {
    EXPECT_FALSE(parse_live_wire(bad).ok()) << bad;
  }
  const std::string device = R"({"v":1,"timestamp_unix_ms":1,"devices":[{"id":{"index":0}}],"topology":)";
  for (const std::string topo : {R"([])", R"({"links":[["X"]]})", R"({"links":[["X","NV"]],"nvlink_count":[[0]]})",
                                 R"({"links":[["XX"]],"nvlink_count":[[0]]})", R"({"links":[[1]],"nvlink_count":[[0]]})",
                                 R"({"links":[["X"]],"nvlink_count":[[-1]]})", R"({"links":[["X"]],"nvlink_count":[[65]]})"}) {
    auto bad = parse_live_wire(device + topo + "}");
    ASSERT_FALSE(bad.ok()) << topo;
    EXPECT_NE(bad.error().message.find("topology"), std::string::npos) << topo << " -> " << bad.error().message;
  }
}

TEST(LiveWire, AWindowTooLargeForItsAnswerIsThinnedEvenly) {
  std::vector<std::shared_ptr<const LiveView>> views;
  for (int i = 0; i < 10; ++i) {
    LiveView v = view_with({full_device(0)});
    v.snapshot.timestamp_unix_ms = 1000 * i;
    views.push_back(std::make_shared<LiveView>(std::move(v)));
  }
  const std::size_t one = live_wire(*views[0], 0).size();
  EXPECT_EQ(window_wire(views, 0, 100 * one).size(), 10U);  // all fit
  const auto thinned = window_wire(views, 0, 4 * (one + 8));  // four views of about `one` bytes
  ASSERT_EQ(thinned.size(), 4U);
  std::vector<long long> stamps;
  for (const auto& text : thinned) stamps.push_back(parse_live_wire(text)->snapshot.timestamp_unix_ms);
  EXPECT_EQ(stamps, (std::vector<long long>{0, 3000, 6000, 9000}));  // the first and the last kept
  // The topology once, with the last.
  for (auto& v : views) {
    auto copy = *v;
    copy.snapshot.topology = gpu::Topology{{{gpu::Link::Self}}, {{0}}};
    v = std::make_shared<LiveView>(std::move(copy));
  }
  const auto all = window_wire(views, 0, 100 * one);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(parse_live_wire(all[i])->snapshot.topology.has_value(), i + 1 == all.size()) << i;
  }
  EXPECT_EQ(window_wire(views, 0, 1).size(), 2U);                      // never fewer than two
  EXPECT_TRUE(window_wire({}, 0, 1).empty());
}

TEST(LiveState, RecentKeepsTheLastViewsOldestFirst) {
  LiveState live;
  EXPECT_TRUE(live.recent(1000).empty());
  for (long long ts = 0; ts <= 100'000; ts += 500) live.publish(gpu::Snapshot{}, {}, ts, AgentStats{});
  const auto last_second = live.recent(1000);
  ASSERT_EQ(last_second.size(), 3U);
  EXPECT_EQ(last_second.front()->ts_ms, 99'000);
  EXPECT_EQ(last_second.back()->ts_ms, 100'000);
  EXPECT_EQ(last_second.back(), live.view());
  EXPECT_EQ(live.recent(0).size(), 1U);
  // A window that does not fall on a sample begins with the one before it: the window is covered.
  const auto late = live.recent(1200);
  ASSERT_EQ(late.size(), 4U);
  EXPECT_EQ(late.front()->ts_ms, 98'500);
  const auto all = live.recent(1'000'000);  // no further back than kRecentMs, nor more than kRecentViews
  EXPECT_EQ(all.front()->ts_ms, std::max(100'000 - LiveState::kRecentMs, 100'000 - 500 * static_cast<long long>(LiveState::kRecentViews - 1)));
  // The clock stepped back: what was kept is of another time.
  live.publish(gpu::Snapshot{}, {}, 50'000, AgentStats{});
  ASSERT_EQ(live.recent(LiveState::kRecentMs).size(), 1U);
  EXPECT_EQ(live.recent(LiveState::kRecentMs).front()->ts_ms, 50'000);
  // At a fast interval, at most kRecentViews.
  LiveState fast;
  for (long long ts = 0; ts < 2000; ++ts) fast.publish(gpu::Snapshot{}, {}, ts, AgentStats{});
  EXPECT_EQ(fast.recent(LiveState::kRecentMs).size(), LiveState::kRecentViews);
}

TEST(DeviceFields, FillUnreadTakesOnlyWhatTheFastReadLacks) {
  gpu::Device full = full_device(0);
  gpu::Device fast;
  fast.id.index = 0;
  fast.sample.util_gpu_pct = 55;
  fast.sample.temp_c = 0;
  gpu::fill_unread(fast, full);
  EXPECT_EQ(fast.sample.util_gpu_pct, 55U);  // the fast read's own
  EXPECT_EQ(fast.sample.temp_c, 0U);
  EXPECT_EQ(fast.modes.power_limit_mw, full.modes.power_limit_mw);
  EXPECT_EQ(fast.sample.pstate, full.sample.pstate);
  EXPECT_EQ(fast.id.name, full.id.name);
  EXPECT_EQ(fast.id.cpu_affinity, full.id.cpu_affinity);
  EXPECT_TRUE(fast.processes.empty());  // lists are not values: the caller's
  EXPECT_TRUE(fast.mig.empty());
  EXPECT_FALSE(fast.slow.has_value());
}

}  // namespace
}  // namespace tarmac::serve
