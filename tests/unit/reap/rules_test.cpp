#include "tarmac/reap/rules.hpp"

#include <gtest/gtest.h>

namespace tarmac::reap {
namespace {

host::ProcessInfo process(const std::string& name, const std::string& command_line, const std::string& user = "alice") {
  host::ProcessInfo p;
  p.name = name;
  p.command_line = command_line;
  p.user = user;
  return p;
}

TEST(Rules, TheBuiltInAllowList) {
  const ReaperConfig c;
  for (const auto& [name, command] : std::vector<std::pair<std::string, std::string>>{
           {"nvidia-persiste", "/usr/bin/nvidia-persistenced"},
           {"nv-fabricmanage", "/usr/bin/nv-fabricmanager -c /etc/fm.cfg"},
           {"nvidia-cuda-mps", "nvidia-cuda-mps-server"},
           {"nv-hostengine", "/usr/bin/nv-hostengine -n"},
           {"Xorg", "/usr/lib/xorg/Xorg :0"},
           {"gnome-shell", "/usr/bin/gnome-shell"},
           {"nvidia-smi", "nvidia-smi -l 1"},
           {"tarmac", "/usr/bin/tarmac agent"}}) {
    EXPECT_TRUE(protected_by(process(name, command), c)) << name;
  }
  EXPECT_FALSE(protected_by(process("python3", "python3 train.py"), c));
  // A name is not a path: "evil/nvidia-smi" is only a program called nvidia-smi, which is allowed,
  // but a script that merely mentions it is not.
  EXPECT_FALSE(protected_by(process("python3", "python3 run_nvidia-smi_wrapper.py"), c));
}

TEST(Rules, ConfiguredUsersCommandsAndContainers) {
  ReaperConfig c;
  c.allow_users = {"svc-infer"};
  c.allow_commands = {"triton*"};
  c.allow_containers = {"pod-1234"};
  EXPECT_TRUE(protected_by(process("python3", "python3 serve.py", "svc-infer"), c));
  EXPECT_TRUE(protected_by(process("tritonserver", "/opt/tritonserver --model-repo /m"), c));
  auto pod = process("python3", "python3 x.py");
  pod.container = host::ContainerRef{"kubernetes", "", std::string("pod-1234")};
  EXPECT_TRUE(protected_by(pod, c));
  pod.container->pod_uid = "pod-9";
  EXPECT_FALSE(protected_by(pod, c));
  // An empty entry protects nothing.
  c.allow_containers = {""};
  pod.container = host::ContainerRef{"docker", "abc", std::nullopt};
  EXPECT_FALSE(protected_by(pod, c));
}

// A process whose command line could not be read in time (a user keeps its memory map locked):
// "no match" would let an allow-listed program through, so unknown refuses. Its name (from stat,
// always read) still names the rule when it matches.
TEST(Rules, AnUnknownCommandLineIsNeverNoMatch) {
  ReaperConfig c;
  c.allow_commands = {"triton*"};
  auto blocked = process("python3", "");
  blocked.command_line.reset();
  blocked.unread = "reading /proc/42/cmdline did not finish within 250 ms";
  const auto why = protected_by(blocked, c);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("/proc/42/cmdline"), std::string::npos) << *why;
  blocked.name = "nvidia-smi";
  EXPECT_EQ(protected_by(blocked, c), "built-in allow-list (nvidia-smi)");
  // A command line that is absent but known to be (a kernel thread's, an ended process's) is not unknown.
  auto absent = process("python3", "");
  absent.command_line.reset();
  EXPECT_FALSE(protected_by(absent, c));
}

TEST(Rules, Lists) {
  EXPECT_EQ(parse_list(" a, b,,c "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(list_text({"a", "b"}), "a,b");
  EXPECT_TRUE(parse_list("").empty());
}

}  // namespace
}  // namespace tarmac::reap
