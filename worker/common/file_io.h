// Small POSIX file helpers shared by the data, model, checkpoint and report code: a read-only
// memory map, whole-file reads, a checked unbuffered writer with fsync, and durable (atomic)
// file replacement. Every failure throws IoError naming the path and the strerror text.
// Thread-safety: objects are not shared between threads; free functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace precon::worker {

namespace fs = std::filesystem;

// Where serialisers (safetensors, shards, checkpoint files) send their bytes.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const void* data, size_t n) = 0;
  void write(std::string_view s) { write(s.data(), s.size()); }
};

// Collects everything in memory (used to serialise into a byte buffer).
class VectorSink : public ByteSink {
 public:
  void write(const void* data, size_t n) override;
  using ByteSink::write;
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// A whole file mapped read-only. Empty files map to an empty span.
class MappedFile {
 public:
  explicit MappedFile(const fs::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  size_t size() const { return size_; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// What the trainer and the controller write is theirs alone (checkpoints, logs, metrics, scripts,
// tokens): files 0600, directories 0700, as the database is.
constexpr unsigned kPrivateFileMode = 0600;
constexpr unsigned kPrivateDirMode = 0700;

// A file opened for writing (created or truncated; a symbolic link there is refused). A new
// file gets `mode` (less the umask). Writes go straight to the kernel, so a failure (ENOSPC,
// EFBIG, EIO) surfaces at the write that caused it.
class FileWriter : public ByteSink {
 public:
  explicit FileWriter(const fs::path& path, unsigned mode = kPrivateFileMode);
  ~FileWriter() override;  // closes without fsync if finish() was not called
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t n) override;
  using ByteSink::write;
  // fsync, then close; both checked (NFS reports some write errors only at close).
  void finish();
  uint64_t bytes_written() const { return written_; }

 private:
  fs::path path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

std::vector<uint8_t> read_file(const fs::path& path);

// Creates `dir` and its missing parents, each new one kPrivateDirMode (less the umask); those
// that exist are left as they are. Sets `ec` (to what mkdir said) when one cannot be created.
void create_private_directories(const fs::path& dir, std::error_code& ec);

// A run directory, which another local user may try to plant a link at: its parents as
// create_private_directories makes them, then `dir` itself by mkdir, which never follows a link.
// An existing `dir` is refused when `exclusive` (ec EEXIST: the caller picks another name), and
// otherwise taken only if it is a directory, not a link, owned by this user and closed to group
// and others (ec ELOOP or EPERM when not).
void create_run_directory(const fs::path& dir, bool exclusive, std::error_code& ec);

// open(2) for a file created in a run directory: never through a symbolic link (ELOOP), never
// blocking on a FIFO, and only a regular file (ENXIO otherwise). flags must include O_CREAT's
// companions as the caller needs; O_NOFOLLOW, O_NONBLOCK and O_CLOEXEC are added. -1 and errno
// on failure; the descriptor is blocking again on success.
int open_run_file(const fs::path& path, int flags, unsigned mode);

// fsync a directory so that renames and creations inside it survive a crash.
void fsync_directory(const fs::path& dir);

// Writes `path` durably and atomically: a temp file beside it (new, with `mode`: never wider
// for a moment), fsync, rename, fsync the directory. Readers see the old file or the complete
// new one, never a torn one.
void write_file_atomic(const fs::path& path, std::span<const uint8_t> bytes, unsigned mode = kPrivateFileMode);
void write_file_atomic(const fs::path& path, std::string_view text, unsigned mode = kPrivateFileMode);
// The same with the content streamed by `produce` (no copy of it in memory).
void write_file_atomic(const fs::path& path, const std::function<void(ByteSink&)>& produce,
                       unsigned mode = kPrivateFileMode);

// "open /x/y: No such file or directory" style text for an errno value.
std::string errno_text(const char* op, const fs::path& path, int err);

}  // namespace precon::worker
