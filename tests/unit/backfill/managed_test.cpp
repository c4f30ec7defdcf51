// A managed server's command and account (backfill/managed.hpp): {port} and {model} replaced in
// every word, the presets' commands and environments, a program that is not found, and root refused.
#include "tarmac/backfill/managed.hpp"

#include "tarmac/backfill/external.hpp"

#include <gtest/gtest.h>

namespace tarmac::backfill {
namespace {

ServerConfig managed(std::vector<std::string> command, std::string preset = "") {
  ServerConfig s;
  s.kind = ServerKind::Managed;
  s.command = std::move(command);
  s.preset = std::move(preset);
  s.user = "llm";
  return s;
}

std::optional<std::string> in_opt_bin(const std::string& name) { return "/opt/bin/" + name; }
std::optional<std::string> nowhere(const std::string&) { return std::nullopt; }

// "{modelx}" is no placeholder: left as it is.
TEST(ManagedCommand, ReplacesPortAndModelInEveryWord) {
  auto c = managed_command(managed({"/srv/run", "--port={port}", "-m", "{model}", "{port}{port}", "{modelx}"}), 8123,
                           "/models/a b.gguf", nowhere);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->path, "/srv/run");
  EXPECT_EQ(c->argv, (std::vector<std::string>{"/srv/run", "--port=8123", "-m", "/models/a b.gguf", "81238123",
                                               "{modelx}"}));
  EXPECT_TRUE(c->env.empty());
  EXPECT_EQ(c->health_path, "/health");
}

TEST(ManagedCommand, AModelNamingAPlaceholderIsNotReplacedAgain) {
  auto c = managed_command(managed({"/srv/run", "{model}"}), 9, "{port}", nowhere);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->argv[1], "{port}");
}

TEST(ManagedCommand, Presets) {
  auto llama = managed_command(managed({}, "llama-server"), 7000, "m.gguf", in_opt_bin);
  ASSERT_TRUE(llama.ok()) << llama.error().message;
  EXPECT_EQ(llama->argv, (std::vector<std::string>{"/opt/bin/llama-server", "-m", "m.gguf", "--port", "7000", "--host",
                                                   "127.0.0.1"}));
  EXPECT_EQ(llama->health_path, "/health");

  ServerConfig o = managed({}, "ollama");
  o.max_parallel = 3;
  auto ollama = managed_command(o, 7001, "llama3", in_opt_bin);
  ASSERT_TRUE(ollama.ok()) << ollama.error().message;
  EXPECT_EQ(ollama->argv, (std::vector<std::string>{"/opt/bin/ollama", "serve"}));
  EXPECT_EQ(ollama->env, (std::vector<std::string>{"OLLAMA_HOST=127.0.0.1:7001", "OLLAMA_KEEP_ALIVE=24h",
                                                   "OLLAMA_NUM_PARALLEL=3", "OLLAMA_VULKAN=0"}));
  EXPECT_EQ(ollama->health_path, "/");

  ServerConfig v = managed({}, "vllm");
  v.binary = "/venv/bin/vllm";
  auto vllm = managed_command(v, 7002, "Qwen/Qwen2.5-0.5B", nowhere);
  ASSERT_TRUE(vllm.ok()) << vllm.error().message;
  EXPECT_EQ(vllm->argv, (std::vector<std::string>{"/venv/bin/vllm", "serve", "Qwen/Qwen2.5-0.5B", "--port", "7002",
                                                  "--host", "127.0.0.1"}));
}

TEST(ManagedCommand, RefusesWhatCannotRun) {
  auto unknown = managed_command(managed({}, "tgi"), 1, "m", in_opt_bin);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("unknown preset 'tgi'"), std::string::npos) << unknown.error().message;
  auto missing = managed_command(managed({}, "ollama"), 1, "m", nowhere);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("ollama is not on the agent's PATH: set binary"), std::string::npos);
  auto relative = managed_command(managed({"{model}"}), 1, "m", nowhere);
  ASSERT_FALSE(relative.ok());
  EXPECT_NE(relative.error().message.find("not an absolute path"), std::string::npos);
}

TEST(ServerAccount, RefusesRootAndUnknownAccounts) {
  auto root = server_account("root");
  ASSERT_FALSE(root.ok());
  EXPECT_NE(root.error().message.find("never as root"), std::string::npos) << root.error().message;
  auto none = server_account("tarmac-no-such-user");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("no account 'tarmac-no-such-user'"), std::string::npos);
  auto nobody = server_account("nobody");
  if (nobody.ok()) EXPECT_NE(nobody->uid, 0U);
}

TEST(FreeLoopbackPort, IsAPort) {
  auto port = free_loopback_port();
  ASSERT_TRUE(port.ok()) << port.error().message;
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
}

// An external server yields only where tarmac can find its processes and unload it.
TEST(ExternalYield, OnlyAnOllamaOnThisMachinesLoopbackRunByANamedAccountYields) {
  ServerConfig s;
  s.protocol = ServerProtocol::Ollama;
  s.url = "http://127.0.0.1:11434";
  s.server_user = "root";
  auto target = yieldable(s);
  ASSERT_TRUE(target.ok()) << target.error().message;
  EXPECT_EQ(target->port, 11434u);
  EXPECT_EQ(target->uid, 0u);
  s.server_user = "";
  ASSERT_FALSE(yieldable(s).ok());
  EXPECT_NE(yieldable(s).error().message.find("server_user"), std::string::npos);
  s.server_user = "no-such-account-here";
  EXPECT_FALSE(yieldable(s).ok());
  s.server_user = "root";
  s.url = "http://gpu-7.example:11434";
  ASSERT_FALSE(yieldable(s).ok());
  EXPECT_NE(yieldable(s).error().message.find("not this machine's loopback"), std::string::npos);
  s.url = "http://127.0.0.1:8080";
  s.protocol = ServerProtocol::OpenAi;  // llama-server, vLLM: no unload
  ASSERT_FALSE(yieldable(s).ok());
  EXPECT_NE(yieldable(s).error().message.find("no unload"), std::string::npos);
}

}  // namespace
}  // namespace tarmac::backfill
