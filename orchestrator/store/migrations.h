// The store's schema, as an ordered list of migrations. The version lives in SQLite's
// `PRAGMA user_version`; `PRAGMA application_id` marks the file as a precon database.
#pragma once

#include "orchestrator/store/sqlite.h"

namespace precon::orch::store_schema {

constexpr int kApplicationId = 0x50524543;  // "PREC"

// The version a fresh database is created at (the number of migrations).
int current_version();

// Sets the connection's pragmas (WAL, synchronous, foreign keys) and applies the missing
// migrations in order, one transaction each. Returns the version now in the file. Throws
// StoreError naming the file for a database from a newer precon or another application.
int open_and_migrate(sql::Database& db);

}  // namespace precon::orch::store_schema
