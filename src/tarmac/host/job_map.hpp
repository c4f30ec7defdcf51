// The HPC job mapping directory that dcgm-exporter reads (--hpc-job-mapping-dir) and `tarmac slurm
// prolog`/`epilog` write (docs/slurm.md): one file per GPU, named by its index, holding the ids of
// the jobs that use it, one per line. Both tools can share one directory.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::host {

// GPU index -> the job ids its file lists, in file order.
using JobMap = std::map<unsigned, std::vector<std::string>>;

// What the prolog knew of a job that the mapping's format has no room for: its user and partition,
// kept in `.job-<ID>` beside the GPU files (`user=NAME` and `partition=NAME` lines), so that the
// agent can say whose a job was after Slurm has forgotten it.
struct JobInfo {
  std::string user;
  std::string partition;
};
using JobInfos = std::map<std::string, JobInfo>;  // by job id

// Whether `id` can be a job id in the map: 1 to 64 of [0-9A-Za-z_.-], not starting with '.'.
[[nodiscard]] bool valid_job_id(std::string_view id);

// Reads the directory: files whose names are GPU indices, lines that are valid job ids (at most 64
// per GPU, 64 KiB per file); anything else in it is ignored. A missing directory is an empty map,
// and so is one that is not root's (or this user's) or that others can write.
// Files are opened relative to the directory without following links or blocking.
[[nodiscard]] JobMap read_job_map(const std::string& dir);

// The `.job-<ID>` files of the directory (at most 4096 names read; fields that are not plain names
// of at most 64 bytes, [0-9A-Za-z_.@-], are left empty).
[[nodiscard]] JobInfos read_job_infos(const std::string& dir);

// Adds `job` to the files of `gpus` (or removes it from them), and writes its `.job-<ID>` file with
// `info` when adding (when `info` is given), removes it when removing, under an exclusive flock of
// `<dir>.lock` (0600: no one else can hold it) waited for at most 5 s, each file replaced by rename
// so a reader sees a whole one; a file left empty is removed. The path is opened from / one
// directory at a time without following links, each directory root's or this user's and writable
// by no one else (but sticky ones on the way, as /tmp); missing ones are created 0755. Fails
// naming the directory and why.
enum class JobMapChange { Add, Remove };
[[nodiscard]] Result<void> change_job_map(const std::string& dir, const std::vector<unsigned>& gpus,
                                          const std::string& job, JobMapChange change,
                                          const JobInfo* info = nullptr);

}  // namespace tarmac::host
