#include "worker/common/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "worker/common/error.h"

namespace precon::worker {

std::string errno_text(const char* op, const fs::path& path, int err) {
  return std::string(op) + " " + path.string() + ": " + std::strerror(err);
}

[[noreturn]] static void throw_errno(const char* op, const fs::path& path, int err) {
  throw IoError(errno_text(op, path, err), err);
}

void VectorSink::write(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  bytes_.insert(bytes_.end(), p, p + n);
}

MappedFile::MappedFile(const fs::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("open", path, errno);
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw_errno("stat", path, err);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw_errno("mmap", path, err);
    }
    data_ = p;
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

FileWriter::FileWriter(const fs::path& path, unsigned mode) : path_(path) {
  fd_ = open_run_file(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd_ < 0) throw_errno(errno == ENXIO ? "create (not a regular file)" : "create", path, errno);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::write(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::write(fd_, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw_errno("write", path_, errno);
    }
    p += k;
    n -= static_cast<size_t>(k);
    written_ += static_cast<uint64_t>(k);
  }
}

void FileWriter::finish() {
  if (::fsync(fd_) != 0) throw_errno("fsync", path_, errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw_errno("close", path_, errno);
}

std::vector<uint8_t> read_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("open", path, errno);
  std::vector<uint8_t> out;
  struct stat st{};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw_errno("read", path, err);
    }
    if (k == 0) break;
    out.insert(out.end(), buf, buf + k);
  }
  ::close(fd);
  return out;
}

void create_private_directories(const fs::path& dir, std::error_code& ec) {
  ec.clear();
  fs::path prefix;
  for (const fs::path& part : dir) {
    prefix /= part;
    if (::mkdir(prefix.c_str(), static_cast<mode_t>(kPrivateDirMode)) == 0) continue;
    const int err = errno;
    struct stat st{};
    // One that exists may say EACCES or EROFS before EEXIST: the parents of a run root often do.
    if (::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    ec = std::error_code(err == EEXIST ? ENOTDIR : err, std::generic_category());
    return;
  }
}

void create_run_directory(const fs::path& dir, bool exclusive, std::error_code& ec) {
  create_private_directories(dir.parent_path(), ec);
  if (ec) return;
  if (::mkdir(dir.c_str(), static_cast<mode_t>(kPrivateDirMode)) != 0) {
    const int err = errno;
    if (err != EEXIST || exclusive) {
      ec = std::error_code(err, std::generic_category());
      return;
    }
  }
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0) {
    ec = std::error_code(errno, std::generic_category());
  } else if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
    ec = std::error_code(S_ISLNK(st.st_mode) ? ELOOP : ENOTDIR, std::generic_category());
  } else if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    ec = std::error_code(EPERM, std::generic_category());
  }
}

int open_run_file(const fs::path& path, int flags, unsigned mode) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return -1;
  struct stat st{};
  const bool statted = ::fstat(fd, &st) == 0;
  if (!statted || !S_ISREG(st.st_mode)) {
    const int err = statted ? ENXIO : errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("open directory", dir, errno);
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    throw_errno("fsync directory", dir, err);
  }
  ::close(fd);
}

void write_file_atomic(const fs::path& path, const std::function<void(ByteSink&)>& produce, unsigned mode) {
  fs::path tmp = path;
  tmp += ".tmp-" + std::to_string(::getpid());
  // A temp file left by a crash keeps its mode through O_TRUNC: it goes first.
  ::unlink(tmp.c_str());
  try {
    FileWriter w(tmp, mode);
    produce(w);
    w.finish();
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("rename to", path, errno);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fs::path dir = path.parent_path();
  fsync_directory(dir.empty() ? fs::path(".") : dir);
}

void write_file_atomic(const fs::path& path, std::span<const uint8_t> bytes, unsigned mode) {
  write_file_atomic(path, [&](ByteSink& out) { out.write(bytes.data(), bytes.size()); }, mode);
}

void write_file_atomic(const fs::path& path, std::string_view text, unsigned mode) {
  write_file_atomic(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), mode);
}

}  // namespace precon::worker
