// Hostile names from a recipe end to end: experiment names (swept too), descriptions and
// overrides full of shell metacharacters go through the controller to the sbatch script that the
// Slurm executor writes (sbatch, squeue and friends are stand-ins on PATH, so no cluster is
// needed); running that script with bash runs nothing they hold, and every #SBATCH line is plain.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include "orchestrator/service/controller.h"
#include "tests/common/test_util.h"
#include "tests/orchestrator/support/controller_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

using test::slurp;

void write_program(const fs::path& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  fs::permissions(path, fs::perms::owner_all);
}

// Where a stray command substitution would leave its mark: any file named pwned* under root.
std::vector<std::string> marks_under(const fs::path& root) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().filename().string().rfind("pwned", 0) == 0) found.push_back(e.path().string());
  }
  return found;
}

class Injection : public ControllerFixture {};

TEST_F(Injection, HostileNamesFromARecipeRunNothingInTheSbatchScript) {
  // Stand-ins for the Slurm commands: sbatch accepts every script, the others know no job.
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin);
  write_program(bin / "sbatch", "echo 4242");
  for (const char* tool : {"squeue", "scontrol", "scancel", "sacct"}) write_program(bin / tool, "exit 0");
  // srun records the program and its arguments (after srun's own options, up to "--").
  write_program(bin / "srun", "while [ \"$1\" != -- ]; do shift; done; shift\nprintf '%s\\n' \"$@\" > \"$PWD/srun-argv\"");
  const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  ::setenv("PATH", (bin.string() + ":" + old_path).c_str(), 1);

  ControllerOptions o = controller_options();
  o.slurm = "on";
  o.slurm_poll_interval = std::chrono::milliseconds(200);
  auto c = std::make_unique<orch::Controller>(o);
  c->start();

  // Every shell metacharacter a name may hold (the schema refuses control characters only).
  const std::string evil = R"(x$(touch pwned1)`touch pwned2`;touch pwned3 'q\" | touch pwned4 & <a >b *?~#!{c,d}\\)";
  std::string text = recipe(5, "[resources]\nexecutor = \"slurm\"\n"
                                "[sweep.parameters]\n\"experiment.name\" = [\"a$(touch pwned5)\", \"b`touch pwned6`\"]\n");
  text.replace(text.find("name = \"tiny\""), 13, "name = \"" + evil + "\"\ndescription = \"$(touch pwned7)\"");
  const ClientResponse r =
      post(c->url(), "/api/v1/experiments",
           json{{"recipe", text}, {"overrides", {"experiment.description=;touch pwned8;'\"`touch pwned9`"}}}.dump(),
           "admin-secret");
  ASSERT_EQ(r.status, 201) << r.body;
  const int64_t id = json::parse(r.body)["id"];
  std::vector<fs::path> scripts;
  ASSERT_TRUE(wait_for([&] {
    scripts.clear();
    for (const TrialRow& t : c->store().trials(id)) {
      if (fs::exists(fs::path(t.run_dir) / "slurm-1.sh")) scripts.push_back(fs::path(t.run_dir) / "slurm-1.sh");
    }
    return scripts.size() == 2;
  }, std::chrono::seconds(30))) << "the Slurm executor wrote " << scripts.size() << " of 2 batch scripts";
  c->stop();
  c.reset();

  const std::regex plain_sbatch(R"(#SBATCH --[a-z-]+(=[A-Za-z0-9_./+@,:=%-]*)?)");
  for (const fs::path& script : scripts) {
    SCOPED_TRACE(script.string());
    const std::string body = slurp(script);
    std::istringstream lines(body);
    int sbatch_lines = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("#SBATCH", 0) != 0) continue;
      ++sbatch_lines;
      EXPECT_TRUE(std::regex_match(line, plain_sbatch)) << line;
    }
    EXPECT_GE(sbatch_lines, 4);
    // Run it as a compute node would, in a scratch directory; srun is the stand-in.
    const fs::path work = dir_ / ("node-" + script.parent_path().filename().string());
    fs::create_directories(work);
    const test::CommandResult run = test::run_command("cd '" + work.string() + "' && SLURM_JOB_ID=4242 bash '" +
                                                      script.string() + "'");
    EXPECT_EQ(run.status, 0) << run.output;
    const std::string argv = slurp(work / "srun-argv");
    EXPECT_EQ(argv.rfind(std::string(PRECON_TRAIN_BIN) + "\n", 0), 0u) << argv;  // the trainer, verbatim
    EXPECT_EQ(slurp(script.parent_path() / "exit_status.1"), "exit 0\n");
  }
  ::setenv("PATH", old_path.c_str(), 1);
  EXPECT_EQ(marks_under(dir_), std::vector<std::string>{});
  // The trainer's config keeps the names exactly as given (TOML-escaped, never evaluated).
  const Store store(dir_ / "precon.db");
  for (const TrialRow& t : store.trials(id)) {
    EXPECT_NE(t.config_toml.find("touch pwned8"), std::string::npos) << t.config_toml;
  }
}

}  // namespace
}  // namespace precon::orch::testing
