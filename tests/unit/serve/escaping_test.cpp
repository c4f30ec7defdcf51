// Text from other people's processes on /metrics and the JSON API: a command line is any bytes
// but NUL (not necessarily UTF-8), and neither sink may break on it (docs/security.md).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "tarmac/serve/api.hpp"
#include "tarmac/serve/metrics.hpp"

namespace tarmac::serve {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// A process whose command line holds an invalid byte, a quote, a backslash, a newline and an
// escape sequence, with a multi-byte character exactly where the 128-byte label cut falls.
LiveView hostile_view() {
  gpu::GpuProcess p;
  p.pid = 4242;
  p.used_mem_bytes = 1 << 30;
  p.host.user = "mal\xFFlory";
  p.host.command_line = "python3 \xFF\xFE \"quoted\" back\\slash new\nline \x1b]0;owned\x07 " + std::string(67, 'a') +
                        "\xC3\xA9\xC3\xA9\xC3\xA9 tail";
  p.host.slurm_job_id = "job\xC3";
  gpu::Device d;
  d.id.index = 0;
  d.id.uuid = "GPU-0";
  d.processes.push_back(p);
  LiveView v;
  v.ts_ms = 1000;
  v.snapshot.devices.push_back(d);
  return v;
}

bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();  // nlohmann's strict dump throws on invalid UTF-8
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

TEST(MetricsEscaping, LabelsAreValidUtf8CutAtACharacterAndEscaped) {
  const std::string text = render_metrics(hostile_view(), {.hostname = "node1"});
  EXPECT_TRUE(valid_utf8(text));
  std::istringstream in(text);
  std::string info;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("tarmac_process_info{")) info = line;
  }
  ASSERT_FALSE(info.empty()) << text;
  EXPECT_NE(info.find("user=\"mal" + kFffd + "lory\""), std::string::npos) << info;
  EXPECT_NE(info.find("slurm_job=\"job" + kFffd + "\""), std::string::npos) << info;
  EXPECT_NE(info.find("python3 " + kFffd + kFffd + " \\\"quoted\\\" back\\\\slash new\\nline "), std::string::npos)
      << info;
  // 128 bytes at most before escaping: the cut falls inside the é's and backs off to a boundary.
  const auto command = info.find("command=\"");
  ASSERT_NE(command, std::string::npos);
  EXPECT_NE(info.find("a\xC3\xA9...\""), std::string::npos) << info;
  EXPECT_EQ(info.find("tail"), std::string::npos);
}

TEST(ApiEscaping, ProcessesJsonIsValidWithInvalidBytesReplaced) {
  std::string text;
  ASSERT_NO_THROW(text = processes_json(hostile_view()));  // was nlohmann type_error 316: a 500
  const auto j = nlohmann::json::parse(text);
  const auto& p = j.at("processes").at(0);
  EXPECT_EQ(p.at("user"), "mal" + kFffd + "lory");
  EXPECT_TRUE(p.at("command").get<std::string>().starts_with("python3 " + kFffd + kFffd + " \"quoted\""));
  EXPECT_NE(p.at("command").get<std::string>().find("\x1b]0;owned\x07"), std::string::npos);  // JSON escapes it
  EXPECT_EQ(p.at("job"), "job" + kFffd);
}

TEST(ApiEscaping, GpusJsonSurvivesInvalidNamesAndAlerts) {
  LiveView v = hostile_view();
  v.snapshot.devices[0].id.name = "GPU\xFF";
  std::string text;
  ASSERT_NO_THROW(text = gpus_json(v, "host\xFF", {{.rule = "holding", .severity = "warning", .summary = "by \xFE"}}));
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("gpus").at(0).at("name"), "GPU" + kFffd);
  EXPECT_EQ(j.at("alerts").at(0).at("summary"), "by " + kFffd);
}

}  // namespace
}  // namespace tarmac::serve
