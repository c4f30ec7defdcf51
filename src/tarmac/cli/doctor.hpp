// `tarmac doctor`: samples the GPUs over a window, reads the environment and reports findings
// (docs/doctor.md). Exit 0 healthy, 1 warnings, 2 a critical finding, 3 could not look.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/diagnose/doctor.hpp"

namespace tarmac::cli {

void add_doctor_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// The pieces of doctor's report, declared for their unit tests.
namespace detail {

// What doctor found, and what it looked at.
struct DoctorReport {
  std::vector<diagnose::Finding> findings;
  std::vector<diagnose::GpuSummary> gpus;
  std::vector<unsigned> job_gpus;
  diagnose::Environment environment;
  std::optional<diagnose::JobScope> job;
  std::optional<unsigned> expect_gpus;
  long long window_ms = 0;
  std::size_t samples = 0;
  bool from_agent = false;  // the samples are the agent's last window_ms, not taken by doctor
  std::optional<std::string> driver_version;
  long long timestamp_unix_ms = 0;
  int exit_code = 0;
};

// What decides whether the agent's samples of a window can stand for doctor's own sampling
// (docs/doctor.md "Through the agent"). Times in ms, start times in unix seconds.
struct WindowFacts {
  long long window_ms = 0;
  long long asked_interval_ms = 0;  // --interval when given, else 0
  std::size_t samples = 0;
  long long span_ms = 0;            // newest sample's time less the oldest's
  long long max_gap_ms = 0;         // the longest time between two samples one after the other
  long long newest_unix_ms = 0;
  long long newest_age_ms = 0;      // how old the newest was when the agent answered
  long long interval_ms = 0;        // the agent's sampling interval
  long long process_interval_ms = 0;
  std::vector<long long> job_starts_unix_s;  // with --pid: the start times of the job's processes
};

struct WindowRefusal {
  std::string why;    // "" when the samples can stand
  bool warn = false;  // news for stderr (a stuck agent), not just a reason to sample here
};

[[nodiscard]] WindowRefusal window_refusal(const WindowFacts& facts);

// One evidence value with its unit, for people: "util_gpu 98 %", "mem_used 38.1 GiB".
[[nodiscard]] std::string evidence_text(const std::string& key, const diagnose::EvidenceValue& value);
// One GPU's evidence on a line, the common values first: "GPU 0: util_gpu 98 %, memory 38.1 of 40.0 GiB, ...".
[[nodiscard]] std::string evidence_line(const diagnose::GpuEvidence& evidence);

// The report for people (the findings by severity, the healthy GPUs, the counts) on machine
// `host`; every text that quotes the machine (summaries, evidence, causes) shown escaped.
[[nodiscard]] std::string doctor_text(const DoctorReport& report, const std::string& host, bool color);
// The report as `doctor --json` writes it (schema 1).
[[nodiscard]] nlohmann::json doctor_json(const DoctorReport& report);

}  // namespace detail

}  // namespace tarmac::cli
