// Experiments, trials, attempts, checkpoints and events; the connections. Metric series are in
// store_metrics.cpp.
#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <utility>

#include "orchestrator/store/migrations.h"
#include "orchestrator/store/store_impl.h"

namespace precon::orch {

namespace {

// A worker's report waits this long for the database before it is answered 503 (WriteWait::kBrief).
constexpr auto kBriefWait = std::chrono::seconds(1);

constexpr std::array kTrialStates{"pending", "running", "completed", "failed", "cancelled", "pruned"};
constexpr std::array kExperimentStates{"running", "completed", "cancelled"};
constexpr std::array kAttemptStates{"open", "succeeded", "failed", "requeue", "killed", "lost", "stopped"};

template <class E, size_t N>
E parse_state(const std::array<const char*, N>& names, const std::string& s, const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<E>(i);
  throw StoreError(std::string("unknown ") + what + " state '" + s + "' in the database");
}

constexpr const char* kExperimentCols =
    "id, name, description, recipe_path, recipe_text, overrides_json, state, objective_metric, "
    "objective_mode, max_concurrent, max_attempts, early_stop_json, run_root, created_at, ended_at";
constexpr const char* kTrialCols =
    "id, experiment_id, idx, params_json, config_toml, state, reason, run_dir, token_hash, attempts, "
    "last_step, created_at, started_at, ended_at";
constexpr const char* kAttemptCols =
    "id, trial_id, number, executor, external_id, nodes, state, exit_code, detail, started_at, ended_at";
constexpr const char* kCheckpointCols = "id, trial_id, step, path, objective, created_at, deleted_at";
constexpr const char* kEventCols = "id, time, experiment_id, trial_id, kind, message, data_json";

std::string select(const char* cols, const char* rest) {
  return std::string("SELECT ") + cols + " " + rest;
}

ExperimentRow read_experiment(const sql::Statement& s) {
  ExperimentRow r;
  r.id = s.i64(0);
  r.name = s.text(1);
  r.description = s.text(2);
  r.recipe_path = s.text(3);
  r.recipe_text = s.text(4);
  r.overrides_json = s.text(5);
  r.state = parse_state<ExperimentState>(kExperimentStates, s.text(6), "experiment");
  r.objective_metric = s.text(7);
  r.objective_mode = s.text(8);
  r.max_concurrent = s.i64(9);
  r.max_attempts = s.i64(10);
  r.early_stop_json = s.text(11);
  r.run_root = s.text(12);
  r.created_at = s.f64(13);
  r.ended_at = s.f64(14);
  return r;
}

TrialRow read_trial(const sql::Statement& s) {
  TrialRow r;
  r.id = s.i64(0);
  r.experiment_id = s.i64(1);
  r.index = s.i64(2);
  r.params_json = s.text(3);
  r.config_toml = s.text(4);
  r.state = parse_state<TrialState>(kTrialStates, s.text(5), "trial");
  r.reason = s.text(6);
  r.run_dir = s.text(7);
  r.token_hash = s.text(8);
  r.attempts = s.i64(9);
  r.last_step = s.i64(10);
  r.created_at = s.f64(11);
  r.started_at = s.f64(12);
  r.ended_at = s.f64(13);
  return r;
}

AttemptRow read_attempt(const sql::Statement& s) {
  AttemptRow r;
  r.id = s.i64(0);
  r.trial_id = s.i64(1);
  r.number = s.i64(2);
  r.executor = s.text(3);
  r.external_id = s.text(4);
  r.nodes = s.text(5);
  r.state = parse_state<AttemptState>(kAttemptStates, s.text(6), "attempt");
  r.exit_code = s.i64(7);
  r.detail = s.text(8);
  r.started_at = s.f64(9);
  r.ended_at = s.f64(10);
  return r;
}

CheckpointRow read_checkpoint(const sql::Statement& s) {
  CheckpointRow r;
  r.id = s.i64(0);
  r.trial_id = s.i64(1);
  r.step = s.i64(2);
  r.path = s.text(3);
  r.objective = s.f64(4);
  r.created_at = s.f64(5);
  r.deleted_at = s.f64(6);
  return r;
}

EventRow read_event(const sql::Statement& s) {
  EventRow r;
  r.id = s.i64(0);
  r.time = s.f64(1);
  r.experiment_id = s.i64(2);
  r.trial_id = s.i64(3);
  r.kind = s.text(4);
  r.message = s.text(5);
  r.data_json = s.text(6);
  return r;
}

// Runs a cached query on a pooled read connection and maps every row.
template <class Row, class... A>
std::vector<Row> query(StoreState& impl, const std::string& sql, Row (*read)(const sql::Statement&),
                       const A&... args) {
  auto r = impl.reader();
  auto s = r.db().cached(sql);
  s->bind_all(args...);
  std::vector<Row> rows;
  while (s->step()) rows.push_back(read(*s));
  return rows;
}

template <class Row, class... A>
std::optional<Row> query_one(StoreState& impl, const std::string& sql, Row (*read)(const sql::Statement&),
                             const A&... args) {
  auto rows = query(impl, sql, read, args...);
  if (rows.empty()) return std::nullopt;
  return std::move(rows.front());
}

void require_changed(const sql::Database& db, const char* what, int64_t id) {
  if (db.changes() == 0) throw StoreError(std::string("no ") + what + " with id " + std::to_string(id));
}

}  // namespace

const char* trial_state_name(TrialState s) { return kTrialStates.at(static_cast<size_t>(s)); }
const char* experiment_state_name(ExperimentState s) { return kExperimentStates.at(static_cast<size_t>(s)); }
const char* attempt_state_name(AttemptState s) { return kAttemptStates.at(static_cast<size_t>(s)); }

std::optional<TrialState> parse_trial_state(const std::string& s) {
  for (size_t i = 0; i < kTrialStates.size(); ++i)
    if (s == kTrialStates[i]) return static_cast<TrialState>(i);
  return std::nullopt;
}

std::string trial_dir_name(int64_t trial_id) { return "trial-" + std::to_string(trial_id); }

bool is_terminal(TrialState s) { return s != TrialState::pending && s != TrialState::running; }

StoreState::StoreState(const std::filesystem::path& p) : path(p) {
  writer = std::make_unique<sql::Database>(path, false);
  version = store_schema::open_and_migrate(*writer);
  writer->wait_for_locks(lock_wait);
  auto s = writer->cached("SELECT id, name FROM metric_names");
  while (s->step()) writer_names.emplace(s->text(1), s->i64(0));
  names = writer_names;
}

WriteGuard::WriteGuard(StoreState& state, const char* op, WriteWait wait)
    : state_(state), op_(op), exceptions_(std::uncaught_exceptions()) {
  using Clock = std::chrono::steady_clock;
  if (wait == WriteWait::kPatient) {
    state.turn.take();
    state.lock_wait.give_up = Clock::now() + std::chrono::milliseconds(sql::kBusyTimeoutMs);
  } else {
    // Its turn among the controller's writes, unless the one holding it finds the database locked;
    // while writes are known to be blocked a brief one only looks: still locked, or it goes through.
    const bool blocked = state.lock_wait.blocked_since.load() != 0;
    if (!(blocked ? state.turn.try_take() : state.turn.take_unless(state.lock_wait.blocked_since))) {
      throw StoreBusyError(state.path.string() +
                           ": another connection has locked the database (another process holds a write "
                           "transaction on it); retry shortly");
    }
    state.lock_wait.give_up = blocked ? Clock::now() : Clock::now() + kBriefWait;
  }
  start_ = Clock::now();
}

WriteGuard::~WriteGuard() {
  if (state_.write_observer)
    state_.write_observer(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  if (std::uncaught_exceptions() == exceptions_) state_.lock_wait.blocked_since = 0;
  state_.turn.give_back();
}

StoreState::Reader::~Reader() {
  std::lock_guard g(impl_.pool_mu);
  if (impl_.idle_readers.size() < kMaxIdleReaders) impl_.idle_readers.push_back(std::move(db_));
}

StoreState::Reader StoreState::reader() {
  {
    std::lock_guard g(pool_mu);
    if (!idle_readers.empty()) {
      auto db = std::move(idle_readers.back());
      idle_readers.pop_back();
      return Reader(*this, std::move(db));
    }
  }
  return Reader(*this, std::make_unique<sql::Database>(path, true));
}

Store::Store(const std::filesystem::path& path) : impl_(std::make_unique<Impl>(path)) {}
Store::~Store() = default;

int Store::schema_version() const { return impl_->version; }
const std::filesystem::path& Store::path() const { return impl_->path; }

std::optional<std::chrono::steady_clock::time_point> Store::write_blocked_since() const {
  using Clock = std::chrono::steady_clock;
  StoreState& state = *impl_;
  if (state.lock_wait.blocked_since.load() != 0 && state.turn.try_take()) {
    state.lock_wait.give_up = Clock::now();  // a look, no wait
    try {
      sql::Transaction look(*state.writer);  // rolled back
      state.lock_wait.blocked_since = 0;
    } catch (const StoreError&) {  // still locked
    }
    state.turn.give_back();
  }
  const int64_t since = state.lock_wait.blocked_since.load();
  if (since == 0) return std::nullopt;
  return Clock::time_point(Clock::duration(since));
}

int64_t Store::create_experiment(ExperimentRow e, std::vector<TrialRow> trials) {
  WriteGuard g(*impl_, "create_experiment");
  auto& db = *impl_->writer;
  sql::Transaction tx(db);
  {
    auto s = db.cached(
        "INSERT INTO experiments (name, description, recipe_path, recipe_text, overrides_json, state, "
        "objective_metric, objective_mode, max_concurrent, max_attempts, early_stop_json, run_root, "
        "created_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s->bind_all(e.name, e.description, e.recipe_path, e.recipe_text, e.overrides_json,
                experiment_state_name(e.state), e.objective_metric, e.objective_mode, e.max_concurrent,
                e.max_attempts, e.early_stop_json, e.run_root, e.created_at, e.ended_at);
    s->run();
  }
  const int64_t id = db.last_insert_rowid();
  auto s = db.cached(
      "INSERT INTO trials (experiment_id, idx, params_json, config_toml, state, reason, run_dir, "
      "token_hash, attempts, last_step, created_at, started_at, ended_at) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  for (const TrialRow& t : trials) {
    s->bind_all(id, t.index, t.params_json, t.config_toml, trial_state_name(t.state), t.reason, t.run_dir,
                t.token_hash, t.attempts, t.last_step, t.created_at, t.started_at, t.ended_at);
    s->run();
    s->reset();
  }
  if (!e.run_root.empty()) {
    // Named after the trials' ids, known only now: the directory carries the one identifier.
    // One statement for all of them: <run_root>/trial-<id>, as trial_dir_name() spells it.
    std::string prefix = (std::filesystem::path(e.run_root) / trial_dir_name(0)).string();
    prefix.pop_back();
    db.cached("UPDATE trials SET run_dir = ? || id WHERE experiment_id = ? AND run_dir = ''")->bind_all(prefix, id).run();
  }
  tx.commit();
  return id;
}

int64_t Store::add_trial(const ExperimentRow& e, TrialRow t) {
  WriteGuard g(*impl_, "add_trial");
  auto& db = *impl_->writer;
  sql::Transaction tx(db);
  db.cached("INSERT INTO trials (experiment_id, idx, params_json, config_toml, state, reason, run_dir, "
            "token_hash, attempts, last_step, created_at, started_at, ended_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
      ->bind_all(e.id, t.index, t.params_json, t.config_toml, trial_state_name(t.state), t.reason, t.run_dir,
                 t.token_hash, t.attempts, t.last_step, t.created_at, t.started_at, t.ended_at)
      .run();
  const int64_t id = db.last_insert_rowid();
  if (t.run_dir.empty() && !e.run_root.empty())
    db.cached("UPDATE trials SET run_dir = ? WHERE id = ?")
        ->bind_all((std::filesystem::path(e.run_root) / trial_dir_name(id)).string(), id)
        .run();
  tx.commit();
  return id;
}

std::optional<ExperimentRow> Store::experiment(int64_t id) const {
  return query_one(*impl_, select(kExperimentCols, "FROM experiments WHERE id = ?"), read_experiment, id);
}

std::optional<ExperimentRow> Store::experiment_by_name(const std::string& name) const {
  return query_one(*impl_, select(kExperimentCols, "FROM experiments WHERE name = ? ORDER BY id DESC LIMIT 1"),
                   read_experiment, name);
}

std::vector<ExperimentRow> Store::experiments() const {
  return query(*impl_, select(kExperimentCols, "FROM experiments ORDER BY id DESC"), read_experiment);
}

std::vector<ExperimentRow> Store::experiments_in_state(ExperimentState state) const {
  return query(*impl_, select(kExperimentCols, "FROM experiments WHERE state = ? ORDER BY id"), read_experiment,
               experiment_state_name(state));
}

void Store::set_experiment_state(int64_t id, ExperimentState state, double ended_at) {
  WriteGuard g(*impl_, "set_experiment_state");
  auto& db = *impl_->writer;
  auto s = db.cached("UPDATE experiments SET state = ?, ended_at = ? WHERE id = ?");
  s->bind_all(experiment_state_name(state), ended_at, id).run();
  require_changed(db, "experiment", id);
}

std::optional<TrialRow> Store::trial(int64_t id) const {
  return query_one(*impl_, select(kTrialCols, "FROM trials WHERE id = ?"), read_trial, id);
}

std::vector<TrialRow> Store::trials(int64_t experiment_id) const {
  return query(*impl_, select(kTrialCols, "FROM trials WHERE experiment_id = ? ORDER BY idx"), read_trial,
               experiment_id);
}

std::map<TrialState, int64_t> Store::trial_state_counts() const {
  auto r = impl_->reader();
  auto s = r.db().cached("SELECT state, COUNT(*) FROM trials GROUP BY state");
  std::map<TrialState, int64_t> counts;
  while (s->step())
    if (auto state = parse_trial_state(s->text(0))) counts[*state] = s->i64(1);
  return counts;
}

std::map<TrialState, int64_t> Store::trial_state_counts(int64_t experiment_id) const {
  auto r = impl_->reader();
  auto s = r.db().cached("SELECT state, COUNT(*) FROM trials WHERE experiment_id = ? GROUP BY state");
  s->bind(1, experiment_id);
  std::map<TrialState, int64_t> counts;
  while (s->step())
    if (auto state = parse_trial_state(s->text(0))) counts[*state] = s->i64(1);
  return counts;
}

double Store::first_trial_start(int64_t experiment_id) const {
  auto r = impl_->reader();
  auto s = r.db().cached("SELECT min(started_at) FROM trials WHERE experiment_id = ? AND started_at > 0");
  s->bind(1, experiment_id);
  return s->step() ? s->f64(0) : 0;
}

std::vector<TrialRow> Store::pending_trials(int64_t experiment_id, size_t limit) const {
  // Ids follow the sweep order within an experiment (its trials are inserted in order), so the
  // index on (experiment_id, state) hands them over already sorted.
  return query(*impl_, select(kTrialCols, "FROM trials WHERE experiment_id = ? AND state = 'pending' ORDER BY id LIMIT ?"),
               read_trial, experiment_id, static_cast<int64_t>(limit));
}

std::vector<int64_t> Store::trial_ids(int64_t experiment_id, TrialState state) const {
  auto r = impl_->reader();
  auto s = r.db().cached("SELECT id FROM trials WHERE experiment_id = ? AND state = ? ORDER BY id");
  s->bind_all(experiment_id, trial_state_name(state));
  std::vector<int64_t> ids;
  while (s->step()) ids.push_back(s->i64(0));
  return ids;
}

std::vector<int64_t> Store::trials_with_metrics(int64_t experiment_id) const {
  auto r = impl_->reader();
  auto s = r.db().cached(
      "SELECT id FROM trials t WHERE experiment_id = ? AND EXISTS (SELECT 1 FROM metrics WHERE trial_id = t.id) "
      "ORDER BY id");
  s->bind(1, experiment_id);
  std::vector<int64_t> ids;
  while (s->step()) ids.push_back(s->i64(0));
  return ids;
}

std::vector<TrialBrief> Store::trials_with_tokens() const {
  auto r = impl_->reader();
  auto s = r.db().cached("SELECT id, experiment_id, state, token_hash FROM trials WHERE token_hash <> '' ORDER BY id");
  std::vector<TrialBrief> rows;
  while (s->step())
    rows.push_back({s->i64(0), s->i64(1), parse_state<TrialState>(kTrialStates, s->text(2), "trial"), s->text(3)});
  return rows;
}

std::vector<int64_t> Store::cancel_pending_trials(int64_t experiment_id, const std::string& reason, double when) {
  WriteGuard g(*impl_, "cancel_pending_trials");
  auto& db = *impl_->writer;
  sql::Transaction tx(db);
  db.cached(
        "INSERT INTO events (time, experiment_id, trial_id, kind, message, data_json) "
        "SELECT ?1, experiment_id, id, 'trial_cancelled', ?2, '{}' FROM trials "
        "WHERE experiment_id = ?3 AND state = 'pending' ORDER BY id")
      ->bind_all(when, reason, experiment_id)
      .run();
  auto u = db.cached(
      "UPDATE trials SET state = 'cancelled', reason = ?1, ended_at = ?2 "
      "WHERE experiment_id = ?3 AND state = 'pending' RETURNING id");
  u->bind_all(reason, when, experiment_id);
  std::vector<int64_t> ids;
  while (u->step()) ids.push_back(u->i64(0));
  tx.commit();
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool Store::promote_trial(int64_t trial_id, const std::string& reason, const EventRow& e) {
  WriteGuard g(*impl_, "promote_trial");
  auto& db = *impl_->writer;
  sql::Transaction tx(db);
  db.cached("UPDATE trials SET state = 'pending', reason = ?, ended_at = 0 WHERE id = ? AND state = 'pruned'")
      ->bind_all(reason, trial_id)
      .run();
  if (db.changes() == 0) return false;  // the transaction rolls back: nothing was written
  db.cached("INSERT INTO events (time, experiment_id, trial_id, kind, message, data_json) VALUES (?, ?, ?, ?, ?, ?)")
      ->bind_all(e.time, e.experiment_id, trial_id, e.kind, e.message, e.data_json.empty() ? "{}" : e.data_json)
      .run();
  tx.commit();
  return true;
}

void Store::set_write_observer(std::function<void(const char* op, double seconds)> observer) {
  impl_->write_observer = std::move(observer);
}

std::vector<TrialRow> Store::trials_in_state(TrialState state) const {
  return query(*impl_, select(kTrialCols, "FROM trials WHERE state = ? ORDER BY id"), read_trial,
               trial_state_name(state));
}

void Store::update_trial(const TrialRow& t) {
  WriteGuard g(*impl_, "update_trial");
  auto& db = *impl_->writer;
  // last_step only rises: insert_metrics may have raised it since the caller read the row.
  auto s = db.cached(
      "UPDATE trials SET state = ?, reason = ?, attempts = ?, last_step = max(last_step, ?), "
      "created_at = ?, started_at = ?, ended_at = ?, run_dir = ? WHERE id = ?");
  s->bind_all(trial_state_name(t.state), t.reason, t.attempts, t.last_step, t.created_at, t.started_at,
              t.ended_at, t.run_dir, t.id)
      .run();
  require_changed(db, "trial", t.id);
}

void Store::set_trial_token_hash(int64_t trial_id, const std::string& token_hash) {
  WriteGuard g(*impl_, "set_trial_token_hash");
  auto& db = *impl_->writer;
  db.cached("UPDATE trials SET token_hash = ? WHERE id = ?")->bind_all(token_hash, trial_id).run();
  require_changed(db, "trial", trial_id);
}

int64_t Store::add_attempt(AttemptRow a) {
  WriteGuard g(*impl_, "add_attempt");
  auto& db = *impl_->writer;
  auto s = db.cached(
      "INSERT INTO attempts (trial_id, number, executor, external_id, nodes, state, exit_code, detail, "
      "started_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s->bind_all(a.trial_id, a.number, a.executor, a.external_id, a.nodes, attempt_state_name(a.state),
              a.exit_code, a.detail, a.started_at, a.ended_at)
      .run();
  return db.last_insert_rowid();
}

void Store::update_attempt(const AttemptRow& a) {
  WriteGuard g(*impl_, "update_attempt");
  auto& db = *impl_->writer;
  auto s = db.cached(
      "UPDATE attempts SET executor = ?, external_id = ?, nodes = ?, state = ?, exit_code = ?, detail = ?, "
      "started_at = ?, ended_at = ? WHERE id = ?");
  s->bind_all(a.executor, a.external_id, a.nodes, attempt_state_name(a.state), a.exit_code, a.detail,
              a.started_at, a.ended_at, a.id)
      .run();
  require_changed(db, "attempt", a.id);
}

std::vector<AttemptRow> Store::attempts(int64_t trial_id) const {
  return query(*impl_, select(kAttemptCols, "FROM attempts WHERE trial_id = ? ORDER BY number"), read_attempt,
               trial_id);
}

std::vector<AttemptRow> Store::open_attempts() const {
  return query(*impl_, select(kAttemptCols, "FROM attempts WHERE ended_at = 0 ORDER BY id"), read_attempt);
}

int64_t Store::add_checkpoint(CheckpointRow c) {
  WriteGuard g(*impl_, "add_checkpoint");
  auto& db = *impl_->writer;
  // A resend keeps the id and creation time; a checkpoint rewritten at a step whose file was
  // deleted (a resumed trial) is on disk again.
  auto s = db.cached(
      "INSERT INTO checkpoints (trial_id, step, path, objective, created_at, deleted_at) "
      "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (trial_id, step) DO UPDATE SET path = excluded.path, "
      "objective = excluded.objective, deleted_at = excluded.deleted_at RETURNING id");
  s->bind_all(c.trial_id, c.step, c.path, c.objective, c.created_at, c.deleted_at);
  if (!s->step()) throw StoreError("add_checkpoint: no id returned");
  const int64_t id = s->i64(0);
  s->run();
  return id;
}

void Store::mark_checkpoint_deleted(int64_t checkpoint_id, double when) {
  WriteGuard g(*impl_, "mark_checkpoint_deleted");
  auto& db = *impl_->writer;
  db.cached("UPDATE checkpoints SET deleted_at = ? WHERE id = ?")->bind_all(when, checkpoint_id).run();
  require_changed(db, "checkpoint", checkpoint_id);
}

std::vector<CheckpointRow> Store::checkpoints(int64_t trial_id) const {
  return query(*impl_, select(kCheckpointCols, "FROM checkpoints WHERE trial_id = ? ORDER BY step"),
               read_checkpoint, trial_id);
}

int64_t Store::add_event(EventRow e) {
  WriteGuard g(*impl_, "add_event");
  auto& db = *impl_->writer;
  auto s = db.cached(
      "INSERT INTO events (time, experiment_id, trial_id, kind, message, data_json) VALUES (?, ?, ?, ?, ?, ?)");
  s->bind_all(e.time, e.experiment_id, e.trial_id, e.kind, e.message, e.data_json.empty() ? "{}" : e.data_json)
      .run();
  return db.last_insert_rowid();
}

// Ids are assigned by the one writer in commit order, so a reader never sees id N+1 before N
// and a cursor never skips an event.
std::vector<EventRow> Store::events_since(int64_t cursor, size_t limit, int64_t experiment_id) const {
  const int64_t lim = limit == 0 ? -1 : static_cast<int64_t>(limit);
  if (experiment_id == 0)
    return query(*impl_, select(kEventCols, "FROM events WHERE id > ? ORDER BY id LIMIT ?"), read_event, cursor,
                 lim);
  return query(*impl_, select(kEventCols, "FROM events WHERE experiment_id = ? AND id > ? ORDER BY id LIMIT ?"),
               read_event, experiment_id, cursor, lim);
}

std::vector<EventRow> Store::events_of_kind(int64_t experiment_id, const std::string& kind) const {
  return query(*impl_, select(kEventCols, "FROM events WHERE experiment_id = ? AND kind = ? ORDER BY id"), read_event,
               experiment_id, kind);
}

}  // namespace precon::orch
