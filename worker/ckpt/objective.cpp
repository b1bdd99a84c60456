#include "worker/ckpt/objective.h"

#include <nlohmann/json.hpp>

#include "worker/common/file_io.h"

namespace precon::worker {

std::optional<double> checkpoint_objective(const std::filesystem::path& dir) {
  try {
    const std::vector<uint8_t> bytes = read_file(dir / "trainer.json");
    const nlohmann::json trainer = nlohmann::json::parse(bytes.begin(), bytes.end());
    if (!trainer.contains("objective")) return std::nullopt;
    return trainer.at("objective").at("value").get<double>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace precon::worker
