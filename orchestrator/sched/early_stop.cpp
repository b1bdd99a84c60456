#include "orchestrator/sched/early_stop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include <zlib.h>

#include "worker/config/choice.h"

namespace precon::orch {
namespace {

constexpr int64_t kNoCap = -1;

std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// JSON has no NaN/inf; nlohmann would write null, which loses the sign of an infinity.
nlohmann::json jnum(double v) {
  if (std::isfinite(v)) return v;
  return num(v);
}

// The trial's points with this report added unless already there (Optuna ignores a repeated step).
std::map<int64_t, double> own_points(int64_t trial, int64_t step, double value,
                                     const ObjectiveHistory& history) {
  std::map<int64_t, double> own;
  if (auto it = history.find(trial); it != history.end()) own = it->second;
  own.emplace(step, value);
  return own;
}

}  // namespace

double numpy_nanmedian(std::vector<double> values) {
  std::erase_if(values, [](double v) { return std::isnan(v); });
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const auto n = static_cast<int64_t>(values.size());
  const double virtual_index = static_cast<double>(n - 1) * 0.5;
  // numpy clamps an index at the top to the last element but keeps gamma = virtual - (-1).
  int64_t prev = static_cast<int64_t>(std::floor(virtual_index));
  int64_t next = prev + 1;
  double gamma = virtual_index - static_cast<double>(prev);
  if (virtual_index >= static_cast<double>(n - 1)) {
    prev = next = n - 1;
    gamma = virtual_index + 1.0;
  }
  const double a = values[static_cast<size_t>(prev)];
  const double b = values[static_cast<size_t>(next)];
  const double diff = b - a;
  if (gamma >= 0.5) return b - diff * (1.0 - gamma);
  return a + diff * gamma;
}

EarlyStopSettings early_stop_settings_from_json(const nlohmann::json& stored, const std::string& metric,
                                                const std::string& mode, const std::string& study_name) {
  EarlyStopSettings s;
  s.method = stored.value("method", "none");
  s.mode = stored.value("mode", mode);
  s.metric = metric;
  s.min_step = stored.value("min_step", int64_t{100});
  s.reduction_factor = stored.value("reduction_factor", int64_t{3});
  s.min_early_stopping_rate = stored.value("min_early_stopping_rate", int64_t{0});
  s.n_startup_trials = stored.value("n_startup_trials", int64_t{5});
  s.n_warmup_steps = s.method == "median" ? s.min_step : 0;
  s.interval = std::max<int64_t>(1, stored.value("interval", int64_t{1}));
  s.max_step = stored.value("max_step", int64_t{0});
  s.min_dominating = std::max<int64_t>(1, stored.value("min_dominating", int64_t{1}));
  s.promote = stored.value("promote", false);
  s.study_name = study_name;
  return s;
}

EarlyStopper::EarlyStopper(EarlyStopSettings settings) : s_(std::move(settings)) {
  auto bad = [](const std::string& key, const std::string& what) {
    throw EarlyStopError("[sweep.early_stop] " + key + ": " + what);
  };
  constexpr worker::Choice<Method> kMethods[] = {
      {"asha", Method::asha}, {"hyperband", Method::hyperband}, {"median", Method::median},
      {"pareto", Method::pareto}, {"none", Method::none}};
  constexpr worker::Choice<bool> kMaximize[] = {{"min", false}, {"max", true}};
  method_ = worker::parse_choice<EarlyStopError>("sweep.early_stop.method", s_.method, kMethods);
  maximize_ = worker::parse_choice<EarlyStopError>("sweep.early_stop.mode", s_.mode, kMaximize);
  if (method_ == Method::asha || method_ == Method::hyperband) {
    if (s_.min_step < 1) bad("min_step", "must be >= 1, got " + std::to_string(s_.min_step));
    if (s_.reduction_factor < 2)
      bad("reduction_factor", "must be >= 2, got " + std::to_string(s_.reduction_factor));
    if (s_.min_early_stopping_rate < 0)
      bad("min_early_stopping_rate",
          "must be >= 0, got " + std::to_string(s_.min_early_stopping_rate));
  }
  if (method_ == Method::hyperband) {
    if (s_.max_step < s_.min_step)
      bad("min_step", "hyperband needs min_step <= the longest run (train.steps " + std::to_string(s_.max_step) +
                          "), got " + std::to_string(s_.min_step));
    // Optuna's count: Python's math.log(max / min, rf) is log(max / min) / log(rf) in doubles.
    const auto n = static_cast<int64_t>(
        std::floor(std::log(static_cast<double>(s_.max_step) / static_cast<double>(s_.min_step)) /
                   std::log(static_cast<double>(s_.reduction_factor)))) + 1;
    for (int64_t b = 0; b < n; ++b) {
      EarlyStopSettings one = s_;
      one.method = "asha";
      one.min_early_stopping_rate = b;
      brackets_.emplace_back(std::move(one));
      // ceil(n * rf^s / (s + 1)) in Python's floats; rf^s is exact for the ranges the keys allow.
      const int64_t sb = n - 1 - b;
      const double budget = std::ceil(static_cast<double>(n) * std::pow(static_cast<double>(s_.reduction_factor), sb) /
                                      static_cast<double>(sb + 1));
      bracket_budgets_.push_back(static_cast<int64_t>(budget));
      total_budget_ += bracket_budgets_.back();
    }
  }
  if (method_ == Method::median) {
    if (s_.n_startup_trials < 0)
      bad("n_startup_trials", "must be >= 0, got " + std::to_string(s_.n_startup_trials));
    if (s_.n_warmup_steps < 0)
      bad("n_warmup_steps", "must be >= 0, got " + std::to_string(s_.n_warmup_steps));
    if (s_.interval < 1) bad("interval", "must be >= 1, got " + std::to_string(s_.interval));
  }
}

int64_t EarlyStopper::rung_step(int64_t rung) const {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t r = s_.min_step;
  for (int64_t i = 0; i < s_.min_early_stopping_rate + rung; ++i) {
    if (r > kMax / s_.reduction_factor) return kMax;  // beyond any step a trial can reach
    r *= s_.reduction_factor;
  }
  return r;
}

int64_t EarlyStopper::bracket_of(int64_t number) const {
  if (brackets_.empty()) return 0;
  const std::string key = s_.study_name + "_" + std::to_string(number);
  const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(key.data()), static_cast<uInt>(key.size()));
  int64_t n = static_cast<int64_t>(crc % static_cast<uLong>(total_budget_));
  for (size_t b = 0; b < bracket_budgets_.size(); ++b) {
    n -= bracket_budgets_[b];
    if (n < 0) return static_cast<int64_t>(b);
  }
  return static_cast<int64_t>(bracket_budgets_.size()) - 1;  // unreachable: n < total
}

std::vector<int64_t> EarlyStopper::rungs(int64_t max_step) const {
  std::vector<int64_t> out;
  if (method_ == Method::hyperband) return brackets_.front().rungs(max_step);
  if (method_ != Method::asha) return out;
  for (int64_t k = 0;; ++k) {
    const int64_t r = rung_step(k);
    if (r > max_step || r == std::numeric_limits<int64_t>::max()) break;
    out.push_back(r);
  }
  return out;
}

// The values a trial recorded at rungs 0, 1, ... through its points below `below_step`. A report
// records its value at each rung it reaches in turn; a NaN there stopped the trial (nothing more
// recorded); a trial stopped at rung `cap` recorded nothing beyond it.
std::vector<double> EarlyStopper::recorded_rungs(const std::map<int64_t, double>& points,
                                                 int64_t below_step, int64_t cap) const {
  std::vector<double> rec;
  for (const auto& [step, value] : points) {
    if (step >= below_step) break;
    while (step >= rung_step(static_cast<int64_t>(rec.size()))) {
      if (std::isnan(value)) return rec;
      rec.push_back(value);
      if (cap != kNoCap && static_cast<int64_t>(rec.size()) > cap) return rec;
    }
  }
  return rec;
}

StopDecision EarlyStopper::report(int64_t trial, int64_t step, double value,
                                  const ObjectiveHistory& history,
                                  const std::set<int64_t>& completed,
                                  const std::map<int64_t, int64_t>& stopped_rung,
                                  const TrialNumbers& numbers) const {
  if (method_ == Method::none || method_ == Method::pareto) return {};  // pareto: pareto_stop
  if (method_ == Method::hyperband) return hyperband(trial, step, value, history, stopped_rung, numbers);
  const auto own = own_points(trial, step, value, history);
  if (step < own.rbegin()->first) return {};
  if (method_ == Method::asha) return asha(trial, own, history, stopped_rung);
  return median(trial, own, history, completed);
}

StopDecision EarlyStopper::hyperband(int64_t trial, int64_t step, double value, const ObjectiveHistory& history,
                                     const std::map<int64_t, int64_t>& stopped_rung,
                                     const TrialNumbers& numbers) const {
  auto number = [&](int64_t t) {
    const auto it = numbers.find(t);
    return it == numbers.end() ? t : it->second;
  };
  const int64_t b = bracket_of(number(trial));
  // The bracket's successive halving sees only the trials of its bracket.
  ObjectiveHistory same;
  for (const auto& [t, points] : history)
    if (t == trial || bracket_of(number(t)) == b) same.emplace(t, points);
  StopDecision d = brackets_[static_cast<size_t>(b)].report(trial, step, value, same, {}, stopped_rung);
  if (d.rule.empty()) return d;
  d.rule = "hyperband";
  d.data["bracket"] = b;
  d.data["brackets"] = brackets();
  if (d.stop) d.reason = "Hyperband bracket " + std::to_string(b) + " of " + std::to_string(brackets()) + ", " + d.reason;
  return d;
}

StopDecision EarlyStopper::asha(int64_t trial, const std::map<int64_t, double>& own,
                                const ObjectiveHistory& history,
                                const std::map<int64_t, int64_t>& stopped_rung) const {
  const auto [step, value] = *own.rbegin();
  auto rung = static_cast<int64_t>(recorded_rungs(own, step, kNoCap).size());
  if (step < rung_step(rung)) return {};

  StopDecision d;
  d.rule = "asha";
  d.data = {{"step", step}, {"value", jnum(value)}, {"rungs", nlohmann::json::array()}};
  if (std::isnan(value)) {
    d.stop = true;
    d.data["rung"] = rung;
    d.data["rung_step"] = rung_step(rung);
    d.reason = "ASHA rung " + std::to_string(rung) + " (step " + std::to_string(rung_step(rung)) +
               "): " + s_.metric + " is NaN";
    return d;
  }

  std::vector<std::vector<double>> others;
  for (const auto& [t, points] : history) {
    if (t == trial) continue;
    const auto cap = stopped_rung.find(t);
    others.push_back(recorded_rungs(points, std::numeric_limits<int64_t>::max(),
                                    cap == stopped_rung.end() ? kNoCap : cap->second));
  }

  for (;; ++rung) {
    const int64_t rs = rung_step(rung);
    if (step < rs) return d;
    std::vector<double> competing;
    for (const auto& rec : others)
      if (static_cast<int64_t>(rec.size()) > rung) competing.push_back(rec[static_cast<size_t>(rung)]);
    competing.push_back(value);
    std::sort(competing.begin(), competing.end());
    const auto n = static_cast<int64_t>(competing.size());
    const int64_t keep = std::max<int64_t>(n / s_.reduction_factor, 1);
    const double cutoff = competing[static_cast<size_t>(maximize_ ? n - keep : keep - 1)];
    const bool promoted = maximize_ ? value >= cutoff : value <= cutoff;
    d.data["rungs"].push_back({{"rung", rung},
                               {"rung_step", rs},
                               {"cutoff", jnum(cutoff)},
                               {"competitors", n},
                               {"promoted", promoted}});
    d.data["rung"] = rung;
    d.data["rung_step"] = rs;
    d.data["cutoff"] = jnum(cutoff);
    d.data["competitors"] = n;
    if (promoted) continue;
    d.stop = true;
    d.reason = "ASHA rung " + std::to_string(rung) + " (step " + std::to_string(rs) +
               (step != rs ? ", reported at " + std::to_string(step) : std::string()) + "): " +
               s_.metric + " " + num(value) + " is not in the top " +
               std::to_string(keep) + " of " + std::to_string(n) + " trials (1/" +
               std::to_string(s_.reduction_factor) + ", cutoff " + num(cutoff) + ")";
    return d;
  }
}

std::vector<Promotion> EarlyStopper::promotions(const ObjectiveHistory& history,
                                                const std::map<int64_t, int64_t>& stopped,
                                                const TrialNumbers& numbers) const {
  std::vector<Promotion> out;
  if (stopped.empty()) return out;
  if (method_ == Method::hyperband) {
    auto number = [&](int64_t t) {
      const auto it = numbers.find(t);
      return it == numbers.end() ? t : it->second;
    };
    // Each bracket promotes among its own trials, as it stops among them.
    std::map<int64_t, ObjectiveHistory> by_bracket;
    std::map<int64_t, std::map<int64_t, int64_t>> stopped_by_bracket;
    for (const auto& [t, points] : history) by_bracket[bracket_of(number(t))].emplace(t, points);
    for (const auto& [t, rung] : stopped) stopped_by_bracket[bracket_of(number(t))].emplace(t, rung);
    for (const auto& [b, in_bracket] : stopped_by_bracket) {
      for (Promotion p : brackets_[static_cast<size_t>(b)].promotions(by_bracket[b], in_bracket)) {
        p.data["bracket"] = b;
        p.data["brackets"] = brackets();
        p.reason = "Hyperband bracket " + std::to_string(b) + " of " + std::to_string(brackets()) + ", " + p.reason;
        out.push_back(std::move(p));
      }
    }
    std::sort(out.begin(), out.end(), [](const Promotion& a, const Promotion& b) { return a.trial < b.trial; });
    return out;
  }
  if (method_ != Method::asha) return out;
  std::map<int64_t, std::vector<double>> recorded;  // trial -> its values at rungs 0, 1, ...
  for (const auto& [t, points] : history) {
    const auto cap = stopped.find(t);
    recorded[t] = recorded_rungs(points, std::numeric_limits<int64_t>::max(), cap == stopped.end() ? kNoCap : cap->second);
  }
  for (const auto& [t, rung] : stopped) {
    const auto own = recorded.find(t);
    if (own == recorded.end() || static_cast<int64_t>(own->second.size()) <= rung) continue;  // nothing there
    const double value = own->second[static_cast<size_t>(rung)];
    std::vector<double> competing;
    for (const auto& [u, rec] : recorded)
      if (static_cast<int64_t>(rec.size()) > rung) competing.push_back(rec[static_cast<size_t>(rung)]);
    std::sort(competing.begin(), competing.end());
    const auto n = static_cast<int64_t>(competing.size());
    const int64_t keep = std::max<int64_t>(n / s_.reduction_factor, 1);
    const double cutoff = competing[static_cast<size_t>(maximize_ ? n - keep : keep - 1)];
    if (!(maximize_ ? value >= cutoff : value <= cutoff)) continue;
    Promotion p;
    p.trial = t;
    p.rung = rung;
    p.data = {{"rung", rung},         {"rung_step", rung_step(rung)}, {"value", jnum(value)},
              {"cutoff", jnum(cutoff)}, {"competitors", n},            {"keep", keep}};
    p.reason = "promoted at ASHA rung " + std::to_string(rung) + " (step " + std::to_string(rung_step(rung)) + "): " +
               s_.metric + " " + num(value) + " is now in the top " + std::to_string(keep) + " of " + std::to_string(n) +
               " trials (1/" + std::to_string(s_.reduction_factor) + ", cutoff " + num(cutoff) + ")";
    out.push_back(std::move(p));
  }
  return out;
}

StopDecision EarlyStopper::median(int64_t trial, const std::map<int64_t, double>& own,
                                  const ObjectiveHistory& history,
                                  const std::set<int64_t>& completed) const {
  auto n_completed = static_cast<int64_t>(completed.size());
  if (completed.contains(trial)) --n_completed;
  if (n_completed == 0 || n_completed < s_.n_startup_trials) return {};
  const int64_t step = own.rbegin()->first;
  if (step < s_.n_warmup_steps) return {};
  // Only the first report at or after each warmup + k * interval boundary is checked.
  const int64_t boundary =
      (step - s_.n_warmup_steps) / s_.interval * s_.interval + s_.n_warmup_steps;
  const int64_t previous = own.size() > 1 ? std::prev(own.end(), 2)->first : -1;
  if (previous >= boundary) return {};

  double best = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [s, v] : own) {
    if (std::isnan(v)) continue;
    if (std::isnan(best) || (maximize_ ? v > best : v < best)) best = v;
  }
  StopDecision d;
  d.rule = "median";
  if (std::isnan(best)) {
    d.stop = true;
    d.data = {{"step", step}, {"best", nullptr}};
    d.reason = "median rule (step " + std::to_string(step) + "): every " + s_.metric +
               " so far is NaN";
    return d;
  }
  std::vector<double> at_step;
  for (int64_t t : completed) {
    if (t == trial) continue;
    const auto it = history.find(t);
    if (it == history.end()) continue;
    if (const auto p = it->second.find(step); p != it->second.end()) at_step.push_back(p->second);
  }
  const double med = numpy_nanmedian(at_step);
  if (std::isnan(med)) return {};
  d.stop = maximize_ ? best < med : best > med;
  d.data = {{"step", step},
            {"best", jnum(best)},
            {"median", jnum(med)},
            {"completed", static_cast<int64_t>(at_step.size())}};
  if (d.stop)
    d.reason = "median rule (step " + std::to_string(step) + "): best " + s_.metric + " so far " +
               num(best) + " is worse than the median " + num(med) + " of " +
               std::to_string(at_step.size()) + " completed trials at this step";
  return d;
}

StopDecision pareto_stop(int64_t trial, int64_t step, const std::vector<double>& own,
                         const std::map<int64_t, std::vector<double>>& completed_at_step,
                         const std::vector<std::string>& metrics, const std::vector<bool>& maximize,
                         int64_t min_step, int64_t min_dominating) {
  const size_t k = metrics.size();
  auto usable = [&](const std::vector<double>& v) {
    return v.size() == k && std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
  };
  if (step < min_step || !usable(own)) return {};
  auto loss = [&](const std::vector<double>& v) {
    std::vector<double> l(v);
    for (size_t i = 0; i < k; ++i)
      if (maximize[i]) l[i] = -l[i];
    return l;
  };
  const std::vector<double> mine = loss(own);
  std::vector<int64_t> dominating;
  int64_t compared = 0;
  for (const auto& [other, values] : completed_at_step) {
    if (other == trial || !usable(values)) continue;
    ++compared;
    const std::vector<double> theirs = loss(values);
    bool better = false, worse = false;
    for (size_t i = 0; i < k; ++i) {
      better |= theirs[i] < mine[i];
      worse |= theirs[i] > mine[i];
    }
    if (better && !worse) dominating.push_back(other);
  }
  StopDecision d;
  d.rule = "pareto";
  d.data = {{"step", step}, {"values", own}, {"metrics", metrics}, {"dominated_by", dominating},
            {"compared", compared}, {"min_dominating", min_dominating}};
  d.stop = static_cast<int64_t>(dominating.size()) >= min_dominating;
  std::string names;
  for (size_t i = 0; i < k; ++i) names += (i ? ", " : "") + metrics[i];
  char values[256];
  std::string text;
  for (size_t i = 0; i < k; ++i) {
    std::snprintf(values, sizeof values, "%s%.6g", i ? ", " : "", own[i]);
    text += values;
  }
  d.reason = "Pareto rule (step " + std::to_string(step) + "): (" + names + ") = (" + text + ") is dominated by " +
             std::to_string(dominating.size()) + " of " + std::to_string(compared) +
             " completed trials at this step (stops at " + std::to_string(min_dominating) + ")";
  return d;
}

}  // namespace precon::orch
