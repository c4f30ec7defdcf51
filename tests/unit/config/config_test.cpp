#include "tarmac/config/config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace tarmac::config {
namespace {

Result<Config> parse_text(const std::string& text, std::vector<std::string>& warnings) {
  return parse(text, "t.toml", Config{}, warnings);
}

TEST(Config, DefaultsAreTheDocumentedOnes) {
  const Config c;
  EXPECT_EQ(c.activity.busy_util_pct, 30U);
  EXPECT_EQ(c.activity.holding_after_s, 600);
  EXPECT_EQ(c.doctor.window_ms, 3000);
  EXPECT_EQ(c.doctor.interval_ms, 500);
  EXPECT_EQ(value_text(c, keys()[2]), "\"10m\"");
}

TEST(Config, ReadsEveryKind) {
  std::vector<std::string> warnings;
  auto c = parse_text(R"(
[activity]
busy_util_pct = 40
holding_after = "30m"
[doctor]
window = "6s"
interval = 0.25
thermal_c = 80
imbalance_min = "512MiB"
)",
                      warnings);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(c->activity.busy_util_pct, 40U);
  EXPECT_EQ(c->activity.holding_after_s, 1800);
  EXPECT_EQ(c->doctor.window_ms, 6000);
  EXPECT_EQ(c->doctor.interval_ms, 250);
  EXPECT_EQ(c->doctor.thermal_c, 80U);
  EXPECT_EQ(c->doctor.imbalance_min_bytes, 512ULL << 20);
  EXPECT_EQ(c->doctor.near_oom_pct, 98U);  // untouched keys keep their defaults
}

TEST(Config, UnknownKeysWarnWithTheirLine) {
  std::vector<std::string> warnings;
  auto c = parse_text("top = 2\n[doctor]\nwindow = \"1s\"\nwindwo = 3\n[nope]\nx = 1\n", warnings);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(warnings.size(), 3U);
  EXPECT_EQ(warnings[0], "t.toml:1: unknown key 'top' (ignored)");
  EXPECT_EQ(warnings[1], "t.toml:4: unknown key 'doctor.windwo' (ignored)");
  EXPECT_EQ(warnings[2], "t.toml:5: unknown section 'nope' (ignored)");
  EXPECT_EQ(c->doctor.window_ms, 1000);
}

TEST(Config, BadValuesAreErrorsWithTheirLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[activity]\nbusy_util_pct = \"high\"\n", "t.toml:2:17: activity.busy_util_pct: expected an integer percentage"},
      {"[activity]\n\nbusy_util_pct = 101\n", "t.toml:3:17: activity.busy_util_pct: 101 is out of range (1 to 100)"},
      {"[doctor]\nwindow = \"soon\"\n", "t.toml:2:10: doctor.window: expected a duration"},
      {"[doctor]\ninterval = \"10ms\"\n", "t.toml:2:12: doctor.interval: 10ms is out of range (50ms to 1m)"},
      {"[doctor]\nimbalance_min = 2048\n", "t.toml:2:17: doctor.imbalance_min: expected a size with its unit"},
      {"[doctor\n", "t.toml:1:"},
  };
  for (const auto& [text, want] : cases) {
    std::vector<std::string> warnings;
    auto c = parse_text(text, warnings);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.error().message.substr(0, want.size()), want) << c.error().message;
  }
}

TEST(Config, LaterFilesOverrideEarlierOnes) {
  std::vector<std::string> warnings;
  auto system = parse("[doctor]\nthermal_c = 80\nnear_oom_pct = 90\n", "etc.toml", Config{}, warnings);
  ASSERT_TRUE(system.ok());
  auto user = parse("[doctor]\nthermal_c = 83\n", "user.toml", *system, warnings);
  ASSERT_TRUE(user.ok());
  EXPECT_EQ(user->doctor.thermal_c, 83U);
  EXPECT_EQ(user->doctor.near_oom_pct, 90U);
}

TEST(Config, AMissingExplicitFileIsAnError) {
  auto loaded = load(std::string("/nonexistent/tarmac.toml"));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().message.find("/nonexistent/tarmac.toml: no such file"), std::string::npos);
}

TEST(Config, TheDefaultsPrintedAsTomlParseBackToTheDefaults) {
  std::string text;
  std::string_view section;
  for (const auto& k : keys()) {
    if (k.section != section) text += "[" + std::string(section = k.section) + "]\n";
    text += std::string(k.name) + " = " + value_text(Config{}, k) + "\n";
  }
  std::vector<std::string> warnings;
  auto c = parse_text(text, warnings);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(warnings.empty());
  for (const auto& k : keys()) EXPECT_EQ(value_text(*c, k), value_text(Config{}, k)) << k.name;
}

TEST(Config, ReadsAlerts) {
  std::vector<std::string> warnings;
  auto c = parse_text(R"(
[alerts]
starvation_for = "30m"
thermal_c = 80
near_oom_pct = 97
disabled = "idle, thermal"
webhook = "http://127.0.0.1:8099/slack"
command = "/usr/local/bin/page-oncall --quiet"
)",
                      warnings);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(c->alerts.starvation_for_ms, 30 * 60 * 1000);
  EXPECT_EQ(c->alerts.thermal_c, 80U);
  EXPECT_EQ(c->alerts.near_oom_pct, 97U);
  EXPECT_FALSE(c->alerts.enabled(alerts::Rule::Idle));
  EXPECT_FALSE(c->alerts.enabled(alerts::Rule::Thermal));
  EXPECT_TRUE(c->alerts.enabled(alerts::Rule::Holding));
  EXPECT_EQ(c->alerts.webhook, "http://127.0.0.1:8099/slack");
  EXPECT_EQ(c->alerts.command, "/usr/local/bin/page-oncall --quiet");
}

TEST(Config, RefusesBadAlertValues) {
  std::vector<std::string> warnings;
  auto https = parse_text("[alerts]\nwebhook = \"https://hooks.slack.com/services/X\"\n", warnings);
  ASSERT_TRUE(https.ok()) << https.error().message;
  EXPECT_EQ(https->alerts.webhook, "https://hooks.slack.com/services/X");
  auto ftp = parse_text("[alerts]\nwebhook = \"ftp://hooks.example.com/X\"\n", warnings);
  ASSERT_FALSE(ftp.ok());
  EXPECT_NE(ftp.error().message.find("t.toml:2:"), std::string::npos) << ftp.error().message;
  EXPECT_NE(ftp.error().message.find("expected http://"), std::string::npos) << ftp.error().message;
  auto rule = parse_text("[alerts]\ndisabled = \"idle,zombie\"\n", warnings);
  ASSERT_FALSE(rule.ok());
  EXPECT_NE(rule.error().message.find("'zombie' is not a rule"), std::string::npos) << rule.error().message;
  EXPECT_FALSE(parse_text("[alerts]\nwebhook = \"localhost:80\"\n", warnings).ok());
}

TEST(Config, ReadsTheAgentsReaperKeys) {
  std::vector<std::string> warnings;
  auto c = parse_text("[reaper]\nenabled = true\nnotify_tty = true\nwarn_after = \"2m\"\ninterval = \"30s\"\n", warnings);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(c->reaper.enabled);
  EXPECT_TRUE(c->reaper.notify_tty);
  EXPECT_EQ(c->reaper.warn_after_ms, 2 * 60 * 1000);
  EXPECT_EQ(c->reaper.interval_ms, 30 * 1000);
  EXPECT_FALSE(Config{}.reaper.enabled) << "the agent must not end processes unless told to";
  EXPECT_FALSE(parse_text("[reaper]\nenabled = \"yes\"\n", warnings).ok()) << "a bool is true or false";
  EXPECT_FALSE(parse_text("[reaper]\ninterval = \"5s\"\n", warnings).ok()) << "interval below 10s";
}

TEST(Config, TheReaperWarnsBeforeItEnds) {
  std::vector<std::string> warnings;
  auto late = parse_text("[reaper]\nwarn_after = \"10m\"\nidle_for = \"10m\"\n", warnings);
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.error().message.find("reaper.warn_after (10m) must be less than reaper.idle_for (10m)"),
            std::string::npos)
      << late.error().message;
  // A short idle_for alone is not refused for a warn_after nobody set: the warning comes at half of it.
  const auto short_idle = parse_text("[reaper]\nidle_for = \"3m\"\n", warnings);
  ASSERT_TRUE(short_idle.ok()) << short_idle.error().message;
  EXPECT_EQ(short_idle->reaper.warn_after_ms, 90 * 1000);
  EXPECT_TRUE(parse_text("[reaper]\nidle_for = \"3m\"\nwarn_after = \"1m\"\n", warnings).ok());
}

TEST(Config, ReadsBackfillServers) {
  std::vector<std::string> warnings;
  auto c = parse_text(R"(
[backfill.server.night]
url = "http://127.0.0.1:11434"
timeout = "90s"
retries = 5
max_parallel = 2
colour = "blue"

[backfill.server.llama-1]
url = "https://gpu7.example.com:8080"
)",
                      warnings);
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(c->backfill.servers.size(), 2U);
  const auto& night = c->backfill.servers.at("night");
  EXPECT_EQ(night.url, "http://127.0.0.1:11434");
  EXPECT_EQ(night.timeout_ms, 90 * 1000);
  EXPECT_EQ(night.retries, 5U);
  EXPECT_EQ(night.max_parallel, 2U);
  EXPECT_EQ(night.kind, backfill::ServerKind::External);
  EXPECT_EQ(c->backfill.servers.at("llama-1").max_parallel, backfill::ServerConfig{}.max_parallel);
  ASSERT_EQ(warnings.size(), 2U);
  EXPECT_EQ(warnings[1], "t.toml:7: unknown key 'backfill.server.night.colour' (ignored)");
  EXPECT_NE(warnings[0].find("t.toml:2: backfill.server.night: any local user who listens on port 11434"),
            std::string::npos)
      << warnings[0] << ": a loopback port anyone may take, and no server_user";
  warnings.clear();
  ASSERT_TRUE(parse_text("[backfill.server.a]\nurl = \"http://127.0.0.1:80\"\n", warnings).ok());
  ASSERT_TRUE(parse_text("[backfill.server.a]\nurl = \"http://[::1]:8080\"\nserver_user = \"root\"\n", warnings).ok());
  EXPECT_TRUE(warnings.empty()) << warnings.front() << ": a port below 1024, or the server's account named";
  // A later file changes one key of a server and keeps the others.
  auto later = parse("[backfill.server.night]\nretries = 0\n", "user.toml", *c, warnings);
  ASSERT_TRUE(later.ok()) << later.error().message;
  EXPECT_EQ(later->backfill.servers.at("night").retries, 0U);
  EXPECT_EQ(later->backfill.servers.at("night").url, "http://127.0.0.1:11434");
  // What is written back reads back the same.
  for (const auto& k : server_keys()) EXPECT_NE(server_value_text(night, k), "") << k.name;
  EXPECT_EQ(server_value_text(night, server_keys()[3]), "\"90s\"");
}

TEST(Config, AcceptsOllamaProtocol) {
  std::vector<std::string> warnings;
  auto c = parse_text("[backfill.server.o]\nurl = \"http://127.0.0.1:11434\"\nprotocol = \"ollama\"\n", warnings);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->backfill.servers.at("o").protocol, backfill::ServerProtocol::Ollama);
}

TEST(Config, RefusesBadBackfillServers) {
  std::vector<std::string> warnings;
  const auto refused = [&](const std::string& text, const std::string& why) {
    auto c = parse_text(text, warnings);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.error().message.find(why), std::string::npos) << c.error().message;
  };
  refused("[backfill.server.a]\ntimeout = \"1m\"\n", "t.toml:1:18: backfill.server.a: no url");
  refused("[backfill.server.a]\nurl = \"ftp://x/\"\n", "t.toml:2:7: backfill.server.a.url:");
  refused("[backfill.server.a]\nurl = \"http://u:p@x/\"\n", "credentials");
  refused("[backfill.server.a]\nurl = \"http://x/?q=1\"\n", "no query");
  refused("[backfill.server.a]\nurl = \"http://x\"\nmax_parallel = 0\n", "out of range");
  refused("[backfill.server.a]\nkind = \"managed\"\nuser = \"llm\"\n", "needs command (its argv) or preset");
  refused("[backfill.server.a]\nkind = \"managed\"\npreset = \"llama-server\"\ncommand = [\"/x\"]\nuser = \"llm\"\n",
          "needs command (its argv) or preset");
  refused("[backfill.server.a]\nkind = \"managed\"\npreset = \"tgi\"\nuser = \"llm\"\n", "backfill.server.a.preset");
  refused("[backfill.server.a]\nkind = \"managed\"\npreset = \"ollama\"\n", "needs user");
  refused("[backfill.server.a]\nkind = \"managed\"\npreset = \"ollama\"\nuser = \"root\"\n", "never runs as root");
  refused("[backfill.server.a]\nkind = \"managed\"\npreset = \"ollama\"\nuser = \"0\"\n", "never runs as root");
  refused("[backfill.server.a]\nkind = \"managed\"\npreset = \"ollama\"\nuser = \"llm\"\nurl = \"http://x\"\n",
          "has no url");
  refused("[backfill.server.a]\nkind = \"managed\"\ncommand = []\nuser = \"llm\"\n", "array of 1 to 256 strings");
  refused("[backfill.server.a]\nkind = \"managed\"\ncommand = [\"llama-server\"]\nuser = \"llm\"\n", "absolute path");
  refused("[backfill.server.a]\nkind = \"managed\"\ncommand = [\"/x\", 3]\nuser = \"llm\"\n", "must be a string");
  refused("[backfill.server.a]\nkind = \"managed\"\ncommand = \"/x -m\"\nuser = \"llm\"\n", "array of 1 to 256");
  refused("[backfill.server.a]\nkind = \"managed\"\npreset = \"ollama\"\nuser = \"llm\"\nserver_user = \"nobody\"\n",
          "no server_user");
  refused("[backfill.server.a]\nurl = \"http://x\"\nprotocol = \"grpc\"\n", "t.toml:3:12");
  refused("[backfill.server.\"a b\"]\nurl = \"http://x\"\n", "letters, digits");
  refused("[backfill.server.a]\nurl = \"http://10.1.1.1:8080\"\nserver_user = \"root\"\n", "must be a loopback one");
  refused("[backfill.server.a]\nurl = \"http://127.0.0.1:8080\"\nserver_user = \"no-such-user-x\"\n",
          "t.toml:3:15: backfill.server.a.server_user: server_user 'no-such-user-x' is no account");
  warnings.clear();
  auto stray = parse_text("[backfill]\nserver = 3\n", warnings);
  ASSERT_TRUE(stray.ok()) << stray.error().message;
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("t.toml:2: unknown key 'backfill.server'"), std::string::npos) << warnings[0];
}

TEST(Config, ReadsAManagedServer) {
  std::vector<std::string> warnings;
  auto c = parse_text("[backfill.server.llm]\nkind = \"managed\"\n"
                      "command = [\"/opt/llama-server\", \"-m\", \"{model}\", \"--port\", \"{port}\"]\n"
                      "user = \"llm\"\ngpus = 2\nready_timeout = \"45s\"\nmodels = [\"/m/a.gguf\", \"/m/b.gguf\"]\n",
                      warnings);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const auto& s = c->backfill.servers.at("llm");
  EXPECT_EQ(s.models, (std::vector<std::string>{"/m/a.gguf", "/m/b.gguf"}));
  EXPECT_EQ(s.kind, backfill::ServerKind::Managed);
  EXPECT_EQ(s.command, (std::vector<std::string>{"/opt/llama-server", "-m", "{model}", "--port", "{port}"}));
  EXPECT_EQ(s.user, "llm");
  EXPECT_EQ(s.gpus, 2U);
  EXPECT_EQ(s.ready_timeout_ms, 45000);
  EXPECT_TRUE(s.url.empty());
  EXPECT_TRUE(warnings.empty());
  // Written back as an array that TOML (and JSON) read again.
  for (const auto& k : server_keys()) {
    if (k.name == "command") {
      EXPECT_EQ(server_value_text(s, k), R"(["/opt/llama-server","-m","{model}","--port","{port}"])");
    }
  }
  // What applies to it, written back, reads back the same (an external server's own keys are not written).
  std::string text = "[backfill.server.llm]\n";
  for (const auto& k : server_keys()) {
    if (server_key_applies(s, k)) text += std::string(k.name) + " = " + server_value_text(s, k) + "\n";
  }
  EXPECT_EQ(text.find("url ="), std::string::npos) << text;
  auto again = parse_text(text, warnings);
  ASSERT_TRUE(again.ok()) << again.error().message << "\n" << text;
  EXPECT_EQ(again->backfill.servers.at("llm").command, s.command);
  EXPECT_EQ(again->backfill.servers.at("llm").models, s.models);
  EXPECT_EQ(again->backfill.servers.at("llm").ready_timeout_ms, 45000);
  auto preset = parse_text("[backfill.server.o]\nkind = \"managed\"\npreset = \"ollama\"\nuser = \"llm\"\n", warnings);
  ASSERT_TRUE(preset.ok()) << preset.error().message;
  EXPECT_EQ(preset->backfill.servers.at("o").preset, "ollama");
  ASSERT_EQ(warnings.size(), 1U) << "a managed server without models";
  EXPECT_NE(warnings[0].find("opens whatever model path a batch names"), std::string::npos) << warnings[0];
  EXPECT_FALSE(parse_text("[backfill.server.o]\nurl = \"http://x\"\nmodels = [\"--config=/x\"]\n", warnings).ok());
  EXPECT_FALSE(parse_text("[backfill.server.o]\nurl = \"http://x\"\nmodels = []\n", warnings).ok());
}

TEST(Config, AServerStreamsUnlessToldNot) {
  std::vector<std::string> warnings;
  auto plain = parse_text("[backfill.server.o]\nurl = \"http://127.0.0.1:8080\"\n", warnings);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_TRUE(plain->backfill.servers.at("o").stream);
  auto whole = parse_text("[backfill.server.o]\nurl = \"http://127.0.0.1:8080\"\nstream = false\n", warnings);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_FALSE(whole->backfill.servers.at("o").stream);
  auto bad = parse_text("[backfill.server.o]\nurl = \"http://127.0.0.1:8080\"\nstream = \"no\"\n", warnings);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("backfill.server.o.stream"), std::string::npos) << bad.error().message;
}

TEST(Config, EveryKeyIsDocumentedWithItsDefault) {
  std::ifstream doc(TARMAC_SOURCE_DIR "/docs/configuration.md");
  ASSERT_TRUE(doc.good()) << "docs/configuration.md is missing";
  std::stringstream buffer;
  buffer << doc.rdbuf();
  const std::string text = buffer.str();
  for (const auto& k : keys()) {
    // A table row: | `section.name` | default | ...
    const std::string row = "| `" + std::string(k.section) + "." + std::string(k.name) + "` | `" +
                            value_text(Config{}, k) + "` |";
    EXPECT_NE(text.find(row), std::string::npos) << "docs/configuration.md lacks the row " << row;
  }
  for (const auto& k : server_keys()) {
    const std::string row = "| `" + std::string(k.section) + "." + std::string(k.name) + "` | `" +
                            server_value_text(backfill::ServerConfig{}, k) + "` |";
    EXPECT_NE(text.find(row), std::string::npos) << "docs/configuration.md lacks the row " << row;
  }
}

}  // namespace
}  // namespace tarmac::config
