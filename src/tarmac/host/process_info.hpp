// What tarmac knows about a process from the host side (PRODUCT.md §3, "Per process on a GPU").
#pragma once

#include <optional>
#include <string>

namespace tarmac::host {

// Whether a PID reported by NVML (always a host PID) can be seen from tarmac's PID namespace.
enum class PidVisibility {
  Visible,         // /proc/<pid> exists, so the host fields below may be filled
  NotInNamespace,  // no /proc/<pid> here: tarmac runs in another PID namespace or the process exited
};

// The container a process runs in, as its cgroup path names it.
struct ContainerRef {
  // docker, podman, containerd, cri-o, lxc; "kubernetes" when only the kubepods tree says so
  // (cgroupfs driver), so the runtime itself cannot be named.
  std::string runtime;
  std::string id;                      // 64-hex container id, or the LXC name; "" for a bare pod
  std::optional<std::string> pod_uid;  // set for every process under kubepods
};

// Host attribution of one PID; every field is optional because /proc can deny or lose any piece.
struct ProcessInfo {
  unsigned pid = 0;
  PidVisibility visibility = PidVisibility::NotInNamespace;
  std::optional<std::string> user;           // name of the effective uid, or the number as text
  std::optional<unsigned> uid;               // effective uid, as ps and top show it
  std::optional<std::string> name;           // comm (kernel-truncated to 15 characters)
  std::optional<std::string> command_line;   // argv joined with spaces; "" for kernel threads
  std::optional<long long> start_time_unix;  // seconds since the epoch
  std::optional<unsigned> parent_pid;
  std::optional<char> state;                 // R, S, D, Z, T, ...
  std::optional<ContainerRef> container;
  std::optional<std::string> slurm_job_id;
  // Set when its command line or environment could not be read in time (host/bounded_read.hpp:
  // another user can keep those reads blocked): why. command_line, and slurm_job_id unless its
  // cgroup names the job, are then unknown, not absent; every rule that reads them must refuse.
  std::optional<std::string> unread;
  // What the read of /proc/PID/stat that found it said, where a ProcessCache looked it up (each
  // lookup reads it, so a caller that wants them need not read the file again): its start time in
  // clock ticks after boot (with the pid, who it is), its CPU time so far (user + system, clock
  // ticks) and its resident size (pages).
  std::optional<unsigned long long> start_ticks;
  std::optional<unsigned long long> cpu_ticks;
  std::optional<unsigned long long> rss_pages;
};

// Where a process runs, in a few words: "pod 0123abcd", "docker 0123456789ab", "slurm 42",
// "pod deadbeef slurm 42"; "" when neither a container nor a Slurm job (status, top).
[[nodiscard]] std::string workload_label(const ProcessInfo& info);

// argv[0]'s last path component ("/usr/bin/python3 train.py --token x" -> "python3"): what a
// process runs without its arguments, which often hold tokens and paths. "" for none.
[[nodiscard]] std::string program_name(const std::optional<std::string>& command_line);

// What a well-known GPU holder is, from its command line: "Jupyter kernel" (ipykernel, Colab's),
// "Ollama server", "vLLM server", "llama.cpp server", "SGLang server", "TensorBoard"; nullopt for
// anything else. Verdicts name them: "an idle Jupyter kernel of bob holds 20.0 GiB on GPU 3" is
// what a fleet owner acts on.
[[nodiscard]] std::optional<std::string> well_known_holder(const std::optional<std::string>& command_line);

}  // namespace tarmac::host
