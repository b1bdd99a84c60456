// The points of a run's metrics.jsonl (the worker's source of truth, worker/report/metrics.h)
// from a step on: what a controller stores when an attempt ends, for the reports it never got
// (the worker's last batches while the controller was down or its disk full; a finished trial
// refuses late reports).
// Thread-safety: a free function without shared state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "orchestrator/store/store.h"

namespace precon::orch {

// Every numeric (or null: NaN) value of the records with step >= from_step, read from the end
// of the file back to the first record before from_step. Lines that are not records (a torn last
// line) are skipped. Empty when the file is absent.
std::vector<MetricPoint> metrics_from_step(const std::filesystem::path& metrics_jsonl, int64_t from_step);

}  // namespace precon::orch
