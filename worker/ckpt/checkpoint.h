// Checkpoint directories: RUN_DIR/checkpoints/step_00001200/ holding the caller's named
// files (model.safetensors, optimizer.safetensors, trainer.json, ...) and manifest.json,
// written last, with each file's size and CRC-32 and the step.
//
// Write protocol (crash-safe at every point): write into step_XXXXXXXX.tmp-<pid>/, fsync each
// file, write and fsync the manifest, fsync the directory, rename it to step_XXXXXXXX, fsync
// checkpoints/. A directory without a verifying manifest is never used; leftover *.tmp-*
// directories are removed by latest_good_checkpoint().
//
// Test-only fault hook: with PRECON_FAULT_CKPT_KILL_AFTER_FILES=N in the environment, the
// writer SIGKILLs its own process after N files are written (before the manifest/rename);
// PRECON_FAULT_KILL_AT=ckpt:S:N does so in the checkpoint of step S only (worker/common/fault_hook.h).
// Thread-safety: one writer per run directory; functions are otherwise reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "worker/common/file_io.h"

namespace precon::worker {

inline constexpr const char* kManifestName = "manifest.json";

// One file of a checkpoint: a plain name (no '/') and the function that streams its bytes, or a
// file another rank has already written and fsynced (a file of the optimizer state), moved in.
struct CheckpointFile {
  std::string name;
  std::function<void(ByteSink&)> write;
  fs::path adopt{};  // when set: renamed into the checkpoint (same filesystem); its CRC is read back

  static CheckpointFile from_bytes(std::string name, std::vector<uint8_t> bytes);
  static CheckpointFile from_string(std::string name, std::string text);
  static CheckpointFile adopted(std::string name, fs::path path);
};

// Where the other ranks of a job put their parts of step's checkpoint before the first rank,
// whose pid is `pid`, moves them in: checkpoints/step_XXXXXXXX.tmp-<pid>-parts (a temp dir, so
// one left by a dead job is removed like the others).
fs::path checkpoint_parts_dir(const fs::path& run_dir, int64_t step, long pid);

struct CheckpointInfo {
  int64_t step = 0;
  fs::path dir;
};

// What latest_good_checkpoint() chose and why: one warning per damaged checkpoint skipped
// and per unfinished temp directory removed.
struct CheckpointChoice {
  std::optional<CheckpointInfo> checkpoint;  // empty: no checkpoint verifies
  std::vector<std::string> warnings;
};

std::string checkpoint_dir_name(int64_t step);                // "step_00001200"
std::optional<int64_t> parse_checkpoint_dir_name(const std::string& name);  // finished dirs only
fs::path checkpoints_dir(const fs::path& run_dir);             // run_dir/checkpoints

// Writes step's checkpoint (replacing an existing one of the same step) and returns its
// directory. On a write failure (disk full, I/O error) throws CheckpointError naming the
// path and errno text; the partial temp directory is removed and older checkpoints are
// untouched. Errors thrown by a file's write callback propagate after the same cleanup.
fs::path write_checkpoint(const fs::path& run_dir, int64_t step, const std::vector<CheckpointFile>& files);

// Finished checkpoint directories (verified or not), ascending by step. Temp dirs excluded.
std::vector<CheckpointInfo> list_checkpoints(const fs::path& run_dir);

// nullopt when the manifest is present and every file in it has the recorded size and
// CRC-32; otherwise the reason, e.g. "optimizer.safetensors: CRC mismatch".
std::optional<std::string> verify_checkpoint(const fs::path& dir);

// Newest checkpoint that verifies, skipping (and reporting) damaged ones, e.g.
// "checkpoint step_00000040 is damaged (optimizer.safetensors: CRC mismatch); using
// step_00000020". Also removes leftover temp directories of writers that are not running.
// `unusable`, when given, is asked about each checkpoint that verifies (passing checksums says
// only that the files are as written): a reason skips it like a damaged one.
CheckpointChoice latest_good_checkpoint(
    const fs::path& run_dir, const std::function<std::optional<std::string>(const fs::path&)>& unusable = {});

// Which checkpoints survive: the newest `keep_last` that verify, plus the `keep_best` verifying
// ones with the best objective (as `objective` reads it from a checkpoint; nullopt = unranked;
// ties go to the earlier step).
struct RetentionPolicy {
  int keep_last = 0;  // <= 0: keep everything
  int keep_best = 0;
  bool minimize = true;
  std::function<std::optional<double>(const CheckpointInfo&)> objective;
};

// Deletes every checkpoint older than the oldest of the newest `keep_last` good ones (damaged
// or not) unless it is one of the `keep_best`; damaged ones newer than that stay for
// inspection. Deletes nothing when keep_last <= 0 or fewer than keep_last verify, so the
// newest good checkpoint always survives. Returns the deleted directories, ascending by step.
std::vector<fs::path> apply_retention(const fs::path& run_dir, const RetentionPolicy& policy);
std::vector<fs::path> apply_retention(const fs::path& run_dir, int keep_last);

// Removes step_*.tmp-<pid> directories whose writer process is gone; returns them.
std::vector<fs::path> remove_temp_checkpoints(const fs::path& run_dir);

}  // namespace precon::worker
