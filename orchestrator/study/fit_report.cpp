// fit.h's result as JSON and as a terminal table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "orchestrator/http/printable.h"
#include "orchestrator/study/fit.h"

namespace precon::study {

namespace {

nlohmann::json jnum(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

std::string num(double v, const char* spec = "%.4g") {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

void append_word(std::string& line, const std::string& word) {
  if (!line.empty()) line += ' ';
  line += word;
}

// Rows as aligned columns (first row = header); the callers make names printable.
std::string render(const std::vector<std::vector<std::string>>& rows) {
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

nlohmann::json fit_to_json(const FitResult& r) {
  nlohmann::json arms = nlohmann::json::array();
  for (const ArmFit& a : r.arms) {
    nlohmann::json by_size = nlohmann::json::array();
    for (double m : a.multiplier_by_size) by_size.push_back(jnum(m));
    arms.push_back({{"arm", a.arm},
                    {"multiplier", jnum(a.multiplier)},
                    {"interval", {jnum(a.lo), jnum(a.hi)}},
                    {"alpha", jnum(a.alpha)},
                    {"E", jnum(r.E)},
                    {"A", jnum(a.A)},
                    {"multiplier_by_size", by_size},
                    {"rms_residual", jnum(a.rms_residual)}});
  }
  return {{"arms", arms}, {"ok", r.ok}, {"reason", r.reason}, {"warnings", r.warnings}, {"baseline", r.baseline}};
}

std::string format_fit_table(const FitResult& r) {
  const std::string baseline = orch::printable(r.baseline);
  if (!r.ok) return "no fit against " + baseline + ": " + orch::printable(r.reason) + "\n";
  std::string out = "L = E + A*C^-alpha per arm, E shared; L* = " + num(r.target_loss) + ", " + baseline +
                    "'s fitted loss at its largest size (" + num(r.target_compute, "%.3g") + " FLOPs)\n";
  out += "multiplier: " + baseline + "'s compute / the arm's compute for the same loss (> 1: the arm needs less)\n\n";
  std::string sizes;
  for (int s : r.sizes) append_word(sizes, std::to_string(s));
  std::vector<std::vector<std::string>> rows = {
      {"arm", "multiplier", "95% interval", "alpha", "E", "A", "rms residual", "by size (" + sizes + ")"}};
  for (const ArmFit& a : r.arms) {
    std::string by_size;
    for (double m : a.multiplier_by_size) append_word(by_size, num(m, "%.3g"));
    rows.push_back({orch::printable(a.arm), num(a.multiplier, "%.3g"),
                    a.arm == r.baseline ? "-" : "[" + num(a.lo, "%.3g") + ", " + num(a.hi, "%.3g") + "]",
                    num(a.alpha), num(r.E), num(a.A, "%.3g"), num(a.rms_residual, "%.4f"), by_size});
  }
  out += render(rows);

  // The residuals by cell: a curve that misses one end systematically shows here first.
  out += "\nresiduals (log loss - log fit), mean per (arm, size); RMS over all points " + num(r.rms_residual, "%.4f") +
         "\n";
  rows = {{"arm", "size", "points", "compute", "mean loss", "fitted", "mean residual"}};
  for (const ArmFit& a : r.arms) {
    std::map<int, std::vector<const Residual*>> cells;
    for (const Residual& res : a.residuals) cells[res.size].push_back(&res);
    for (const auto& [size, cell] : cells) {
      double compute = 0, loss = 0, fitted = 0, residual = 0;
      for (const Residual* res : cell) {
        compute += res->compute;
        loss += res->loss;
        fitted += res->fitted;
        residual += res->log_residual;
      }
      const double n = static_cast<double>(cell.size());
      rows.push_back({orch::printable(a.arm), std::to_string(size), std::to_string(cell.size()),
                      num(compute / n, "%.3g"), num(loss / n), num(fitted / n), num(residual / n, "%+.4f")});
    }
  }
  out += render(rows);
  if (r.resamples > 0)
    out += "\ninterval: " + std::to_string(r.resamples) + " bootstrap resamples of each (arm, size) cell's points (" +
           std::to_string(r.failed_resamples) + " refits failed)\n";
  for (const std::string& w : r.warnings) out += "warning: " + orch::printable(w) + "\n";
  return out;
}

}  // namespace precon::study
