#include "orchestrator/sched/metrics_backfill.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace precon::orch {

std::vector<MetricPoint> metrics_from_step(const std::filesystem::path& metrics_jsonl, int64_t from_step) {
  std::vector<MetricPoint> out;
  std::ifstream in(metrics_jsonl, std::ios::binary);
  if (!in) return out;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // Records are in step order (a resumed run cuts the file back first): from the end back to the
  // first record before from_step, then forward again.
  std::vector<nlohmann::json> records;
  size_t end = text.size();
  while (end > 0) {
    const size_t nl = end >= 2 ? text.rfind('\n', end - 2) : std::string::npos;
    const size_t begin = nl == std::string::npos ? 0 : nl + 1;
    nlohmann::json j = nlohmann::json::parse(text.substr(begin, end - begin), nullptr, false);
    end = begin;
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    if (j["step"].get<int64_t>() < from_step) break;
    records.push_back(std::move(j));
  }
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    const nlohmann::json& j = *it;
    const int64_t step = j["step"].get<int64_t>();
    const double time = j.contains("time") && j["time"].is_number() ? j["time"].get<double>() : 0;
    for (const auto& [name, value] : j.items()) {
      if (name == "step" || name == "time") continue;
      if (value.is_number()) out.push_back({name, step, value.get<double>(), time});
      if (value.is_null()) out.push_back({name, step, std::nan(""), time});
    }
  }
  return out;
}

}  // namespace precon::orch
