// `precon serve`, `precon submit` and `precon cancel` as a user runs them against a real
// controller: a `precon serve` child on a port it picks, the other subcommands finding it
// through the address and token it leaves next to its database. Exit status and output for the
// happy path and for bad input (a missing recipe, a misspelt key, a wrong token, no controller,
// an unknown id, a finished experiment, a port in use).
#include <gtest/gtest.h>

#include "orchestrator/store/store.h"
#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {
namespace {

class CliServe : public CliFixture {
 protected:
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  static std::string trial_state(const std::string& url, int64_t experiment) {
    const nlohmann::json j = get(url, "/api/v1/experiments/" + std::to_string(experiment) + "/trials");
    return j.is_object() && !j["trials"].empty() ? j["trials"][0].value("state", "") : "";
  }
};

TEST_F(CliServe, SubmitRunsARecipeOnTheServedControllerAndServeStopsCleanly) {
  Serve s = serve();
  ASSERT_FALSE(s.url.empty()) << read_file(s.log);
  EXPECT_EQ(http_request(s.url, "GET", "/healthz").status, 200);
  const std::string recipe_path =
      write("r.toml", recipe(6, "[sweep.parameters]\n\"optimizer.lr\" = [0.001, 0.003]\n"));

  // Address and admin token from the files serve wrote next to --db.
  const test::CommandResult r = precon("submit " + recipe_path + " --db " + s.db.string());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("experiment 1 (tiny): 2 trial(s) submitted to " + s.url), std::string::npos) << r.output;
  ASSERT_TRUE(done(s.url, 1)) << read_file(s.log);
  EXPECT_EQ(get(s.url, "/api/v1/experiments/1")["state"], "completed");

  EXPECT_EQ(s.stop(), 0) << read_file(s.log);
  const std::string log = read_file(s.log);
  EXPECT_NE(log.find("precon serve: " + s.url + " (database " + s.db.string() + ", admin token in " + s.db.string() +
                     ".token)"),
            std::string::npos) << log;
  EXPECT_NE(log.find("precon serve: stopping"), std::string::npos) << log;
  Store store(s.db);
  const std::vector<TrialRow> trials = store.trials(1);
  ASSERT_EQ(trials.size(), 2u);
  for (const TrialRow& t : trials) {
    EXPECT_EQ(t.state, TrialState::completed) << t.id;
    EXPECT_EQ(t.last_step, 6) << t.id;
  }
}

TEST_F(CliServe, SubmitNamesAMissingRecipeAMisspeltKeyAWrongTokenAndAMissingController) {
  Serve s = serve();
  ASSERT_FALSE(s.url.empty()) << read_file(s.log);
  const std::string db = " --db " + s.db.string();

  const std::string absent = (dir_ / "absent.toml").string();
  test::CommandResult r = precon("submit " + absent + db);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(absent + ": cannot open the file: it does not exist"), std::string::npos) << r.output;

  // Checked by the controller (400): every problem as file:line: key, and exit 2.
  const std::string typo = write("typo.toml", "[train]\nstesp = 10\n");
  r = precon("submit " + typo + db);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(typo + ":2: train.stesp: unknown key (did you mean train.steps?)"), std::string::npos)
      << r.output;

  const std::string good = write("r.toml", recipe(2, ""));
  r = precon("submit " + good + db + " --token not-the-token");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("the controller at " + s.url + " answered 401: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(token from --token)"), std::string::npos) << r.output;
  r = test::run_command("cd '" + dir_.string() + "' && PRECON_TOKEN=wrong " + PRECON_BIN + " submit " + good + db);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("(token from $PRECON_TOKEN)"), std::string::npos) << r.output;
  EXPECT_TRUE(get(s.url, "/api/v1/experiments")["experiments"].empty()) << "a refused submission created an experiment";

  // No controller: none known for this database, or the known one is gone.
  r = precon("submit " + good + " --db " + (dir_ / "other.db").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no running controller known for " + (dir_ / "other.db").string()), std::string::npos)
      << r.output;
  EXPECT_EQ(s.stop(), 0);
  r = precon("submit " + good + db);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("cannot reach the controller at " + s.url + ": connection refused"), std::string::npos)
      << r.output;
}

TEST_F(CliServe, CancelStopsARunningExperimentAndRefusesAFinishedOneAndUnknownIds) {
  Serve s = serve();
  ASSERT_FALSE(s.url.empty()) << read_file(s.log);
  const std::string db = " --db " + s.db.string();
  test::CommandResult r = precon("submit " + write("long.toml", recipe(1000000, "")) + db);
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(wait_for([&] { return trial_state(s.url, 1) == "running"; }, std::chrono::seconds(60)))
      << read_file(s.log);

  r = precon("cancel 1" + db);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("experiment 1: cancel requested"), std::string::npos) << r.output;
  ASSERT_TRUE(done(s.url, 1, std::chrono::seconds(60))) << read_file(s.log);
  EXPECT_EQ(get(s.url, "/api/v1/experiments/1")["state"], "cancelled");
  EXPECT_EQ(trial_state(s.url, 1), "cancelled");

  r = precon("cancel 1" + db);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("experiment 1 already finished (cancelled); nothing to cancel"), std::string::npos)
      << r.output;
  r = precon("cancel --trial 1" + db);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("the controller at " + s.url + " answered 409: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nothing to cancel"), std::string::npos) << r.output;
  r = precon("cancel 99" + db);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no experiment \"99\" in " + s.db.string()), std::string::npos) << r.output;
  r = precon("cancel --trial 99" + db);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("the controller at " + s.url + " answered 404: "), std::string::npos) << r.output;
  r = precon("cancel" + db);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("name an experiment or pass --trial ID"), std::string::npos) << r.output;
}

// Ids and counts that cannot be are refused before anything is asked (exit 2, saying what is
// wanted): a trial id not above 0 (it once read as no id: "name an experiment"), and a log of 0
// lines (the API refuses lines=0; the CLI once printed the whole log).
TEST_F(CliServe, CancelAndLogsRefuseATrialIdOrLineCountThatCannotBe) {
  const std::string db = " --db " + (dir_ / "none.db").string();
  for (const std::string id : {"-5", "0"}) {
    const test::CommandResult r = precon("cancel --trial " + id + db);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--trial must be a trial id (a positive integer), got " + id), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("name an experiment"), std::string::npos) << r.output;
  }
  for (const std::string n : {"0", "100001"}) {
    const test::CommandResult r = precon("logs 1 -n " + n + db);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--lines"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("not in range 1 to 100000"), std::string::npos) << r.output;
  }
}

// --no-public-reads: reads need the read token (--read-token-file) or the admin token; the CLI,
// which sends the admin token, keeps working. A read token file others may read is refused.
TEST_F(CliServe, ReadsBehindATokenWithNoPublicReads) {
  const std::string token_file = write("read.token", "viewer-secret\n");
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  Serve s = serve(PRECON_BIN, {"--no-public-reads", "--read-token-file", token_file});
  ASSERT_FALSE(s.url.empty()) << read_file(s.log);
  EXPECT_EQ(http_request(s.url, "GET", "/healthz").status, 200);
  EXPECT_EQ(http_request(s.url, "GET", "/api/v1/experiments").status, 401);
  EXPECT_EQ(http_request(s.url, "GET", "/api/v1/experiments", "", {{"Authorization", "Bearer viewer-secret"}}).status, 200);
  const test::CommandResult r = precon("cancel --trial 7 --db " + s.db.string());  // over the API, with the admin token
  EXPECT_NE(r.output.find("answered 404: no trial 7"), std::string::npos) << r.output;
  EXPECT_EQ(s.stop(), 0);
  EXPECT_NE(read_file(s.log).find("precon serve: reads need the read token or the admin token"), std::string::npos)
      << read_file(s.log);

  fs::permissions(token_file, fs::perms::group_read | fs::perms::others_read, fs::perm_options::add);
  test::CommandResult open = precon("serve --db " + (dir_ / "x.db").string() + " --port 0 --slurm off --read-token-file " +
                                    token_file);
  EXPECT_NE(open.status, 0) << open.output;
  EXPECT_NE(open.output.find("--read-token-file " + token_file), std::string::npos) << open.output;
  open = precon("serve --db " + (dir_ / "x.db").string() + " --port 0 --public-reads --no-public-reads");
  EXPECT_NE(open.status, 0) << open.output;
  EXPECT_NE(open.output.find("excludes"), std::string::npos) << open.output;
}

// A client finds the controller by its address file and authenticates with the token file beside
// it: the moment the address is there, the token must be this controller's, whole. The address
// was written first, so a client (and HostileRecipe's submission, now and then) read an earlier
// controller's token, or an empty file, and got 401.
TEST_F(CliServe, TheTokenIsInPlaceBeforeTheAddressAppears) {
  for (int round = 0; round < 3; ++round) {
    const fs::path token_file = dir_ / "serve.db.token";
    std::ofstream(token_file) << "an-earlier-controllers-token\n";
    Serve s = start_serve();
    std::string url, token;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (url.find('\n') == std::string::npos && std::chrono::steady_clock::now() < give_up) {
      url = read_file(dir_ / "serve.db.url");  // polled without a pause: the window is short
      if (url.find('\n') != std::string::npos) token = read_file(token_file);
    }
    ASSERT_NE(url.find('\n'), std::string::npos) << "round " << round << ": no address\n" << read_file(s.log);
    EXPECT_NE(token, "an-earlier-controllers-token\n") << "round " << round << ": the address came before the token";
    ASSERT_TRUE(token.size() > 1 && token.back() == '\n')
        << "round " << round << ": the token read the moment the address appeared: '" << token << "'";
    EXPECT_EQ(token, read_file(token_file)) << "round " << round;
    EXPECT_EQ(http_request(url.substr(0, url.find('\n')), "GET", "/healthz").status, 200);
    EXPECT_EQ(s.stop(), 0) << read_file(s.log);
  }
}

TEST_F(CliServe, ServeRefusesAPortInUse) {
  Serve s = serve();
  ASSERT_FALSE(s.url.empty()) << read_file(s.log);
  const std::string port = s.url.substr(s.url.rfind(':') + 1);
  const test::CommandResult r =
      precon("serve --db " + (dir_ / "second.db").string() + " --port " + port + " --slurm off");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("cannot listen on 127.0.0.1:" + port + ": the address is already in use"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "second.db.url")) << "a controller that did not start left its address";
  EXPECT_EQ(http_request(s.url, "GET", "/healthz").status, 200) << "the first controller stopped";
}

}  // namespace
}  // namespace precon::orch::testing
