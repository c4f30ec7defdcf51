// The --query-gpu field table: every field nvidia-smi 535 answers that tarmac's GPU model holds,
// with nvidia-smi's canonical name (printed in the header), its aliases, its unit and how to read
// it from a snapshot. Pure: no I/O, no NVML.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/fields/value.hpp"
#include "tarmac/gpu/model.hpp"
#include "tarmac/gpu/value_groups.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::fields {

// What a field reads from: the whole snapshot (and how many GPUs the system has), one device and,
// for --query-compute-apps fields (apps.hpp), one process on that device.
struct ReadContext {
  const gpu::Snapshot& snapshot;
  const gpu::Device& device;
  std::size_t gpu_count = 0;   // every GPU NVML reports, not only those selected with -i
  const gpu::GpuProcess* process = nullptr;  // set for compute-apps fields only
};

// Whether a field describes the system (still readable when the GPU is lost) or the device.
enum class Scope { System, Device };

struct FieldSpec {
  std::string_view name;                 // canonical name, as nvidia-smi prints it in the header
  std::vector<std::string_view> aliases; // other spellings nvidia-smi accepts
  std::string_view unit;                 // "MiB", "%", "W", "MHz" or "" (header "name [unit]")
  Scope scope = Scope::Device;
  std::string_view read_key;             // the backend's name for the read (ReadError::what), or ""
  gpu::ValueGroups groups;               // what a snapshot must read for this field (empty: nothing)
  std::string_view description;          // one line for `tarmac query --help`
  Value (*read)(const ReadContext&) = nullptr;
};

// Every field, in nvidia-smi's --help-query-gpu order.
[[nodiscard]] std::span<const FieldSpec> all_fields();

// The field named `name` (canonical or alias, exact spelling), or nullptr.
[[nodiscard]] const FieldSpec* find_field(std::string_view name);

// A section name of nvidia-smi's field list ("memory", "clocks.max", "ecc.errors", ...), or nullptr.
// nvidia-smi accepts these while parsing, prints them in the header, then fails at the first GPU
// with "<name> : not a valid field to query." (exit 2); a group's spec has no reader.
[[nodiscard]] const FieldSpec* find_group(std::string_view name);

// Parses a --query-gpu list ("index,name,memory.used"); empty names are skipped, as nvidia-smi
// does, and section names come back as their group spec. Fails with Error::Invalid whose message
// is the first unknown name, exactly as typed.
[[nodiscard]] Result<std::vector<const FieldSpec*>> parse_field_list(std::string_view list);

// The value groups a snapshot must read for `fields` (--query-gpu or --query-compute-apps specs).
[[nodiscard]] gpu::ValueGroups value_groups(std::span<const FieldSpec* const> fields);

// Reads one field of one device, markers included: a lost device gives "[GPU is lost]" for
// device fields, a value that failed with an NVML error gives nvidia-smi's words for that error.
[[nodiscard]] Value read_field(const FieldSpec& field, const ReadContext& context);

// nvidia-smi's words for an NVML error, from the error's name ("NVML_ERROR_TIMEOUT" -> "Timeout").
[[nodiscard]] std::string nvml_error_words(std::string_view error_name);

}  // namespace tarmac::fields
