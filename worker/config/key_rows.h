// The key table's rows under construction, shared by the files that build its sections
// (keys.cpp: [experiment], [objective], [sweep]; keys_model.cpp; keys_optimizer.cpp; keys_run.cpp).
// Internal to worker/config: nothing outside it includes this.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "worker/config/keys.h"

namespace precon::worker::key_rows {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// One row under construction: the fluent setters keep each row on a few readable lines.
struct Row {
  KeySpec k;
  Row& range(double lo, double hi) {
    k.min = lo;
    k.max = hi;
    return *this;
  }
  Row& choices(std::vector<std::string> c) {
    k.choices = std::move(c);
    return *this;
  }
  Row& pattern(std::string re, std::string text) {
    k.pattern = std::move(re);
    k.pattern_text = std::move(text);
    return *this;
  }
  Row& hashed() {
    k.in_config_hash = true;
    return *this;
  }
  Row& sbatch(std::string option) {
    k.sbatch = std::move(option);
    return *this;
  }
  Row& rule(std::function<std::string(const TrialConfig&)> r) {
    k.rule = std::move(r);
    return *this;
  }
};

inline Row trial(std::string name, std::string unit, std::string description,
                 std::function<FieldRef(TrialConfig&)> field) {
  Row r;
  r.k.name = std::move(name);
  r.k.unit = std::move(unit);
  r.k.description = std::move(description);
  r.k.field = std::move(field);
  return r;
}

inline Row sweep(std::string name, std::string unit, std::string description,
                 std::function<FieldRef(SweepSettings&)> field) {
  Row r;
  r.k.name = std::move(name);
  r.k.unit = std::move(unit);
  r.k.description = std::move(description);
  r.k.sweep_field = std::move(field);
  return r;
}

// "4 must divide n_head = 6": the message of a divisibility rule.
inline std::string ratio(int64_t a, const char* what, int64_t b) {
  return std::to_string(a) + " must divide " + what + " = " + std::to_string(b);
}

// Each adds its sections' rows in config order (the order config_to_toml writes and the config
// hash reads): model and model.moe; data and train; optimizer and its sub-tables; parallel;
// resources.
void add_model_rows(std::vector<Row>& k);
void add_data_and_train_rows(std::vector<Row>& k);
void add_optimizer_rows(std::vector<Row>& k);
void add_parallel_rows(std::vector<Row>& k);
void add_resources_rows(std::vector<Row>& k);

}  // namespace precon::worker::key_rows
