#include "orchestrator/service/best.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <optional>
#include <utility>

#include "orchestrator/recipe/pareto.h"
#include "worker/config/choice.h"

namespace precon::orch {
namespace {

struct Context {
  bool maximize = false;
  // a strictly better than b; NaN is never better.
  bool better(double a, double b) const {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
    return maximize ? a > b : a < b;
  }
};

std::string num(double v, const char* fmt = "%.5g") {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[48];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Where a trial that is not a completed one stands, for the notes.
std::string state_note(const BestTrial& t) {
  const std::string state = trial_state_name(t.state);
  if (t.objective.empty()) return t.state == TrialState::failed && !t.reason.empty() ? state + ": " + t.reason : state;
  const std::string at = std::to_string(t.objective.rbegin()->first);
  if (t.state == TrialState::running || t.state == TrialState::pending) return state + ", at step " + at;
  if (t.state == TrialState::failed && !t.reason.empty()) return state + " at step " + at + ": " + t.reason;
  return state + " at step " + at;
}

std::string join_note(std::string a, const std::string& b) {
  if (b.empty()) return a;
  if (a.empty()) return b;
  return a + "; " + b;
}

// Seconds (or FLOPs) at `step` from a cumulative series: exact, or interpolated between the
// points around it with step 0 at 0. Unknown past the last point.
std::optional<double> time_at(const std::map<int64_t, double>& elapsed, int64_t step) {
  if (elapsed.empty()) return std::nullopt;
  const auto hi = elapsed.lower_bound(step);
  if (hi == elapsed.end()) return std::nullopt;
  if (hi->first == step) return hi->second;
  int64_t s0 = 0;
  double t0 = 0;
  if (hi != elapsed.begin()) std::tie(s0, t0) = *std::prev(hi);
  const double f = static_cast<double>(step - s0) / static_cast<double>(hi->first - s0);
  return t0 + f * (hi->second - t0);
}

// Sorts entries best first (NaN last, ties by trial id) and assigns competition ranks from
// `first_rank` to entries that have a value; returns the next free rank.
int64_t rank_group(std::vector<RankEntry>& group, const Context& cx, int64_t first_rank) {
  std::sort(group.begin(), group.end(), [&](const RankEntry& a, const RankEntry& b) {
    if (cx.better(a.value, b.value)) return true;
    if (cx.better(b.value, a.value)) return false;
    return a.trial < b.trial;
  });
  int64_t next = first_rank;
  for (size_t i = 0; i < group.size(); ++i) {
    if (std::isnan(group[i].value)) continue;
    const bool tie = i > 0 && !std::isnan(group[i - 1].value) && group[i - 1].value == group[i].value;
    group[i].rank = tie ? group[i - 1].rank : first_rank + static_cast<int64_t>(i);
    next = first_rank + static_cast<int64_t>(i) + 1;
  }
  return next;
}

RankEntry entry_of(const BestTrial& t) {
  RankEntry e;
  e.trial = t.id;
  e.label = t.label;
  e.state = t.state;
  return e;
}

// What a ranking's x is.
enum class Axis { steps, seconds, flops };

// One (x -> value) curve per trial, x being the step, the seconds or the FLOPs.
struct TrialCurve {
  const BestTrial* trial = nullptr;
  std::vector<std::pair<double, std::pair<int64_t, double>>> points;  // x -> (step, value)
};

// The shared ranking logic: `at` = smallest last x over the reference trials; reached trials
// ranked by the last value at or before it, the others below by their last value.
Ranking rank_at(const std::vector<TrialCurve>& series, const std::vector<const BestTrial*>& no_data,
                const std::string& metric, const std::string& no_data_note,
                const std::vector<bool>& reference, const Context& cx, Axis axis) {
  Ranking r;
  std::optional<double> at;
  for (size_t i = 0; i < series.size(); ++i)
    if (reference[i]) {
      const double last = series[i].points.back().first;
      at = at ? std::min(*at, last) : last;
    }
  std::vector<RankEntry> reached, short_of, unranked;
  for (size_t i = 0; i < series.size(); ++i) {
    const BestTrial& t = *series[i].trial;
    RankEntry e = entry_of(t);
    if (t.state != TrialState::completed) e.note = state_note(t);
    const auto& pts = series[i].points;
    if (!at) {
      e.note = join_note(e.note, "no completed trial to compare with has this data");
      unranked.push_back(std::move(e));
      continue;
    }
    e.reached = pts.back().first >= *at;
    auto use = pts.end();
    if (e.reached) {
      use = std::upper_bound(pts.begin(), pts.end(), *at,
                             [](double x, const auto& p) { return x < p.first; });
      if (use == pts.begin()) {
        e.note = join_note(e.note, "no value at or before the common point");
        unranked.push_back(std::move(e));
        continue;
      }
      --use;
    } else {
      use = std::prev(pts.end());
      e.note = join_note(e.note, "stopped short: ranked by its last value");
    }
    e.step = use->second.first;
    e.value = use->second.second;
    e.seconds = axis == Axis::seconds ? use->first : -1;
    e.flops = axis == Axis::flops ? use->first : -1;
    if (std::isnan(e.value)) e.note = join_note(e.note, "value is NaN");
    (e.reached ? reached : short_of).push_back(std::move(e));
  }
  for (const BestTrial* t : no_data) {
    RankEntry e = entry_of(*t);
    e.note = join_note(t->state == TrialState::completed ? "" : state_note(*t),
                       t->objective.empty() ? "no " + metric + " reported" : no_data_note);
    unranked.push_back(std::move(e));
  }
  const int64_t next = rank_group(reached, cx, 1);
  rank_group(short_of, cx, next);
  std::sort(unranked.begin(), unranked.end(),
            [](const RankEntry& a, const RankEntry& b) { return a.trial < b.trial; });
  r.defined = at.has_value();
  r.at = at.value_or(0);
  // NaN entries of each group go after all ranked ones.
  for (auto* g : {&reached, &short_of})
    for (auto& e : *g)
      if (e.rank > 0) r.entries.push_back(e);
  for (auto* g : {&reached, &short_of})
    for (auto& e : *g)
      if (e.rank == 0) r.entries.push_back(e);
  for (auto& e : unranked) r.entries.push_back(std::move(e));
  return r;
}

double mean_seconds_per_step(const BestTrial& t) {
  double sum = 0;
  int64_t n = 0;
  for (const auto& [s, v] : t.step_seconds)
    if (std::isfinite(v)) sum += v, ++n;
  if (n > 0) return sum / static_cast<double>(n);
  if (t.elapsed.empty()) return -1;
  const auto& [s1, t1] = *t.elapsed.rbegin();
  if (t.elapsed.size() >= 2) {
    const auto& [s0, t0] = *t.elapsed.begin();
    return (t1 - t0) / static_cast<double>(s1 - s0);
  }
  return s1 > 0 ? t1 / static_cast<double>(s1) : -1;
}

// b beats a: no worse on both axes, better on one.
bool dominates(const ParetoEntry& b, const ParetoEntry& a, const Context& cx) {
  return !cx.better(a.final_value, b.final_value) && b.seconds_per_step <= a.seconds_per_step &&
         (cx.better(b.final_value, a.final_value) || b.seconds_per_step < a.seconds_per_step);
}

// on_front and dominated_by of the compared entries in O(n log n) (a pairwise comparison took
// hours on 100,000 trials). Sorted by seconds per step, then value best first, a trial is beaten
// when a faster one is no worse or one as fast is better. Every beaten trial is beaten by a trial
// of the front; the front, by seconds per step, gets better at every step, so the front's trials
// that beat a given one are one run of it: its first kMaxDominatedBy (the fastest) are listed.
void mark_front(std::vector<ParetoEntry>& all, const Context& cx) {
  std::vector<ParetoEntry*> order;
  for (ParetoEntry& p : all)
    if (p.compared) order.push_back(&p);
  std::sort(order.begin(), order.end(), [&](const ParetoEntry* a, const ParetoEntry* b) {
    if (a->seconds_per_step != b->seconds_per_step) return a->seconds_per_step < b->seconds_per_step;
    if (cx.better(a->final_value, b->final_value)) return true;
    if (cx.better(b->final_value, a->final_value)) return false;
    return a->trial < b->trial;
  });
  std::vector<ParetoEntry*> front;
  const ParetoEntry* best_faster = nullptr;  // best value among the strictly faster trials
  const ParetoEntry* best_as_fast = nullptr; // best value so far among the trials as fast
  for (size_t i = 0; i < order.size(); ++i) {
    ParetoEntry& a = *order[i];
    if (i > 0 && order[i - 1]->seconds_per_step != a.seconds_per_step) {
      for (size_t j = i; j-- > 0 && order[j]->seconds_per_step == order[i - 1]->seconds_per_step;)
        if (!best_faster || cx.better(order[j]->final_value, best_faster->final_value)) best_faster = order[j];
      best_as_fast = nullptr;
    }
    const bool beaten = (best_faster && !cx.better(a.final_value, best_faster->final_value)) ||
                        (best_as_fast && cx.better(best_as_fast->final_value, a.final_value));
    a.on_front = !beaten;
    if (a.on_front) front.push_back(&a);
    if (!best_as_fast || cx.better(a.final_value, best_as_fast->final_value)) best_as_fast = &a;
  }
  for (ParetoEntry* a : order) {
    if (a->on_front) continue;
    // The front's trials at most as slow: a prefix; of those, the ones no worse: a run at its end.
    const auto slow_end = std::upper_bound(front.begin(), front.end(), a->seconds_per_step,
                                           [](double s, const ParetoEntry* f) { return s < f->seconds_per_step; });
    const auto first = std::partition_point(front.begin(), slow_end, [&](const ParetoEntry* f) {
      return cx.better(a->final_value, f->final_value);
    });
    for (auto it = first; it != slow_end && a->dominated_by.size() < kMaxDominatedBy; ++it)
      if (dominates(**it, *a, cx)) a->dominated_by.push_back((*it)->trial);
    std::sort(a->dominated_by.begin(), a->dominated_by.end());
  }
}

std::vector<ParetoEntry> pareto(const std::vector<BestTrial>& trials,
                                const std::vector<bool>& reference, const Context& cx,
                                const std::string& metric) {
  std::vector<ParetoEntry> all;
  for (size_t i = 0; i < trials.size(); ++i) {
    const BestTrial& t = trials[i];
    ParetoEntry p;
    p.trial = t.id;
    p.label = t.label;
    p.state = t.state;
    if (!t.objective.empty()) std::tie(p.final_step, p.final_value) = *t.objective.rbegin();
    p.seconds_per_step = mean_seconds_per_step(t);
    if (!reference[i])
      p.note = t.objective.empty()
                   ? join_note(t.state == TrialState::failed ? state_note(t) : "", "no " + metric + " reported")
                   : "not compared: " + state_note(t);
    else if (!std::isfinite(p.final_value))
      p.note = "not compared: final value is " + num(p.final_value);
    else if (!(p.seconds_per_step > 0) || !std::isfinite(p.seconds_per_step))
      p.note = "not compared: no timing data";
    else
      p.compared = true;
    all.push_back(std::move(p));
  }
  mark_front(all, cx);
  auto group = [](const ParetoEntry& p) { return p.on_front ? 0 : p.compared ? 1 : 2; };
  std::stable_sort(all.begin(), all.end(), [&](const ParetoEntry& a, const ParetoEntry& b) {
    if (group(a) != group(b)) return group(a) < group(b);
    if (group(a) < 2 && a.seconds_per_step != b.seconds_per_step)
      return a.seconds_per_step < b.seconds_per_step;
    return a.trial < b.trial;
  });
  return all;
}

}  // namespace

bool maximizes(const std::string& mode) {
  constexpr worker::Choice<bool> kMaximize[] = {{"min", false}, {"max", true}};
  return worker::parse_choice<BestError>("objective.mode", mode, kMaximize);
}

std::vector<FrontEntry> objective_front(const std::vector<BestTrial>& trials, const BestSettings& settings) {
  std::vector<FrontEntry> out;
  const size_t k = settings.metrics.size();
  if (k < 2) return out;
  std::vector<bool> maximize;
  for (const std::string& m : settings.modes) maximize.push_back(maximizes(m));
  auto complete_values = [&](const BestTrial& t) {
    return t.finals.size() == k && std::all_of(t.finals.begin(), t.finals.end(), [](double v) { return std::isfinite(v); });
  };
  bool any_completed = false;
  for (const BestTrial& t : trials) any_completed |= t.state == TrialState::completed && complete_values(t);
  std::vector<const BestTrial*> compared;
  std::vector<Loss> losses;
  for (const BestTrial& t : trials) {
    FrontEntry e;
    e.trial = t.id;
    e.label = t.label;
    e.state = t.state;
    e.values = t.finals;
    e.values.resize(k, std::numeric_limits<double>::quiet_NaN());
    if (!complete_values(t)) {
      for (size_t i = 0; i < k; ++i)
        if (!std::isfinite(e.values[i])) {
          e.note = "no value of " + settings.metrics[i];
          break;
        }
    } else if (any_completed && t.state != TrialState::completed) {
      e.note = std::string("not compared: ") + trial_state_name(t.state);
    } else {
      Loss l;
      for (size_t i = 0; i < k; ++i) l.push_back(maximize[i] ? -t.finals[i] : t.finals[i]);
      losses.push_back(std::move(l));
      compared.push_back(&t);
      continue;
    }
    out.push_back(std::move(e));
  }
  const std::vector<int> ranks = nondomination_ranks(losses);
  std::vector<FrontEntry> ranked;
  for (size_t i = 0; i < compared.size(); ++i) {
    FrontEntry e;
    e.trial = compared[i]->id;
    e.label = compared[i]->label;
    e.state = compared[i]->state;
    e.values = compared[i]->finals;
    e.rank = ranks[i] + 1;
    e.on_front = ranks[i] == 0;
    ranked.push_back(std::move(e));
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const FrontEntry& a, const FrontEntry& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.trial < b.trial;
  });
  ranked.insert(ranked.end(), std::make_move_iterator(out.begin()), std::make_move_iterator(out.end()));
  return ranked;
}

BestReport rank_trials(const std::vector<BestTrial>& trials, const BestSettings& settings) {
  const Context cx{maximizes(settings.mode)};
  BestReport out;
  out.settings = settings;
  out.front = objective_front(trials, settings);

  bool any_completed = false;
  for (const auto& t : trials)
    any_completed |= t.state == TrialState::completed && !t.objective.empty();
  auto is_reference = [&](const BestTrial& t) {
    return !t.objective.empty() && (!any_completed || t.state == TrialState::completed);
  };
  std::vector<bool> reference;
  for (const auto& t : trials) reference.push_back(is_reference(t));

  std::vector<TrialCurve> by_step, by_time, by_flops;
  std::vector<bool> ref_step, ref_time, ref_flops;
  std::vector<const BestTrial*> no_objective, no_time, no_flops;
  // The objective's points placed on a cumulative axis (seconds, FLOPs) of the trial.
  auto place = [&](const BestTrial& t, const std::map<int64_t, double>& axis, std::vector<TrialCurve>& series,
                   std::vector<bool>& ref, std::vector<const BestTrial*>& missing) {
    TrialCurve s{&t, {}};
    for (const auto& [step, v] : t.objective)
      if (const auto x = time_at(axis, step)) s.points.push_back({*x, {step, v}});
    if (s.points.empty()) {
      missing.push_back(&t);
      return;
    }
    // Interpolated points are monotone only if the axis is; keep the series ordered by it.
    std::stable_sort(s.points.begin(), s.points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    series.push_back(std::move(s));
    ref.push_back(is_reference(t));
  };
  for (const auto& t : trials) {
    if (t.objective.empty()) {
      no_objective.push_back(&t);
      no_time.push_back(&t);
      no_flops.push_back(&t);
      continue;
    }
    TrialCurve s{&t, {}};
    for (const auto& [step, v] : t.objective) s.points.push_back({static_cast<double>(step), {step, v}});
    by_step.push_back(std::move(s));
    ref_step.push_back(is_reference(t));
    place(t, t.elapsed, by_time, ref_time, no_time);
    place(t, t.flops, by_flops, ref_flops, no_flops);
  }
  out.at_step = rank_at(by_step, no_objective, settings.metric, "", ref_step, cx, Axis::steps);
  out.at_time = rank_at(by_time, no_time, settings.metric, "no wall-clock data", ref_time, cx, Axis::seconds);
  out.at_flops = rank_at(by_flops, no_flops, settings.metric, "no flops reported", ref_flops, cx, Axis::flops);
  out.pareto = pareto(trials, reference, cx, settings.metric);
  return out;
}

namespace {

// Columns: header, right-aligned?; rows of cells. Trailing spaces trimmed.
struct Table {
  std::vector<std::pair<std::string, bool>> columns;
  std::vector<std::vector<std::string>> rows;

  std::string render() const {
    std::vector<size_t> width;
    for (const auto& [h, right] : columns) width.push_back(h.size());
    for (const auto& row : rows)
      for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    std::string out;
    auto line = [&](auto cell) {
      std::string l;
      for (size_t c = 0; c < columns.size(); ++c) {
        const std::string v = cell(c);
        const std::string pad(width[c] - v.size(), ' ');
        l += (c ? "  " : "") + (columns[c].second ? pad + v : v + pad);
      }
      l.erase(l.find_last_not_of(' ') + 1);
      out += l + "\n";
    };
    line([&](size_t c) { return columns[c].first; });
    for (const auto& row : rows) line([&](size_t c) { return row[c]; });
    return out;
  }
};

std::string rank_cell(int64_t rank) { return rank > 0 ? std::to_string(rank) : "-"; }

void render_ranking(std::string& out, const Ranking& r, const std::string& metric, Axis axis) {
  if (!r.defined) {
    const std::string what = axis == Axis::seconds ? "wall-clock data" : axis == Axis::flops ? "flops" : metric + " reported";
    out += "  (no " + what + " for the trials to compare)\n";
    return;
  }
  Table t;
  t.columns = {{"rank", true}, {"trial", true}, {metric, true}, {"step", true}};
  if (axis == Axis::seconds) t.columns.push_back({"seconds", true});
  if (axis == Axis::flops) t.columns.push_back({"FLOPs", true});
  t.columns.push_back({"params", false});
  t.columns.push_back({"note", false});
  for (const auto& e : r.entries) {
    std::vector<std::string> row = {rank_cell(e.rank), std::to_string(e.trial),
                                    e.step >= 0 ? num(e.value) : "-",
                                    e.step >= 0 ? std::to_string(e.step) : "-"};
    if (axis == Axis::seconds) row.push_back(e.seconds >= 0 ? num(e.seconds, "%.1f") : "-");
    if (axis == Axis::flops) row.push_back(e.flops >= 0 ? num(e.flops, "%.3g") : "-");
    row.push_back(e.label);
    row.push_back(e.note);
    t.rows.push_back(std::move(row));
  }
  out += t.render();
}

nlohmann::json jnum(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json ranking_json(const Ranking& r, Axis axis) {
  nlohmann::json j;
  const char* key = axis == Axis::seconds ? "seconds" : axis == Axis::flops ? "flops" : "step";
  j[key] = r.defined ? (axis != Axis::steps ? nlohmann::json(r.at) : nlohmann::json(static_cast<int64_t>(r.at)))
                     : nlohmann::json();
  j["entries"] = nlohmann::json::array();
  for (const auto& e : r.entries) {
    nlohmann::json x = {{"rank", e.rank},
                        {"trial", e.trial},
                        {"label", e.label},
                        {"state", trial_state_name(e.state)},
                        {"value", e.step >= 0 ? jnum(e.value) : nlohmann::json()},
                        {"step", e.step >= 0 ? nlohmann::json(e.step) : nlohmann::json()},
                        {"reached", e.reached},
                        {"note", e.note}};
    if (axis == Axis::seconds) x["seconds"] = e.seconds >= 0 ? nlohmann::json(e.seconds) : nlohmann::json();
    if (axis == Axis::flops) x["flops"] = e.flops >= 0 ? nlohmann::json(e.flops) : nlohmann::json();
    j["entries"].push_back(std::move(x));
  }
  return j;
}

}  // namespace

std::string format_best_table(const BestReport& report) {
  const auto& metric = report.settings.metric;
  std::string out;
  if (report.settings.metrics.size() > 1) {
    std::string names;
    for (size_t i = 0; i < report.settings.metrics.size(); ++i)
      names += (i ? ", " : "") + report.settings.metrics[i] + " (" + report.settings.modes[i] + ")";
    out += "objectives: " + names + "\n\nPareto front of the final values, rank 1 = on the front:\n";
    Table f;
    f.columns = {{"rank", true}, {"trial", true}};
    for (const std::string& m : report.settings.metrics) f.columns.push_back({m, true});
    f.columns.push_back({"params", false});
    f.columns.push_back({"note", false});
    for (const FrontEntry& e : report.front) {
      std::vector<std::string> row = {e.rank > 0 ? std::to_string(e.rank) : "-", std::to_string(e.trial)};
      for (double v : e.values) row.push_back(std::isfinite(v) ? num(v) : "-");
      row.push_back(e.label);
      row.push_back(e.note);
      f.rows.push_back(std::move(row));
    }
    out += f.render() + "\nThe first objective alone:\n";
  }
  out += "objective: " + metric + " (" + (maximizes(report.settings.mode) ? "higher" : "lower") + " is better)\n\n";
  out += report.at_step.defined
             ? "At equal steps (step " + std::to_string(static_cast<int64_t>(report.at_step.at)) +
                   "):\n"
             : std::string("At equal steps:\n");
  render_ranking(out, report.at_step, metric, Axis::steps);
  out += report.at_time.defined
             ? "\nAt equal wall-clock (" + num(report.at_time.at, "%.1f") + " s):\n"
             : std::string("\nAt equal wall-clock:\n");
  render_ranking(out, report.at_time, metric, Axis::seconds);
  out += report.at_flops.defined ? "\nAt equal compute (" + num(report.at_flops.at, "%.3g") + " FLOPs):\n"
                                 : std::string("\nAt equal compute:\n");
  render_ranking(out, report.at_flops, metric, Axis::flops);
  out += "\nPareto front of (final " + metric + ", seconds per step), * = on the front:\n";
  Table t;
  t.columns = {{"front", false}, {"trial", true},  {metric, true},   {"step", true},
               {"s/step", true}, {"params", false}, {"note", false}};
  for (const auto& p : report.pareto) {
    std::string note = p.note;
    if (!p.dominated_by.empty()) {
      std::string ids;
      for (int64_t d : p.dominated_by) ids += (ids.empty() ? "" : ", ") + std::to_string(d);
      note = join_note(note, "dominated by " + ids);
    }
    t.rows.push_back({p.on_front ? "*" : "", std::to_string(p.trial),
                      p.final_step >= 0 ? num(p.final_value) : "-",
                      p.final_step >= 0 ? std::to_string(p.final_step) : "-",
                      p.seconds_per_step > 0 ? num(p.seconds_per_step, "%.4g") : "-", p.label, note});
  }
  out += t.render();
  return out;
}

nlohmann::json best_to_json(const BestReport& report) {
  nlohmann::json j = {{"metric", report.settings.metric},
                      {"mode", report.settings.mode},
                      {"at_step", ranking_json(report.at_step, Axis::steps)},
                      {"at_time", ranking_json(report.at_time, Axis::seconds)},
                      {"at_flops", ranking_json(report.at_flops, Axis::flops)},
                      {"pareto", nlohmann::json::array()}};
  for (const auto& p : report.pareto)
    j["pareto"].push_back(
        {{"trial", p.trial},
         {"label", p.label},
         {"state", trial_state_name(p.state)},
         {"final_value", p.final_step >= 0 ? jnum(p.final_value) : nlohmann::json()},
         {"final_step", p.final_step >= 0 ? nlohmann::json(p.final_step) : nlohmann::json()},
         {"seconds_per_step", p.seconds_per_step > 0 ? jnum(p.seconds_per_step) : nlohmann::json()},
         {"compared", p.compared},
         {"on_front", p.on_front},
         {"dominated_by", p.dominated_by},
         {"note", p.note}});
  if (report.settings.metrics.size() > 1) {
    nlohmann::json front = nlohmann::json::array();
    for (const FrontEntry& e : report.front) {
      nlohmann::json values = nlohmann::json::array();
      for (double v : e.values) values.push_back(jnum(v));
      front.push_back({{"trial", e.trial},
                       {"label", e.label},
                       {"state", trial_state_name(e.state)},
                       {"values", values},
                       {"rank", e.rank > 0 ? nlohmann::json(e.rank) : nlohmann::json()},
                       {"on_front", e.on_front},
                       {"note", e.note}});
    }
    j["objectives"] = {{"metrics", report.settings.metrics}, {"modes", report.settings.modes}, {"front", front}};
  }
  return j;
}

}  // namespace precon::orch
