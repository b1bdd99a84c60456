#include "orchestrator/store/disk_space.h"

#include <sys/statvfs.h>

#include <string>

namespace precon::orch {

namespace {
constexpr uintmax_t kMargin = 1 << 20;
}

void check_disk_room(const std::filesystem::path& db, uintmax_t bytes) {
  const std::filesystem::path dir = db.has_parent_path() ? db.parent_path() : std::filesystem::path(".");
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return;  // not knowable here; SQLite reports a real failure
  const uintmax_t available = static_cast<uintmax_t>(v.f_bavail) * v.f_frsize;
  if (available >= bytes + kMargin) return;
  throw DiskFullError(db.string() + ": the disk holding the database is full (" + std::to_string(available / 1024) +
                      " KiB free, " + std::to_string((bytes + kMargin) / 1024) +
                      " KiB needed): no new experiments until space is freed; running trials go on and keep every "
                      "metric in their metrics.jsonl");
}

}  // namespace precon::orch
