// precon study: optimizer settings compared across model sizes. `study fit POINTS.json`: the
// compute multiplier of each arm against a baseline (orchestrator/study/fit.h) from a file of
// finished runs; `study report EXP`: the same for an experiment run from a recipe's [study]
// (orchestrator/study/report.h). Each subcommand of the group is one add_study_* function below.
#include <algorithm>
#include <climits>
#include <fstream>
#include <iostream>
#include <sstream>

#include "orchestrator/cli/common.h"
#include "orchestrator/http/printable.h"
#include "orchestrator/study/fit.h"
#include "orchestrator/study/report.h"
#include "worker/common/file_io.h"

namespace precon::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct PointsFile {
  std::string baseline;
  std::vector<study::Point> points;
};

// The shape of a points file; a deviation throws invalid_argument (exit 2) naming the file and
// the JSON path.
class PointsReader {
 public:
  explicit PointsReader(std::string file) : file_(std::move(file)) {}

  PointsFile read() const {
    std::error_code ec;
    if (!fs::is_regular_file(file_, ec)) fail("", "no such file (expected a JSON file of points)");
    std::ifstream in(file_);
    std::stringstream text;
    text << in.rdbuf();
    if (!in.good() && !in.eof()) fail("", "cannot be read");
    json root;
    try {
      root = json::parse(text.str());
    } catch (const json::parse_error& e) {
      fail("", std::string("not JSON: ") + e.what());
    }
    if (!root.is_object()) fail("", "expected an object {\"baseline\": ..., \"points\": [...]}");
    only_keys(root, "", {"baseline", "points"}, "the file has \"baseline\" and \"points\"");
    PointsFile out;
    out.baseline = string_at(root, "", "baseline");
    const json& points = at(root, "", "points");
    if (!points.is_array()) fail("points", "expected an array of points, got " + type_of(points));
    for (size_t i = 0; i < points.size(); ++i) out.points.push_back(point(points[i], "points[" + std::to_string(i) + "]"));
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw std::invalid_argument(file_ + ": " + (path.empty() ? "" : path + ": ") + what);
  }

  static std::string join_path(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : parent + "." + key;
  }

  static std::string type_of(const json& v) {
    if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
    if (v.is_number()) return "a number";
    return std::string(v.type_name());
  }

  void only_keys(const json& obj, const std::string& path, const std::vector<std::string>& allowed,
                 const std::string& hint) const {
    for (const auto& [key, value] : obj.items())
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        fail(join_path(path, key), "unknown key (" + hint + ")");
  }

  const json& at(const json& obj, const std::string& path, const std::string& key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(join_path(path, key), "missing");
    return *it;
  }

  std::string string_at(const json& obj, const std::string& path, const std::string& key) const {
    const json& v = at(obj, path, key);
    if (!v.is_string()) fail(join_path(path, key), "expected a string, got " + type_of(v));
    return v.get<std::string>();
  }

  int int_at(const json& obj, const std::string& path, const std::string& key) const {
    const json& v = at(obj, path, key);
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= INT_MAX
                                             : v.is_number_integer() && v.get<int64_t>() >= INT_MIN && v.get<int64_t>() <= INT_MAX;
    if (!fits)
      fail(join_path(path, key), "expected an integer, got " + (v.is_number() ? v.dump() : type_of(v)));
    return static_cast<int>(v.get<int64_t>());
  }

  double number_at(const json& obj, const std::string& path, const std::string& key) const {
    const json& v = at(obj, path, key);
    if (!v.is_number()) fail(join_path(path, key), "expected a number, got " + type_of(v));
    return v.get<double>();
  }

  study::Point point(const json& p, const std::string& path) const {
    if (!p.is_object()) fail(path, "expected an object {\"arm\", \"size\", \"seed\", \"compute\", \"loss\"}, got " + type_of(p));
    only_keys(p, path, {"arm", "size", "seed", "compute", "loss", "group"},
              "a point has arm, size, seed, compute, loss and optionally group");
    study::Point out;
    out.arm = string_at(p, path, "arm");
    out.size = int_at(p, path, "size");
    out.seed = int_at(p, path, "seed");
    out.compute = number_at(p, path, "compute");
    out.loss = number_at(p, path, "loss");
    if (p.contains("group")) out.group = string_at(p, path, "group");
    return out;
  }

  std::string file_;
};

void add_study_fit(CLI::App* group) {
  auto file = std::make_shared<std::string>();
  CLI::App* cmd = group->add_subcommand(
      "fit", "the compute multiplier of each arm against the baseline, from final losses over a ladder of model sizes");
  cmd->add_option("points", *file,
                  "JSON: {\"baseline\": ARM, \"points\": [{\"arm\", \"size\", \"seed\", \"compute\" (FLOPs), \"loss\"}, ...]}")
      ->required();
  add_json_option(cmd);
  cmd->callback([file] {
    guarded([&] {
      const PointsFile in = PointsReader(*file).read();
      const study::FitResult r = study::fit_compute_multiplier(in.points, in.baseline);
      if (global().json) std::cout << study::fit_to_json(r).dump(2) << "\n";
      else if (r.ok) std::cout << study::format_fit_table(r);
      if (r.ok) return;
      // Values that are not points are bad input; points that no curve fits are a failed fit.
      std::cerr << "precon: " << orch::printable(*file) << ": no fit against " << orch::printable(in.baseline) << ": "
                << orch::printable(r.reason) << "\n";
      exit_code() = r.refusal == study::Refusal::bad_input ? 2 : 1;
    });
  });
}

void add_study_report(CLI::App* group) {
  auto which = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = group->add_subcommand(
      "report", "a study experiment: the winning lr of each (arm, size), each arm's compute multiplier against the "
                "baseline, the compute-optimal arm per size");
  cmd->add_option("experiment", *which, "experiment id or name")->required();
  cmd->add_option("--out", *out, "the report's JSON file (default: study-<experiment id>.json here)");
  add_db_option(cmd);
  add_json_option(cmd);
  cmd->callback([which, out] {
    guarded([&] {
      orch::Store store = open_store();
      const orch::ExperimentRow exp = lookup_experiment(store, *which);
      const study::StudyReport r = study::build_study_report(store, exp.id);
      const json j = study::study_report_json(r);
      const std::string file = out->empty() ? "study-" + std::to_string(exp.id) + ".json" : *out;
      worker::write_file_atomic(file, j.dump(2) + "\n", 0644);
      if (global().json) std::cout << j.dump(2) << "\n";
      else std::cout << study::format_study_report(r) << "\nJSON: " << orch::printable(file) << "\n";
      if (r.fit.ok) return;
      std::cerr << "precon: study " << exp.id << ": no fit against " << orch::printable(r.baseline) << ": "
                << orch::printable(r.reason) << "\n";
      exit_code() = 1;
    });
  });
}

}  // namespace

void add_study(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("study", "optimizer settings compared across model sizes");
  cmd->require_subcommand(1);
  add_study_fit(cmd);
  add_study_report(cmd);
}

}  // namespace precon::cli
