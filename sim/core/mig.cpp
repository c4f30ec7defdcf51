#include "mig.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>

namespace tarmac::sim {

namespace {

// NVML_GPU_INSTANCE_PROFILE_*.
constexpr unsigned k1Slice = 0, k2Slice = 1, k3Slice = 2, k4Slice = 3, k7Slice = 4, k1SliceRev1 = 7,
                   k1SliceRev2 = 9;

// Placements: a 1-slice instance may start at any of the first seven memory slices, a 2-slice one
// at an even slice, a half-board one at 0 or 4, a 4g or 7g one only at 0.
const std::vector<unsigned> kAny1{0, 1, 2, 3, 4, 5, 6};
const std::vector<unsigned> kPairs{0, 2, 4, 6};
const std::vector<unsigned> kPairs2g{0, 2, 4};
const std::vector<unsigned> kHalves{0, 4};
const std::vector<unsigned> kWhole{0};

// `nvidia-smi mig -lgip` of each board (memory in MiB: its GiB column times 1024; the A100s' as
// NVIDIA's go-nvml mock has them). Sources and what is unconfirmed: docs/mig.md. Columns:
// name, NVML profile, id, slices, memory slices, instances, MiB, SMs, CE, DEC, ENC, JPEG, OFA.
const std::vector<MigProfile> kA100_40{
    {"1g.5gb", k1Slice, 19, 1, 1, 7, 4864, 14, 1, 0, 0, 0, 0, kAny1},
    {"1g.5gb+me", k1SliceRev1, 20, 1, 1, 1, 4864, 14, 1, 1, 0, 1, 1, kAny1},
    {"1g.10gb", k1SliceRev2, 15, 1, 2, 4, 9856, 14, 1, 1, 0, 0, 0, kPairs},
    {"2g.10gb", k2Slice, 14, 2, 2, 3, 9856, 28, 2, 1, 0, 0, 0, kPairs2g},
    {"3g.20gb", k3Slice, 9, 3, 4, 2, 19968, 42, 3, 2, 0, 0, 0, kHalves},
    {"4g.20gb", k4Slice, 5, 4, 4, 1, 19968, 56, 4, 2, 0, 0, 0, kWhole},
    {"7g.40gb", k7Slice, 0, 7, 8, 1, 40192, 98, 7, 5, 0, 1, 1, kWhole},
};
const std::vector<MigProfile> kA100_80{
    {"1g.10gb", k1Slice, 19, 1, 1, 7, 9856, 14, 1, 0, 0, 0, 0, kAny1},
    {"1g.10gb+me", k1SliceRev1, 20, 1, 1, 1, 9856, 14, 1, 1, 0, 1, 1, kAny1},
    {"1g.20gb", k1SliceRev2, 15, 1, 2, 4, 19968, 14, 1, 1, 0, 0, 0, kPairs},
    {"2g.20gb", k2Slice, 14, 2, 2, 3, 19968, 28, 2, 1, 0, 0, 0, kPairs2g},
    {"3g.40gb", k3Slice, 9, 3, 4, 2, 40192, 42, 3, 2, 0, 0, 0, kHalves},
    {"4g.40gb", k4Slice, 5, 4, 4, 1, 40192, 56, 4, 2, 0, 0, 0, kWhole},
    {"7g.80gb", k7Slice, 0, 7, 8, 1, 80384, 98, 7, 5, 0, 1, 1, kWhole},
};
const std::vector<MigProfile> kH100_80{
    {"1g.10gb", k1Slice, 19, 1, 1, 7, 9984, 16, 1, 1, 0, 1, 0, kAny1},
    {"1g.10gb+me", k1SliceRev1, 20, 1, 1, 1, 9984, 16, 1, 1, 0, 1, 1, kAny1},
    {"1g.20gb", k1SliceRev2, 15, 1, 2, 4, 20096, 26, 1, 1, 0, 1, 0, kPairs},
    {"2g.20gb", k2Slice, 14, 2, 2, 3, 20096, 32, 2, 2, 0, 2, 0, kPairs2g},
    {"3g.40gb", k3Slice, 9, 3, 4, 2, 40448, 60, 3, 3, 0, 3, 0, kHalves},
    {"4g.40gb", k4Slice, 5, 4, 4, 1, 40448, 64, 4, 4, 0, 4, 0, kWhole},
    {"7g.80gb", k7Slice, 0, 7, 8, 1, 81152, 132, 8, 7, 0, 7, 1, kWhole},
};
const std::vector<MigProfile> kH200_141{
    {"1g.18gb", k1Slice, 19, 1, 1, 7, 16384, 16, 1, 1, 0, 1, 0, kAny1},
    {"1g.18gb+me", k1SliceRev1, 20, 1, 1, 1, 16384, 16, 1, 1, 0, 1, 1, kAny1},
    {"1g.35gb", k1SliceRev2, 15, 1, 2, 4, 33024, 26, 1, 1, 0, 1, 0, kPairs},
    {"2g.35gb", k2Slice, 14, 2, 2, 3, 33024, 32, 2, 2, 0, 2, 0, kPairs2g},
    {"3g.71gb", k3Slice, 9, 3, 4, 2, 71168, 60, 3, 3, 0, 3, 0, kHalves},
    {"4g.71gb", k4Slice, 5, 4, 4, 1, 71168, 64, 4, 4, 0, 4, 0, kWhole},
    {"7g.141gb", k7Slice, 0, 7, 8, 1, 143104, 132, 8, 7, 0, 7, 1, kWhole},
};

// FNV-1a, for UUIDs that are stable across runs and differ per GPU and instance.
std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::span<const MigProfile> mig_profiles(const std::string& gpu_name, unsigned long long memory_mib) {
  const auto has = [&](const char* s) { return gpu_name.find(s) != std::string::npos; };
  if (has("H200")) return kH200_141;
  if (has("H100") && memory_mib >= 78'000 && memory_mib < 90'000) return kH100_80;
  if (has("A100") && memory_mib >= 78'000 && memory_mib < 90'000) return kA100_80;
  if (has("A100") && memory_mib >= 38'000 && memory_mib < 45'000) return kA100_40;
  return {};
}

const MigProfile* find_mig_profile(std::span<const MigProfile> profiles, const std::string& name) {
  for (const MigProfile& p : profiles) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

unsigned compute_profile_of_slices(unsigned slices) {
  switch (slices) {
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3;
    case 7: return 4;
    default: return 0;
  }
}

unsigned gpu_instance_id(unsigned start, unsigned memory_slices) {
  if (memory_slices == 0) return 0;
  return (8 / memory_slices - 1) + start / memory_slices;
}

namespace {

// Places profiles[i..] on the free memory slices, each at its first placement that lets the rest
// fit too (depth-first: at most seven instances of at most seven placements).
bool place_from(std::vector<MigInstance>& placed, const std::vector<const MigProfile*>& wanted, std::size_t i,
                bool (&used)[8], bool media_taken) {
  if (i == wanted.size()) return true;
  const MigProfile& p = *wanted[i];
  const bool media = std::string_view(p.name).ends_with("+me");
  if (media && media_taken) return false;  // the board's one set of media engines
  for (unsigned s : p.starts) {
    if (std::any_of(used + s, used + s + p.memory_slices, [](bool b) { return b; })) continue;
    std::fill(used + s, used + s + p.memory_slices, true);
    placed.push_back({&p, s, gpu_instance_id(s, p.memory_slices), 0, {}});
    if (place_from(placed, wanted, i + 1, used, media_taken || media)) return true;
    placed.pop_back();
    std::fill(used + s, used + s + p.memory_slices, false);
  }
  return false;
}

}  // namespace

MigLayoutResult place_mig_instances(std::span<const MigProfile> profiles, const std::vector<std::string>& names,
                                    const std::string& gpu_uuid) {
  MigLayoutResult out;
  std::vector<const MigProfile*> wanted;
  for (const std::string& name : names) {
    const MigProfile* p = find_mig_profile(profiles, name);
    if (p == nullptr) {
      std::string known;
      for (const MigProfile& q : profiles) known += (known.empty() ? "" : ", ") + std::string(q.name);
      out.error = fmt::format("'{}' is not a MIG profile of this GPU ({})", name, known);
      return out;
    }
    wanted.push_back(p);
  }
  bool used[8] = {};
  if (!place_from(out.instances, wanted, 0, used, false)) {
    out.instances.clear();
    out.error = fmt::format("[{}] do not fit on one GPU together (8 memory slices, 7 compute slices)",
                            fmt::join(names, ", "));
    return out;
  }
  std::sort(out.instances.begin(), out.instances.end(),
            [](const MigInstance& a, const MigInstance& b) { return a.gi_id < b.gi_id; });
  // Name-based (version 5 style, RFC 4122 variant), as the driver's MIG UUIDs look.
  for (MigInstance& m : out.instances) {
    const std::uint64_t a = fnv1a(fmt::format("{}/gi{}/ci{}", gpu_uuid, m.gi_id, m.ci_id));
    const std::uint64_t b = fnv1a("mig", a);
    m.uuid = fmt::format("MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", static_cast<unsigned>(a >> 32),
                         static_cast<unsigned>((a >> 16) & 0xFFFF), 0x5000U | static_cast<unsigned>(a & 0x0FFF),
                         0x8000U | static_cast<unsigned>((b >> 48) & 0x3FFF), b & 0xFFFFFFFFFFFFULL);
  }
  return out;
}

}  // namespace tarmac::sim
