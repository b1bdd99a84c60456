#include "worker/ckpt/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "worker/common/error.h"
#include "worker/common/fault_hook.h"
#include "worker/common/json_error.h"

namespace precon::worker {

namespace {

constexpr const char* kTempMarker = ".tmp-";
constexpr const char* kFaultEnv = "PRECON_FAULT_CKPT_KILL_AFTER_FILES";

// Wraps a sink, counting bytes and folding them into a CRC-32 (zlib's, as in the manifest).
class CrcSink : public ByteSink {
 public:
  explicit CrcSink(ByteSink& inner) : inner_(inner) {}
  void write(const void* data, size_t n) override {
    inner_.write(data, n);
    const auto* p = static_cast<const Bytef*>(data);
    size_ += n;
    while (n > 0) {  // zlib's length argument is 32-bit
      const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
      crc_ = ::crc32(crc_, p, chunk);
      p += chunk;
      n -= chunk;
    }
  }
  using ByteSink::write;
  uint64_t size() const { return size_; }
  uint32_t crc() const { return static_cast<uint32_t>(crc_); }

 private:
  ByteSink& inner_;
  uLong crc_ = ::crc32(0L, Z_NULL, 0);
  uint64_t size_ = 0;
};

std::string crc_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

// CRC-32 and size of a file, streamed.
std::pair<uint32_t, uint64_t> file_crc(const fs::path& path) {
  struct NullSink : ByteSink {
    void write(const void*, size_t) override {}
  } null;
  CrcSink crc(null);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(errno_text("open", path, errno), errno);
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t k = ::read(fd, buf.data(), buf.size());
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      int err = errno;
      ::close(fd);
      throw IoError(errno_text("read", path, err), err);
    }
    if (k == 0) break;
    crc.write(buf.data(), static_cast<size_t>(k));
  }
  ::close(fd);
  return {crc.crc(), crc.size()};
}

// The pid in "step_00000040.tmp-1234" (or ".tmp-1234-old"), or -1 for other names.
long temp_dir_pid(const std::string& name) {
  size_t at = name.find(kTempMarker);
  if (name.rfind("step_", 0) != 0 || at == std::string::npos) return -1;
  return std::strtol(name.c_str() + at + std::strlen(kTempMarker), nullptr, 10);
}

bool process_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

void write_one(const fs::path& path, const std::function<void(ByteSink&)>& produce, nlohmann::json* entry) {
  FileWriter file(path);
  CrcSink crc(file);
  produce(crc);
  file.finish();
  if (entry) *entry = {{"name", path.filename().string()}, {"size", crc.size()}, {"crc32", crc_hex(crc.crc())}};
}

void check_names(const std::vector<CheckpointFile>& files) {
  std::set<std::string> seen;
  for (const CheckpointFile& f : files) {
    if (f.name.empty() || f.name == "." || f.name == ".." || f.name.find('/') != std::string::npos ||
        f.name == kManifestName || !seen.insert(f.name).second || (!f.write && f.adopt.empty())) {
      throw CheckpointError("checkpoint file name \"" + f.name +
                            "\" is empty, a path, reserved (manifest.json), repeated or has no writer");
    }
  }
}

int fault_kill_after() {
  const char* v = std::getenv(kFaultEnv);
  return v ? std::atoi(v) : 0;
}

}  // namespace

CheckpointFile CheckpointFile::from_bytes(std::string name, std::vector<uint8_t> bytes) {
  auto data = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  return {std::move(name), [data](ByteSink& out) { out.write(data->data(), data->size()); }};
}

CheckpointFile CheckpointFile::adopted(std::string name, fs::path path) {
  CheckpointFile f;
  f.name = std::move(name);
  f.adopt = std::move(path);
  return f;
}

fs::path checkpoint_parts_dir(const fs::path& run_dir, int64_t step, long pid) {
  return checkpoints_dir(run_dir) / (checkpoint_dir_name(step) + kTempMarker + std::to_string(pid) + "-parts");
}

CheckpointFile CheckpointFile::from_string(std::string name, std::string text) {
  auto data = std::make_shared<std::string>(std::move(text));
  return {std::move(name), [data](ByteSink& out) { out.write(*data); }};
}

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> parse_checkpoint_dir_name(const std::string& name) {
  if (name.size() < 13 || name.rfind("step_", 0) != 0) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

fs::path checkpoints_dir(const fs::path& run_dir) { return run_dir / "checkpoints"; }

fs::path write_checkpoint(const fs::path& run_dir, int64_t step, const std::vector<CheckpointFile>& files) {
  if (step < 0) throw CheckpointError("checkpoint step must be non-negative, got " + std::to_string(step));
  check_names(files);
  const fs::path root = checkpoints_dir(run_dir);
  const std::string name = checkpoint_dir_name(step);
  const fs::path final_dir = root / name;
  const fs::path tmp = root / (name + kTempMarker + std::to_string(::getpid()));
  int kill_after = fault_kill_after();
  if (const FaultPoint f = fault_point("ckpt"); f.step == step) kill_after = static_cast<int>(f.count);
  std::error_code ec;
  try {
    if (!fs::exists(root)) {
      fs::create_directories(root, ec);
      if (ec) throw IoError(errno_text("create directory", root, ec.value()), ec.value());
      fsync_directory(run_dir);
    }
    fs::remove_all(tmp, ec);
    if (!fs::create_directory(tmp, ec) || ec) throw IoError(errno_text("create directory", tmp, ec.value()), ec.value());

    nlohmann::json entries = nlohmann::json::array();
    int written = 0;
    for (const CheckpointFile& f : files) {
      nlohmann::json entry;
      if (!f.adopt.empty()) {
        if (::rename(f.adopt.c_str(), (tmp / f.name).c_str()) != 0) throw IoError(errno_text("rename", f.adopt, errno), errno);
        const auto [crc, size] = file_crc(tmp / f.name);
        entry = {{"name", f.name}, {"size", size}, {"crc32", crc_hex(crc)}};
      } else {
        write_one(tmp / f.name, f.write, &entry);
      }
      entries.push_back(std::move(entry));
      if (++written == kill_after) ::raise(SIGKILL);
    }
    nlohmann::json manifest = {{"format", "precon-checkpoint"}, {"version", 1}, {"step", step}, {"files", entries}};
    write_one(tmp / kManifestName, [&](ByteSink& out) { out.write(manifest.dump(2) + "\n"); }, nullptr);
    fsync_directory(tmp);

    // A same-step checkpoint (a rerun after resume) moves aside under a temp name, so a
    // crash here leaves either the old or the new one plus a temp dir that gets cleaned.
    fs::path old;
    if (fs::exists(final_dir)) {
      old = root / (name + kTempMarker + std::to_string(::getpid()) + "-old");
      fs::remove_all(old, ec);
      if (::rename(final_dir.c_str(), old.c_str()) != 0) throw IoError(errno_text("rename", final_dir, errno), errno);
    }
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) throw IoError(errno_text("rename to", final_dir, errno), errno);
    fsync_directory(root);
    if (!old.empty()) fs::remove_all(old, ec);
  } catch (const IoError& e) {
    fs::remove_all(tmp, ec);
    std::string hint = e.sys_errno() == ENOSPC ? "; free disk space or lower train.keep_checkpoints" : "";
    throw CheckpointError("could not write checkpoint " + name + " under " + root.string() + ": " + e.what() + hint +
                              " (earlier checkpoints are intact)",
                          e.sys_errno());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return final_dir;
}

std::vector<CheckpointInfo> list_checkpoints(const fs::path& run_dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(checkpoints_dir(run_dir), ec)) {
    if (!e.is_directory()) continue;
    if (std::optional<int64_t> step = parse_checkpoint_dir_name(e.path().filename().string())) {
      out.push_back({*step, e.path()});
    }
  }
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  return out;
}

std::optional<std::string> verify_checkpoint(const fs::path& dir) {
  const fs::path manifest_path = dir / kManifestName;
  if (!fs::exists(manifest_path)) return std::string("manifest.json missing (the write did not finish)");
  nlohmann::json manifest;
  try {
    std::vector<uint8_t> text = read_file(manifest_path);
    manifest = nlohmann::json::parse(text.begin(), text.end());
    if (!manifest.at("files").is_array()) return std::string("manifest.json: \"files\" is not a list");
    // Integers are checked for what they are before they are read: converting a float such as
    // 5e112 to an integer is undefined behaviour, not an exception.
    if (!manifest.at("step").is_number_integer()) return "manifest.json: step " + manifest.at("step").dump() + " is not an integer";
    std::optional<int64_t> dir_step = parse_checkpoint_dir_name(dir.filename().string());
    if (dir_step && manifest.at("step").get<int64_t>() != *dir_step) {
      return "manifest.json: step " + manifest.at("step").dump() + " does not match the directory name";
    }
    for (const nlohmann::json& f : manifest["files"]) {
      const std::string name = f.at("name").get<std::string>();
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        return "manifest.json: bad file name \"" + name + "\"";
      }
      const fs::path p = dir / name;
      std::error_code ec;
      const uint64_t size = fs::file_size(p, ec);
      if (ec) return name + ": missing";
      if (!f.at("size").is_number_unsigned())
        return name + ": the manifest's size " + f.at("size").dump() + " is not a byte count";
      const uint64_t want = f.at("size").get<uint64_t>();
      if (size != want) {
        return name + ": size " + std::to_string(size) + " bytes, manifest says " + std::to_string(want) +
               (size < want ? " (truncated)" : "");
      }
      if (crc_hex(file_crc(p).first) != f.at("crc32").get<std::string>()) return name + ": CRC mismatch";
    }
  } catch (const nlohmann::json::exception& e) {
    return "manifest.json is malformed (" + json_error_text(e) + ")";
  } catch (const IoError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

std::vector<fs::path> remove_temp_checkpoints(const fs::path& run_dir) {
  std::vector<fs::path> removed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(checkpoints_dir(run_dir), ec)) {
    const long pid = temp_dir_pid(e.path().filename().string());
    if (pid < 0 || (pid != ::getpid() && process_alive(pid))) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) removed.push_back(e.path());
  }
  return removed;
}

CheckpointChoice latest_good_checkpoint(const fs::path& run_dir,
                                        const std::function<std::optional<std::string>(const fs::path&)>& unusable) {
  CheckpointChoice choice;
  for (const fs::path& p : remove_temp_checkpoints(run_dir)) {
    choice.warnings.push_back("removed unfinished checkpoint " + p.filename().string() +
                              " (its writer was interrupted)");
  }
  std::vector<CheckpointInfo> all = list_checkpoints(run_dir);
  std::vector<std::string> damaged;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (std::optional<std::string> reason = verify_checkpoint(it->dir)) {
      damaged.push_back("checkpoint " + it->dir.filename().string() + " is damaged (" + *reason + ")");
      continue;
    }
    if (std::optional<std::string> reason = unusable ? unusable(it->dir) : std::nullopt) {
      damaged.push_back("checkpoint " + it->dir.filename().string() + " cannot be resumed (" + *reason + ")");
      continue;
    }
    choice.checkpoint = *it;
    break;
  }
  const std::string outcome = choice.checkpoint ? "; using " + choice.checkpoint->dir.filename().string()
                                                : "; no older checkpoint verifies";
  for (std::string& d : damaged) choice.warnings.push_back(d + outcome);
  return choice;
}

std::vector<fs::path> apply_retention(const fs::path& run_dir, const RetentionPolicy& policy) {
  std::vector<fs::path> deleted;
  if (policy.keep_last <= 0) return deleted;
  std::vector<CheckpointInfo> all = list_checkpoints(run_dir);
  std::vector<bool> good(all.size());
  for (size_t i = 0; i < all.size(); ++i) good[i] = !verify_checkpoint(all[i].dir);
  int newest_good = 0;
  size_t cut = 0;  // checkpoints [0, cut) go unless they are among the best
  for (size_t i = all.size(); i-- > 0;) {
    if (good[i] && ++newest_good == policy.keep_last) {
      cut = i;
      break;
    }
  }
  std::set<size_t> best;
  if (policy.keep_best > 0 && policy.objective) {
    std::vector<std::pair<double, size_t>> ranked;  // (objective, index): ascending index on ties
    for (size_t i = 0; i < all.size(); ++i) {
      if (!good[i]) continue;
      std::optional<double> v = policy.objective(all[i]);
      if (v && std::isfinite(*v)) ranked.emplace_back(policy.minimize ? *v : -*v, i);
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t r = 0; r < ranked.size() && r < static_cast<size_t>(policy.keep_best); ++r) best.insert(ranked[r].second);
  }
  for (size_t i = 0; i < cut; ++i) {
    if (best.count(i)) continue;
    std::error_code ec;
    fs::remove_all(all[i].dir, ec);
    if (ec) throw CheckpointError(errno_text("remove old checkpoint", all[i].dir, ec.value()), ec.value());
    deleted.push_back(all[i].dir);
  }
  return deleted;
}

std::vector<fs::path> apply_retention(const fs::path& run_dir, int keep_last) {
  return apply_retention(run_dir, RetentionPolicy{keep_last, 0, true, nullptr});
}

}  // namespace precon::worker
