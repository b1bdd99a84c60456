#include "orchestrator/study/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "orchestrator/http/printable.h"
#include "orchestrator/recipe/recipe.h"
#include "worker/model/memory_estimate.h"

namespace precon::study {

namespace {

using nlohmann::json;

json report_json_number(double v) { return std::isfinite(v) ? json(v) : json(); }

std::string report_number(double v, const char* spec = "%.4g") {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

// The baseline as the experiment was submitted: its recipe's [study] and any --set study.baseline.
std::string baseline_of(const orch::ExperimentRow& e) {
  orch::StudyConfig study;
  worker::ConfigIssues ignored;  // the recipe was checked at submit; only the baseline is read here
  const std::string source = e.recipe_path.empty() ? "experiment " + std::to_string(e.id) : e.recipe_path;
  try {
    const toml::table doc = worker::parse_toml_text(e.recipe_text, source);
    if (const toml::node* node = doc.get("study")) orch::read_study(*node, source, study, ignored);
    const json overrides = json::parse(e.overrides_json, nullptr, false);
    if (overrides.is_array())
      for (const json& o : overrides)
        if (o.is_string() && o.get<std::string>().rfind("study.baseline", 0) == 0)
          ignored.attempt([&] {
            auto [key, value] = worker::split_override(o.get<std::string>());
            orch::apply_study_override(study, key, *value.get("v"));
          });
  } catch (const worker::ConfigError& err) {
    throw std::invalid_argument("experiment " + std::to_string(e.id) + ": its recipe no longer reads: " + err.what());
  }
  if (study.baseline.empty())
    throw std::invalid_argument("experiment " + std::to_string(e.id) + " (" + e.name + "): its recipe names no study.baseline");
  return study.baseline;
}

// A study trial's cell, from its params; false for a trial that is not one.
struct TrialCell {
  std::string arm;
  int size = 0;
  double lr_factor = 0;
  int seed = 0;
};

bool trial_cell(const orch::TrialRow& t, TrialCell* c) {
  const json p = json::parse(t.params_json, nullptr, false);
  if (!p.is_object()) return false;
  const auto arm = p.find(orch::kStudyArmParam), size = p.find(orch::kStudySizeParam);
  const auto factor = p.find(orch::kStudyLrFactorParam), seed = p.find(orch::kStudySeedParam);
  if (arm == p.end() || size == p.end() || factor == p.end() || seed == p.end() || !arm->is_string() ||
      !size->is_number_integer() || !factor->is_number() || !seed->is_number_integer())
    return false;
  *c = {arm->get<std::string>(), size->get<int>(), factor->get<double>(), seed->get<int>()};
  return c->size >= 0;
}

double last_value(const orch::Store& store, int64_t trial, const std::string& metric) {
  const std::optional<orch::MetricPoint> p = store.last_metric(trial, metric);
  return p ? p->value : std::nan("");
}

// Training seconds of the whole run: the recorded step times, scaled up to every step when only
// every log_every-th step was recorded (as `precon best` does).
double run_seconds(const orch::Store& store, int64_t trial) {
  double sum = 0;
  int64_t recorded = 0, last = 0;
  for (const orch::MetricPoint& p : store.metrics(trial, "step_seconds")) {
    if (!std::isfinite(p.value)) continue;
    sum += p.value;
    ++recorded;
    last = p.step;
  }
  return recorded ? sum * static_cast<double>(std::max(last, recorded)) / static_cast<double>(recorded) : 0;
}

std::string factor_text(double f) { return report_number(f, "%g"); }

}  // namespace

StudyReport build_study_report(const orch::Store& store, int64_t experiment_id, const FitOptions& options) {
  const std::optional<orch::ExperimentRow> exp = store.experiment(experiment_id);
  if (!exp) throw std::out_of_range("no experiment " + std::to_string(experiment_id));
  StudyReport r;
  r.experiment = exp->id;
  r.name = exp->name;
  std::vector<int64_t> left_out;   // failed, cancelled or pruned
  std::vector<int64_t> no_loss;    // completed without a finite val_loss
  int fallback_flops = 0;
  std::map<int, StudySize> sizes;
  for (const orch::TrialRow& t : store.trials(experiment_id)) {
    TrialCell c;
    if (!trial_cell(t, &c)) continue;
    ++r.trials;
    if (std::find(r.arms.begin(), r.arms.end(), c.arm) == r.arms.end()) r.arms.push_back(c.arm);
    if (std::find(r.lr_grid.begin(), r.lr_grid.end(), c.lr_factor) == r.lr_grid.end()) r.lr_grid.push_back(c.lr_factor);
    const worker::TrialConfig config = orch::stored_trial_config(t.config_toml, "trial " + std::to_string(t.id));
    if (!sizes.count(c.size)) {
      StudySize& z = sizes[c.size];
      z.size = c.size;
      z.params = worker::estimate_memory(config).parameters;
      z.tokens = static_cast<double>(config.train.steps) * static_cast<double>(config.train.batch_size) *
                 static_cast<double>(config.model.seq_len);
    }
    if (!orch::is_terminal(t.state)) continue;
    ++r.finished;
    if (t.state != orch::TrialState::completed) {
      left_out.push_back(t.id);
      continue;
    }
    StudyPoint p;
    p.arm = c.arm;
    p.size = c.size;
    p.seed = c.seed;
    p.lr = config.optimizer.lr;
    p.lr_factor = c.lr_factor;
    p.trial = t.id;
    p.loss = last_value(store, t.id, "val_loss");
    p.compute = last_value(store, t.id, "compute_flops");
    if (!std::isfinite(p.compute)) {
      p.compute = last_value(store, t.id, "flops");
      ++fallback_flops;
    }
    const worker::ParallelConfig& par = config.parallel;
    p.device_seconds = run_seconds(store, t.id) * static_cast<double>(par.tensor * par.data * par.pipeline);
    if (!std::isfinite(p.loss) || !std::isfinite(p.compute) || p.compute <= 0) {
      no_loss.push_back(t.id);
      continue;
    }
    r.points.push_back(p);
  }
  if (r.trials == 0)
    throw std::invalid_argument("experiment " + std::to_string(exp->id) + " (" + exp->name +
                                ") is not a study: its recipe has no [study] table");
  r.baseline = baseline_of(*exp);
  r.complete = r.finished == r.trials;
  std::sort(r.lr_grid.begin(), r.lr_grid.end());

  // The winning lr of each (arm, size): the lowest mean final loss over its seeds.
  std::map<std::pair<std::string, int>, std::map<double, std::vector<size_t>>> cells;
  for (size_t i = 0; i < r.points.size(); ++i) cells[{r.points[i].arm, r.points[i].size}][r.points[i].lr_factor].push_back(i);
  std::vector<Point> fitted;
  std::vector<std::string> at_edge;
  for (const auto& [key, by_lr] : cells) {
    double best = INFINITY, best_factor = 0;
    for (const auto& [factor, idx] : by_lr) {
      double mean = 0;
      for (size_t i : idx) mean += r.points[i].loss / static_cast<double>(idx.size());
      if (mean < best) {
        best = mean;
        best_factor = factor;
      }
    }
    for (size_t i : by_lr.at(best_factor)) {
      StudyPoint& p = r.points[i];
      p.winner = true;
      fitted.push_back({p.arm, p.size, p.seed, p.compute, p.loss, "lr_factor=" + factor_text(p.lr_factor)});
    }
    if (r.lr_grid.size() > 1 && (best_factor == r.lr_grid.front() || best_factor == r.lr_grid.back()))
      at_edge.push_back(orch::printable(key.first) + " at size " + std::to_string(key.second) + " (×" +
                        factor_text(best_factor) + ")");
  }

  if (!r.complete)
    r.warnings.push_back(std::to_string(r.trials - r.finished) + " of " + std::to_string(r.trials) +
                         " trials have not finished: the report is provisional");
  auto ids = [](const std::vector<int64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return v.size() > 8 ? s + " and " + std::to_string(v.size() - 8) + " more" : s;
  };
  if (!left_out.empty())
    r.warnings.push_back("trial(s) " + ids(left_out) + " failed, were pruned or were cancelled: left out");
  if (!no_loss.empty())
    r.warnings.push_back("trial(s) " + ids(no_loss) + " completed without a finite val_loss or compute: left out");
  if (r.lr_grid.size() == 1)
    r.warnings.push_back("study.lr_grid has one factor: no arm's lr is tuned, and a multiplier against an untuned "
                         "baseline says little");
  else if (!at_edge.empty()) {
    std::string cells_text;
    for (const std::string& c : at_edge) cells_text += (cells_text.empty() ? "" : ", ") + c;
    r.warnings.push_back("the best lr sits at the edge of study.lr_grid for " + cells_text +
                         ": the optimum may lie beyond it; widen the grid");
  }
  if (fallback_flops > 0)
    r.warnings.push_back(std::to_string(fallback_flops) + " trial(s) report no compute_flops: their compute is the "
                         "model's FLOPs only (metric flops), without the optimizer's");

  if (fitted.empty()) {
    r.fit.baseline = r.baseline;
    r.reason = r.points.empty() ? "no trial of the study has completed yet" : "no point to fit";
  } else {
    r.fit = fit_compute_multiplier(fitted, r.baseline, options);
    r.reason = r.fit.reason;
  }

  // Per size, the compute-optimal arm: the largest multiplier at the baseline's compute there.
  auto mean_compute = [&](const std::string& arm, int size) {
    double sum = 0;
    int n = 0;
    for (const StudyPoint& p : r.points)
      if (p.winner && p.arm == arm && p.size == size) {
        sum += p.compute;
        ++n;
      }
    return n ? sum / n : 0.0;
  };
  for (auto& [size, z] : sizes) {
    if (r.fit.ok) {
      const auto at = std::find(r.fit.sizes.begin(), r.fit.sizes.end(), size);
      if (at != r.fit.sizes.end()) {
        const size_t j = static_cast<size_t>(at - r.fit.sizes.begin());
        double best = -INFINITY;
        for (const ArmFit& a : r.fit.arms)
          if (j < a.multiplier_by_size.size() && a.multiplier_by_size[j] > best) {
            best = a.multiplier_by_size[j];
            z.winner = a.arm;
          }
      }
    }
    z.compute = mean_compute(z.winner.empty() ? r.baseline : z.winner, size);
    for (size_t a = 0; a < r.arms.size() && z.compute == 0; ++a) z.compute = mean_compute(r.arms[a], size);
    r.sizes.push_back(z);
  }
  return r;
}

json study_report_json(const StudyReport& r) {
  json points = json::array();
  for (const StudyPoint& p : r.points)
    points.push_back({{"arm", p.arm},
                      {"size", p.size},
                      {"seed", p.seed},
                      {"lr", report_json_number(p.lr)},
                      {"lr_factor", report_json_number(p.lr_factor)},
                      {"trial", p.trial},
                      {"compute", report_json_number(p.compute)},
                      {"device_seconds", report_json_number(p.device_seconds)},
                      {"loss", report_json_number(p.loss)},
                      {"winner", p.winner}});
  json sizes = json::array();
  for (const StudySize& z : r.sizes)
    sizes.push_back({{"size", z.size},
                     {"params", z.params},
                     {"tokens", report_json_number(z.tokens)},
                     {"winner", z.winner.empty() ? json() : json(z.winner)},
                     {"compute", report_json_number(z.compute)}});
  std::vector<std::string> warnings = r.warnings;
  warnings.insert(warnings.end(), r.fit.warnings.begin(), r.fit.warnings.end());
  return {{"experiment", r.experiment},
          {"name", r.name},
          {"baseline", r.baseline},
          {"ok", r.fit.ok},
          {"reason", r.reason},
          {"warnings", warnings},
          {"arms", fit_to_json(r.fit)["arms"]},
          {"E", r.fit.ok ? report_json_number(r.fit.E) : json()},
          {"points", points},
          {"sizes", sizes},
          {"complete", r.complete}};
}

json study_report(const orch::Store& store, int64_t experiment_id, const FitOptions& options) {
  return study_report_json(build_study_report(store, experiment_id, options));
}

namespace {

std::string report_rows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) out += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string format_study_report(const StudyReport& r) {
  std::string out = "study " + std::to_string(r.experiment) + " (" + orch::printable(r.name) + "): baseline " +
                    orch::printable(r.baseline) + ", " + std::to_string(r.finished) + " of " +
                    std::to_string(r.trials) + " trials finished\n\n";
  out += "the winning lr of each (arm, size): the lowest mean final val_loss over its seeds\n";
  std::vector<std::vector<std::string>> rows = {
      {"arm", "size", "lr factor", "lr", "seeds", "mean loss", "compute (FLOPs)", "device-s"}};
  for (const std::string& arm : r.arms)
    for (const StudySize& z : r.sizes) {
      double loss = 0, compute = 0, seconds = 0, lr = 0, factor = 0;
      int n = 0;
      for (const StudyPoint& p : r.points)
        if (p.winner && p.arm == arm && p.size == z.size) {
          loss += p.loss;
          compute += p.compute;
          seconds += p.device_seconds;
          lr = p.lr;
          factor = p.lr_factor;
          ++n;
        }
      if (n == 0) {
        rows.push_back({orch::printable(arm), std::to_string(z.size), "-", "-", "0", "-", "-", "-"});
        continue;
      }
      rows.push_back({orch::printable(arm), std::to_string(z.size), factor_text(factor), report_number(lr, "%.3g"),
                      std::to_string(n), report_number(loss / n), report_number(compute / n, "%.3g"), report_number(seconds / n, "%.1f")});
    }
  out += report_rows(rows) + "\n";
  if (r.fit.ok) out += format_fit_table(r.fit);
  else out += "no fit against " + orch::printable(r.baseline) + ": " + orch::printable(r.reason) + "\n";
  out += "\nthe compute-optimal arm per size (the largest multiplier at that size)\n";
  rows = {{"size", "params", "tokens", "winner", "compute (FLOPs)"}};
  for (const StudySize& z : r.sizes)
    rows.push_back({std::to_string(z.size), std::to_string(z.params), report_number(z.tokens, "%.4g"),
                    z.winner.empty() ? "-" : orch::printable(z.winner), report_number(z.compute, "%.3g")});
  out += report_rows(rows);
  for (const std::string& w : r.warnings) out += "warning: " + orch::printable(w) + "\n";
  return out;
}

}  // namespace precon::study
