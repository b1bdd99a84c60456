// Pages of an experiment's trials for the API's long lists, in sweep order: one range of the
// trials' (experiment_id, idx) index per page, so that a page costs its own rows whatever the
// experiment's size. Thread-safety: any thread (each call reads on a connection of its own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "orchestrator/store/store.h"

namespace precon::orch {

struct TrialPage {
  std::vector<TrialRow> rows;  // by index
  int64_t next_cursor = 0;     // where the next page starts; 0 when this is the last page
};

// The experiment's trials whose index (TrialRow::index) is at least first_index, at most limit of
// them; next_cursor is the index after the last row when more follow.
TrialPage trial_page(const Store& store, int64_t experiment_id, int64_t first_index, size_t limit);

}  // namespace precon::orch
