#include "orchestrator/store/store_pages.h"

#include "orchestrator/store/sqlite.h"

namespace precon::orch {

TrialPage trial_page(const Store& store, int64_t experiment_id, int64_t first_index, size_t limit) {
  TrialPage page;
  std::vector<int64_t> ids;
  int64_t last_index = -1;
  bool more = false;
  {
    sql::Database db(store.path(), true);
    auto s = db.cached("SELECT id, idx FROM trials WHERE experiment_id = ? AND idx >= ? ORDER BY idx LIMIT ?");
    s->bind_all(experiment_id, first_index, static_cast<int64_t>(limit) + 1);
    while (s->step()) {
      if (ids.size() == limit) {
        more = true;
        break;
      }
      ids.push_back(s->i64(0));
      last_index = s->i64(1);
    }
  }
  for (int64_t id : ids)
    if (std::optional<TrialRow> t = store.trial(id)) page.rows.push_back(std::move(*t));
  if (more) page.next_cursor = last_index + 1;
  return page;
}

}  // namespace precon::orch
