// The report of a study experiment (a recipe's [study], orchestrator/recipe/study.h) from the
// store: per (arm, size) the winning learning rate, the fit of its seeds' final losses against
// their compute (fit.h), and per size the compute-optimal arm. `precon study report` prints it;
// the dashboard's study page draws its JSON. Thread-safety: reads the store only (any thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/store/store.h"
#include "orchestrator/study/fit.h"

namespace precon::study {

// One completed trial of the study.
struct StudyPoint {
  std::string arm;
  int size = 0;
  int seed = 0;              // the replicate k (train.seed = base + k)
  double lr = 0;             // the trial's optimizer.lr
  double lr_factor = 0;      // its study.lr_grid factor
  int64_t trial = 0;         // trial id
  double compute = 0;        // FLOPs: the last compute_flops (model + optimizer), else the last flops (model)
  double device_seconds = 0; // step_seconds summed over the run (scaled up when only every
                             // log_every-th step was recorded) × parallel.tensor·data·pipeline
  double loss = 0;           // the last val_loss
  bool winner = false;       // one of the winning lr's seeds of its (arm, size): a fitted point
};

struct StudySize {
  int size = 0;
  int64_t params = 0;        // the worker's parameter count of the size's model
  double tokens = 0;         // train tokens per trial: steps × batch_size × seq_len
  std::string winner;        // the arm with the largest multiplier at this size; "" without a fit
  double compute = 0;        // the winner's mean FLOPs at this size (without a winner: the
                             // baseline's, else any arm's; 0 when no trial of the size finished)
};

struct StudyReport {
  int64_t experiment = 0;
  std::string name;
  std::string baseline;
  std::vector<std::string> arms;      // in the recipe's order
  std::vector<double> lr_grid;        // the factors, ascending
  std::vector<StudyPoint> points;     // every completed trial with a finite val_loss, by trial index
  std::vector<StudySize> sizes;
  std::vector<std::string> warnings;  // the study's (unfinished trials, an lr at the grid's edge, ...)
  FitResult fit;                      // of the winners' points
  std::string reason;                 // why there is no fit (fit.reason, or no finished trial)
  int64_t trials = 0;                 // all of the study
  int64_t finished = 0;               // in a terminal state
  bool complete = false;              // finished == trials
};

// The report of the study `experiment_id`. Throws std::invalid_argument when the experiment is not
// a study, std::out_of_range when there is no such experiment.
StudyReport build_study_report(const orch::Store& store, int64_t experiment_id, const FitOptions& options = {});

// The study of experiment `experiment_id` from the store: per (arm, size) the winning lr (lowest mean final val_loss
// over seeds), its seeds as the fit's points (compute = the trial's last reported compute, see below), the fit, and
// per size the compute-optimal winner. Throws std::invalid_argument when the experiment is not a study.
// {"experiment", "name", "baseline", "ok", "reason", "warnings" (the study's, then the fit's), "arms" (fit_to_json's),
//  "E" (null without a fit), "points": [{"arm", "size", "seed", "lr", "lr_factor", "trial", "compute",
//  "device_seconds", "loss", "winner"}], "sizes": [{"size", "params", "tokens", "winner" (null without a fit),
//  "compute"}], "complete"}
nlohmann::json study_report(const orch::Store& store, int64_t experiment_id, const FitOptions& options = {});
nlohmann::json study_report_json(const StudyReport& report);

// For a terminal: the winning lr of each (arm, size), the fit's table (format_fit_table), the
// compute-optimal arm per size, the warnings.
std::string format_study_report(const StudyReport& report);

}  // namespace precon::study
