#include "tarmac/host/process_info.hpp"

#include <algorithm>
#include <string_view>
#include <vector>

namespace tarmac::host {

std::string workload_label(const ProcessInfo& info) {
  std::string out;
  if (info.container) {
    if (info.container->pod_uid) {
      out = "pod " + info.container->pod_uid->substr(0, 8);
    } else {
      out = info.container->runtime + " " + info.container->id.substr(0, 12);
    }
  }
  if (info.slurm_job_id) out += (out.empty() ? "" : " ") + ("slurm " + *info.slurm_job_id);
  return out;
}

std::string program_name(const std::optional<std::string>& command_line) {
  if (!command_line || command_line->empty()) return {};
  const std::string_view argv0 = std::string_view(*command_line).substr(0, command_line->find(' '));
  const std::size_t slash = argv0.rfind('/');
  return std::string(slash == std::string_view::npos ? argv0 : argv0.substr(slash + 1));
}

std::optional<std::string> well_known_holder(const std::optional<std::string>& command_line) {
  if (!command_line || command_line->empty()) return std::nullopt;
  std::vector<std::string_view> words;
  for (std::string_view rest = *command_line; !rest.empty();) {
    const auto space = rest.find(' ');
    if (space != 0) words.push_back(rest.substr(0, space));
    if (space == std::string_view::npos) break;
    rest.remove_prefix(space + 1);
  }
  const std::string program = program_name(command_line);
  const auto has = [&words](std::string_view needle) {
    return std::any_of(words.begin(), words.end(), [needle](std::string_view w) { return w.find(needle) != std::string_view::npos; });
  };
  // A module run with python -m MODULE: the word after -m.
  const auto module = [&words]() -> std::string_view {
    for (std::size_t i = 0; i + 1 < words.size(); ++i) {
      if (words[i] == "-m") return words[i + 1];
    }
    return {};
  };
  const std::string_view mod = module();
  // A Python entry point script: "/usr/bin/python3 /usr/local/bin/tensorboard --logdir runs".
  std::string_view script;
  if (program.starts_with("python") && words.size() > 1 && !words[1].starts_with("-")) {
    script = words[1].substr(words[1].rfind('/') == std::string_view::npos ? 0 : words[1].rfind('/') + 1);
  }
  const auto runs = [&program, script](std::string_view name) { return program == name || script == name; };
  if (has("ipykernel_launcher") || mod == "ipykernel" || has("colab_kernel_launcher") || program == "jupyter-kernel") {
    return "Jupyter kernel";
  }
  if (program == "ollama") return "Ollama server";
  if (runs("vllm") || mod.starts_with("vllm.entrypoints")) return "vLLM server";
  if (program == "llama-server") return "llama.cpp server";
  if (mod.starts_with("sglang.launch_server")) return "SGLang server";
  if (runs("tensorboard") || mod == "tensorboard" || mod.starts_with("tensorboard.")) return "TensorBoard";
  return std::nullopt;
}

}  // namespace tarmac::host
