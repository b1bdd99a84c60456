// precon show EXP: one experiment and its trials.
#include <iostream>
#include <map>

#include "orchestrator/cli/common.h"
#include "orchestrator/service/queries.h"
#include "orchestrator/service/views.h"
#include "orchestrator/store/objectives.h"
#include "worker/model/memory_estimate.h"

namespace precon::cli {

void add_show(CLI::App& app) {
  auto which = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("show", "show an experiment and its trials");
  cmd->add_option("experiment", *which, "experiment id or name")->required();
  add_db_option(cmd);
  add_json_option(cmd);
  cmd->callback([which] {
    guarded([&] {
      orch::Store store = open_store();
      orch::ExperimentRow e = lookup_experiment(store, *which);
      auto trials = store.trials(e.id);
      nlohmann::json j = orch::experiment_json(e, trials, true);
      // Early stopping's promotions (a trial stopped at a rung that later went on), per trial.
      std::map<int64_t, nlohmann::json> promotions;
      for (const orch::EventRow& ev : store.events_of_kind(e.id, "trial_promoted")) {
        nlohmann::json data = nlohmann::json::parse(ev.data_json, nullptr, false);
        if (!data.is_object()) data = nlohmann::json::object();
        data["message"] = ev.message;
        promotions[ev.trial_id].push_back(std::move(data));
      }
      nlohmann::json list = nlohmann::json::array();
      for (const orch::TrialRow& t : trials) {
        list.push_back(orch::trial_summary_json(store, t, e));
        list.back()["promotions"] = promotions.contains(t.id) ? promotions[t.id] : nlohmann::json::array();
      }
      j["trial_list"] = list;
      if (global().json) {
        std::cout << j.dump(2) << "\n";
        return;
      }
      std::string objectives;
      for (const orch::StoredObjective& o : orch::experiment_objectives(e))
        objectives += (objectives.empty() ? "" : ", ") + o.metric + " (" + o.mode + ")";
      std::cout << "experiment " << e.id << " " << e.name << " (" << orch::experiment_state_name(e.state) << ")\n"
                << (objectives.find(',') == std::string::npos ? "objective " : "objectives ") << objectives
                << ", runs in " << e.run_root << "\n\n";
      std::vector<std::vector<std::string>> rows{
          {"TRIAL", "PARAMS", "STATE", "STEP", e.objective_metric, "TRAIN_LOSS", "S/STEP", "PEAK_MEM", "ATTEMPTS", "PROMOTED",
           "REASON"}};
      // "rung 0 (step 100)" per promotion; "-" for none.
      auto promoted = [](const nlohmann::json& list) {
        std::string out;
        for (const nlohmann::json& p : list)
          out += (out.empty() ? "" : ", ") + std::string("rung ") + fmt_number(p.value("rung", nlohmann::json())) +
                 " (step " + fmt_number(p.value("rung_step", nlohmann::json())) + ")";
        return out.empty() ? std::string("-") : out;
      };
      // The largest rank's peak resident memory, in binary units as resources.mem reads them.
      auto memory = [](const nlohmann::json& v) {
        return v.is_number() ? worker::bytes_text(v.get<double>()) : std::string("-");
      };
      for (const nlohmann::json& t : list)
        rows.push_back({std::to_string(t["id"].get<int64_t>()), t["label"].get<std::string>(),
                        t["state"].get<std::string>(), fmt_number(t["last_step"]), fmt_number(t["objective"]), fmt_number(t["train_loss"]), fmt_number(t["step_seconds"], 3),
                        memory(t["memory_peak_bytes"]), fmt_number(t["attempts"]), promoted(t["promotions"]),
                        t["reason"].get<std::string>()});
      print_table(rows);
    });
  });
}

}  // namespace precon::cli
