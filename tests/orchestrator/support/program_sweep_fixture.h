// The fixture of the sweeps whose trials run a small Python program of the test's (TPE, MOTPE,
// NSGA-II run by a live controller): a controller with 4 CPU slots, and the program, which reads
// the trial's parameters, sleeps, computes and appends one metrics line at step 1.
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {

class ProgramSweepFixture : public ControllerFixture {
 protected:
  std::unique_ptr<orch::Controller> start() {
    auto c = std::make_unique<orch::Controller>(controller_options(4));
    c->start();
    return c;
  }
  // Writes dir_/`file`: with the trial's parameters in `p`, it sleeps `sleep` seconds, runs `body`
  // (Python lines) and appends {"step": 1, ...`values`} to metrics.jsonl, `values` being a Python
  // dict. Returns the recipe's [experiment] (named `name`) and [trial] tables that run it.
  std::string program_recipe(const std::string& file, const std::string& name, double sleep, const std::string& body,
                             const std::string& values) const {
    const fs::path prog = dir_ / file;
    std::ofstream(prog) << "import json, math, os, time\n"
                           "p = json.loads(os.environ['PRECON_PARAMS'])\n"
                           "time.sleep(" << sleep << ")\n"
                        << body
                        << "with open('metrics.jsonl', 'a') as f:\n"
                           "    f.write(json.dumps({'step': 1, **" << values << "}) + '\\n')\n";
    return "[experiment]\nname = \"" + name + "\"\n[trial]\ncommand = [\"" + std::string(PRECON_PYTHON) + "\", \"" +
           prog.string() + "\"]\n";
  }
};

}  // namespace precon::orch::testing
