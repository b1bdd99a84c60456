// A full disk under the database: the error type, and the check that refuses new work before
// SQLite would fail in the middle of it. SQLite's own SQLITE_FULL is raised as the same type
// (sql::fail), so the API answers both with 507 and this message.
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <filesystem>

#include "orchestrator/store/store.h"

namespace precon::orch {

class DiskFullError : public StoreError {
  using StoreError::StoreError;
};

// Throws DiskFullError naming the database and what to do when the filesystem holding `db` has
// less than `bytes` plus a margin (1 MiB, room for the WAL to grow) available.
void check_disk_room(const std::filesystem::path& db, uintmax_t bytes);

}  // namespace precon::orch
