// The controller locked down, over real sockets: tokens never leave it (no GET answer, log line,
// run-directory file or worker environment holds the admin token or a trial's token), worker
// reports with the right token but a malformed body store nothing, trial routes take no paths,
// and `precon serve`/`precon run` listen beyond loopback only with a token the operator chose.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <future>
#include <memory>
#include <thread>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <vector>

#include "orchestrator/service/controller.h"
#include "orchestrator/service/views.h"
#include "tests/common/test_util.h"
#include "tests/orchestrator/support/controller_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

using test::slurp;

std::string code_of(const ClientResponse& r) {
  const json j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"].value("code", "?") : "?";
}

class Security : public ControllerFixture {
 protected:
  std::unique_ptr<orch::Controller> start(const std::string& trainer, const std::string& admin_token) {
    ControllerOptions o = controller_options();
    o.trainer = trainer;
    o.admin_token = admin_token;
    o.log = [this](const std::string& line) {
      std::lock_guard lock(log_mutex_);
      log_.push_back(line);
    };
    auto c = std::make_unique<orch::Controller>(o);
    c->start();
    return c;
  }
  // A controller running one trial of a fake trainer that writes "worker-log-line" to stderr and
  // waits for RUN_DIR/finish; `logging` says whether the line arrived within 20 s.
  struct LoggingTrial {
    std::unique_ptr<orch::Controller> controller;
    std::string url, trial;
    int64_t experiment = 0;
    fs::path run_dir;
    bool logging = false;
  };
  LoggingTrial start_logging_trial() {
    const fs::path trainer = dir_ / "fake-train.sh";
    std::ofstream(trainer) << "#!/bin/sh\necho worker-log-line >&2\n"
                              "while [ ! -e \"$4/finish\" ]; do sleep 0.05; done\n";
    fs::permissions(trainer, fs::perms::owner_all);
    LoggingTrial lt;
    lt.controller = start(trainer.string(), "admin-secret");
    lt.url = lt.controller->url();
    lt.experiment = submit(lt.url, recipe(5, ""));
    const json trial = get(lt.url, "/api/v1/experiments/" + std::to_string(lt.experiment) + "/trials")["trials"][0];
    lt.trial = std::to_string(trial["id"].get<int64_t>());
    lt.run_dir = trial["run_dir"].get<std::string>();
    const fs::path log = lt.run_dir / "stderr.log";
    lt.logging = wait_for([&] { return slurp(log).find("worker-log-line") != std::string::npos; },
                          std::chrono::seconds(20));
    return lt;
  }
  std::vector<std::string> log_lines() {
    std::lock_guard lock(log_mutex_);
    return log_;
  }

  std::mutex log_mutex_;
  std::vector<std::string> log_;
};

// Every answer of every GET route, every controller log line, every file a trial's run leaves,
// and the workers' environment, after a sweep of real workers that reported, checkpointed and
// were refused once: none holds the admin token or a trial token.
TEST_F(Security, TokensAppearInNoGetAnswerLogLineRunFileOrWorkerEnvironment) {
  const std::string admin = "admin-" + orch::random_hex_token();
  // The controller's own environment holds the admin token, as `PRECON_TOKEN=... precon serve` has.
  ::setenv("PRECON_TOKEN", admin.c_str(), 1);
  const fs::path seen = dir_ / "seen";
  fs::create_directories(seen);
  const fs::path trainer = dir_ / "train-wrapper.sh";
  std::ofstream(trainer) << "#!/bin/sh\nprintf '%s\\n' \"$PRECON_TRIAL_TOKEN\" > '" << seen.string()
                         << "'/token.$$\nenv > '" << seen.string() << "'/env.$$\nexec '" << PRECON_TRAIN_BIN
                         << "' \"$@\"\n";
  fs::permissions(trainer, fs::perms::owner_all);
  auto c = start(trainer.string(), admin);
  const std::string url = c->url();
  const ClientResponse submitted =
      post(url, "/api/v1/experiments",
           json{{"recipe", recipe(12, "[sweep.parameters]\n\"optimizer.lr\" = [0.001, 0.003]\n")}}.dump(), admin);
  ASSERT_EQ(submitted.status, 201) << submitted.body;
  const int64_t id = json::parse(submitted.body)["id"];
  const bool finished = done(url, id);
  ::unsetenv("PRECON_TOKEN");
  ASSERT_TRUE(finished) << "the sweep did not finish";

  std::vector<std::string> tokens;
  std::string worker_env;
  for (const auto& entry : fs::directory_iterator(seen)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("token.", 0) == 0) {
      std::string t = slurp(entry.path());
      while (!t.empty() && t.back() == '\n') t.pop_back();
      tokens.push_back(t);
    } else {
      worker_env += slurp(entry.path());
    }
  }
  ASSERT_EQ(tokens.size(), 2u);
  for (const std::string& t : tokens) ASSERT_EQ(t.size(), 32u) << t;
  EXPECT_NE(tokens[0], tokens[1]);  // one per trial
  EXPECT_EQ(worker_env.find(admin), std::string::npos) << "a worker was given the admin token";
  EXPECT_EQ(worker_env.find("PRECON_TOKEN="), std::string::npos);

  // A report that is refused, and a state change with the admin token, are in the logs too.
  const std::string trial = std::to_string(get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0]["id"].get<int64_t>());
  EXPECT_EQ(post(url, "/api/v1/report", R"({"trial": )" + trial + R"(, "records": []})", tokens[0] + "x").status, 401);
  EXPECT_EQ(post(url, "/api/v1/trials/" + trial + "/cancel", "", admin).status, 409);

  std::vector<std::string> secrets = tokens;
  secrets.push_back(admin);
  const auto expect_clean = [&](const std::string& where, const std::string& text) {
    for (const std::string& s : secrets) EXPECT_EQ(text.find(s), std::string::npos) << where << " holds a token";
  };
  const std::string e = std::to_string(id);
  std::vector<std::string> targets = {"/healthz", "/metrics", "/api/v1/experiments", "/api/v1/experiments/" + e,
                                      "/api/v1/experiments/" + e + "/trials", "/api/v1/experiments/" + e + "/best",
                                      "/api/v1/events?limit=10000", "/api/v1/dashboard/experiments",
                                      "/api/v1/dashboard/experiments/" + e,
                                      "/api/v1/dashboard/experiments/" + e + "/curves", "/"};
  const json listed = get(url, "/api/v1/experiments/" + e + "/trials");  // kept: the loop reads into it
  for (const json& t : listed["trials"]) {
    const std::string tid = std::to_string(t["id"].get<int64_t>());
    for (const char* suffix : {"", "/metrics?max_points=0", "/logs?stream=stdout&lines=100000",
                              "/logs?stream=stderr&lines=100000"})
      targets.push_back("/api/v1/trials/" + tid + suffix);
  }
  for (const std::string& target : targets) {
    const ClientResponse r = http_request(url, "GET", target);
    EXPECT_TRUE(r.status == 200 || (target == "/" && r.status == 404)) << target << ": " << r.status;
    expect_clean("GET " + target, r.body);
    for (const auto& [name, value] : r.headers) expect_clean("GET " + target + " header " + name, value);
  }
  const std::vector<std::string> lines = log_lines();
  EXPECT_FALSE(lines.empty());
  for (const std::string& line : lines) expect_clean("log line \"" + line + "\"", line);
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir_ / "runs")) {
    if (!entry.is_regular_file()) continue;
    ++files;
    expect_clean(entry.path().string(), slurp(entry.path()));
  }
  EXPECT_GT(files, 10u);  // configs, logs, metrics and checkpoints were looked at
  c->stop();
}

// Malformed reports from the worker that holds the right token: each is refused with 400 and the
// code that says why, and none stores a point, a metric name or a step.
TEST_F(Security, MalformedReportsWithTheRightTokenAreRefusedAndStoreNothing) {
  const fs::path trainer = dir_ / "fake-train.sh";
  std::ofstream(trainer) << "#!/bin/sh\nprintf '%s\\n' \"$PRECON_TRIAL_TOKEN\" > \"$4/token.txt\"\n"
                            "while [ ! -e \"$4/finish\" ]; do sleep 0.05; done\n";  // waits for the test
  fs::permissions(trainer, fs::perms::owner_all);
  auto c = start(trainer.string(), "admin-secret");
  const std::string url = c->url();
  const int64_t id = submit(url, recipe(5, ""));
  const json trial_json = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  const int64_t trial = trial_json["id"];
  const fs::path run_dir = trial_json["run_dir"].get<std::string>();
  ASSERT_TRUE(wait_for([&] { return fs::exists(run_dir / "token.txt") && fs::file_size(run_dir / "token.txt") == 33; },
                       std::chrono::seconds(20)));
  std::string token = slurp(run_dir / "token.txt");
  token.pop_back();
  const std::string t = std::to_string(trial);
  ClientResponse r = post(url, "/api/v1/report", R"({"trial": )" + t + R"(, "records": [{"step": 1, "values": {"loss": 2}}]})", token);
  ASSERT_EQ(r.status, 200) << r.body;

  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::string prefix = R"({"trial": )" + t + R"(, "records": )";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "bad_json"},
      {"{", "bad_json"},
      {"not json", "bad_json"},
      {R"({"trial": )" + t + R"(, "records": )" + deep + "}", "bad_json"},
      {"[]", "bad_report"},
      {"\"report\"", "bad_report"},
      {R"({"records": [{"step": 2, "values": {"x": 1}}]})", "bad_report"},
      {R"({"trial": )" + t + "}", "bad_report"},
      {prefix + R"({"step": 2, "values": {"x": 1}}})", "bad_report"},
      {prefix + R"(["step"]})", "bad_report"},
      {prefix + R"([{"step": 2}]})", "bad_report"},
      {prefix + R"([{"step": 2, "values": [1, 2]}]})", "bad_report"},
      {prefix + R"([{"step": 2, "values": {"x": "1.5"}}]})", "bad_report"},
      {prefix + R"([{"step": 2, "values": {"x": true}}]})", "bad_report"},
      {prefix + R"([{"step": 2, "values": {"x": {"nested": 1}}}]})", "bad_report"},
      {prefix + R"([{"step": 2, "values": {"": 1}}]})", "bad_report"},
      {prefix + R"([{"step": 2, "values": {")" + std::string(129, 'n') + R"(": 1}}]})", "bad_report"},
      {prefix + R"([{"step": 2, "values": {"x": 1}}, {"step": 3, "values": {"x": NaN}}]})", "bad_json"},
      {prefix + R"([{"step": 2, "values": {"x": 1}}, "junk"]})", "bad_report"},
  };
  for (const auto& [body, code] : cases) {
    SCOPED_TRACE(body.substr(0, 120));
    r = post(url, "/api/v1/report", body, token);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(code_of(r), code) << r.body;
  }
  EXPECT_EQ(c->store().metric_count(trial), 1);
  EXPECT_EQ(c->store().metric_names(trial), std::vector<std::string>{"loss"});
  EXPECT_EQ(c->store().trial(trial)->last_step, 1);
  std::ofstream(run_dir / "finish").put('\n');
  ASSERT_TRUE(done(url, id, std::chrono::seconds(30)));
  c->stop();
}

// Reports from the worker that holds the right token cannot make its record absurd: a step past
// train.steps (2^63-1 was shown as the trial's step) or more than 256 distinct metric names (one
// report of 20,000 was taken) is refused whole with 400 bad_report, and nothing recorded changes.
// A 128-layer MoE run's per-layer names (moe_load_max.layerN) count as one name.
TEST_F(Security, ReportsPastTheTrialsStepsOrNameBoundAreRefusedAndChangeNothing) {
  const fs::path trainer = dir_ / "fake-train.sh";
  std::ofstream(trainer) << "#!/bin/sh\nprintf '%s\\n' \"$PRECON_TRIAL_TOKEN\" > \"$4/token.txt\"\n"
                            "while [ ! -e \"$4/finish\" ]; do sleep 0.05; done\n";  // waits for the test
  fs::permissions(trainer, fs::perms::owner_all);
  auto c = start(trainer.string(), "admin-secret");
  const std::string url = c->url();
  std::string text = recipe(5, "");
  text.replace(text.find("n_layer = 1\n"), 12, "n_layer = 128\n");
  const int64_t id = submit(url, text);
  const json trial_json = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  const int64_t trial = trial_json["id"];
  const fs::path run_dir = trial_json["run_dir"].get<std::string>();
  ASSERT_TRUE(wait_for([&] { return fs::exists(run_dir / "token.txt") && fs::file_size(run_dir / "token.txt") == 33; },
                       std::chrono::seconds(20)));
  std::string token = slurp(run_dir / "token.txt");
  token.pop_back();
  const std::string t = std::to_string(trial);
  auto report = [&](int64_t step, const json& values) {
    return post(url, "/api/v1/report", json{{"trial", trial}, {"records", {{{"step", step}, {"values", values}}}}}.dump(),
                token);
  };
  auto refused = [&](const ClientResponse& r, const std::string& says) {
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(code_of(r), "bad_report") << r.body;
    EXPECT_NE(r.body.find(says), std::string::npos) << r.body;
  };
  // What a deep MoE trainer reports at a step: its usual names and one per layer.
  json usual = {{"train_loss", 2.5}, {"lr", 0.003}, {"grad_norm", 1.0}, {"tokens_per_second", 1e5},
                {"step_seconds", 0.1}, {"moe_aux_loss", 0.01}, {"moe_load_max", 1.2}};
  for (int l = 0; l < 128; ++l) usual["moe_load_max.layer" + std::to_string(l)] = 1.1;
  ClientResponse r = report(1, usual);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(report(5, {{"val_loss", 2.4}}).status, 200);  // the last step, validation at it

  refused(report(6, {{"train_loss", 1.0}}), "step 6 is past trial " + t + "'s train.steps (5)");
  refused(report(INT64_MAX, {{"train_loss", 1.0}}), "train.steps (5)");
  refused(post(url, "/api/v1/report",
               json{{"trial", trial},
                    {"records", {{{"step", 2}, {"values", {{"train_loss", 2.0}}}},
                                 {{"step", 7}, {"values", {{"train_loss", 2.0}}}}}}}.dump(),
               token),
          "step 7");
  json many;
  for (int i = 0; i < 20000; ++i) many["m" + std::to_string(i)] = 1.0;
  refused(report(3, many), "more than 256");

  // 9 counted so far (8 names and the per-layer family): 247 more fit, not one further; a layer
  // index the model does not have is a name of its own.
  json fill;
  for (int i = 0; i < 247; ++i) fill["f" + std::to_string(i)] = 1.0;
  EXPECT_EQ(report(3, fill).status, 200);
  refused(report(4, {{"one_more", 1.0}}), "257 distinct metric names, more than 256");
  refused(report(4, {{"moe_load_max.layer128", 1.0}}), "more than 256");
  EXPECT_EQ(report(4, {{"train_loss", 2.2}, {"moe_load_max.layer127", 1.0}}).status, 200);

  EXPECT_EQ(c->store().trial(trial)->last_step, 5);
  EXPECT_EQ(get(url, "/api/v1/trials/" + t)["last_step"], 5);
  EXPECT_EQ(c->store().metric_names(trial).size(), 8u + 128u + 247u);
  EXPECT_EQ(c->store().metric_count(trial), 8 + 128 + 247 + 2);
  std::ofstream(run_dir / "finish").put('\n');
  ASSERT_TRUE(done(url, id, std::chrono::seconds(30)));
  c->stop();
}

// A user's long text comes back cut in an error: a 5,000-character experiment name is quoted
// to 200 characters and "…", not whole.
TEST_F(Security, ALongNameIsEchoedCutShortInErrors) {
  auto c = start("/bin/true", "admin-secret");
  std::string text = recipe(5, "");
  text.replace(text.find("name = \"tiny\""), 13, "name = \"" + std::string(5000, 'n') + "\"");
  const ClientResponse r = post(c->url(), "/api/v1/experiments", json{{"recipe", text}, {"source", "t.toml"}}.dump(),
                                "admin-secret");
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 400);
  EXPECT_EQ(code_of(r), "bad_recipe") << r.body.substr(0, 400);
  const std::string message = json::parse(r.body)["error"]["message"];
  EXPECT_NE(message.find("experiment.name: \"" + std::string(200, 'n') + "…\" is not valid"), std::string::npos)
      << message;
  EXPECT_LT(message.size(), 400u) << message;
  c->stop();
}

// No trial route takes a path: a hostile id or stream is refused, never resolved to a file.
TEST_F(Security, TrialRoutesTakeNoPaths) {
  LoggingTrial lt = start_logging_trial();
  ASSERT_TRUE(lt.logging) << "the fake trainer wrote no log line in 20 s";
  auto& c = lt.controller;
  const std::string url = lt.url, t = lt.trial;
  const int64_t id = lt.experiment;
  const fs::path run_dir = lt.run_dir;
  EXPECT_NE(get(url, "/api/v1/trials/" + t + "/logs")["text"].get<std::string>().find("worker-log-line"),
            std::string::npos);
  const std::vector<std::string> hostile = {
      "/api/v1/trials/..%2f..%2f..%2fetc%2fpasswd/logs",
      "/api/v1/trials/%2e%2e/logs",
      "/api/v1/trials/%252e%252e%252fetc/logs",
      "/api/v1/trials/" + t + "%2f..%2f..%2fetc/logs",
      "/api/v1/trials/" + t + "%00/logs",
      "/api/v1/trials/" + t + "/logs?stream=../../../../etc/passwd",
      "/api/v1/trials/" + t + "/logs?stream=%2e%2e%2fconfig.toml",
      "/api/v1/trials/" + t + "/logs?stream=%252e%252e%252fstderr",
      "/api/v1/trials/" + t + "/logs?stream=stderr%00.txt",
      "/api/v1/trials/" + t + "/logs?stream=/etc/passwd",
      "/api/v1/trials/" + t + "/metrics?name=../../etc/passwd",
      "/api/v1/trials/" + t + "/../../../../etc/passwd",
      "/api/v1/experiments/1%2f..%2f..%2fetc/trials",
      "/api/v1/dashboard/experiments/..%2f1/curves",
  };
  for (const std::string& target : hostile) {
    const ClientResponse r = http_request(url, "GET", target);
    EXPECT_TRUE(r.status == 400 || r.status == 403 || r.status == 404 ||
                (r.status == 200 && target.find("metrics?") != std::string::npos))
        << target << ": " << r.status << " " << r.body;
    EXPECT_EQ(r.body.find("root:"), std::string::npos) << target;
    EXPECT_EQ(r.body.find("worker-log-line"), std::string::npos) << target;
    EXPECT_EQ(r.body.find("[optimizer]"), std::string::npos) << target;
  }
  std::ofstream(run_dir / "finish").put('\n');
  ASSERT_TRUE(done(url, id, std::chrono::seconds(30)));
  c->stop();
}

// ---- Logs that are not what they seem ----

// Runs f on a thread and waits at most `limit` for it: a hang becomes a failure, not a stuck test
// (the thread is left behind).
template <class F>
bool finishes_within(std::chrono::seconds limit, F f) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> ended = done->get_future();
  std::thread([done, f] {
    f();
    done->set_value();
  }).detach();
  return ended.wait_for(limit) == std::future_status::ready;
}

TEST_F(Security, AHugeLogWithoutNewlinesIsTailedFromOneBoundedWindow) {
  // 2 GiB, sparse (no disk used): 12 MiB without a newline, then two short lines at the end. The
  // old tail read 4-KiB chunks backwards and prepended each (quadratic, for minutes here).
  const fs::path log = dir_ / "stderr.log";
  {
    std::ofstream out(log, std::ios::binary);
    out.seekp(2LL << 30);
    out << std::string(12 << 20, 'x') << "\nnext to last\nlast\n";
  }
  std::string one, many;
  ASSERT_TRUE(finishes_within(std::chrono::seconds(30), [&] {
    one = tail_file(log.string(), 1);
    many = tail_file(log.string(), 100000);
  })) << "tail_file did not answer within 30 s";
  EXPECT_EQ(one, "last\n");
  // A longer tail starts at the window's first complete line: the 12-MiB line is cut off.
  EXPECT_EQ(many, "next to last\nlast\n");
  std::ofstream(dir_ / "small.log") << "a\nb\nc";
  EXPECT_EQ(tail_file((dir_ / "small.log").string(), 2), "b\nc");
  EXPECT_EQ(tail_file((dir_ / "small.log").string(), 5), "a\nb\nc");
  EXPECT_EQ(tail_file((dir_ / "missing.log").string(), 5), "");
}

TEST_F(Security, AFifoALinkOrADirectoryAsALogIsRefusedAtOnce) {
  const fs::path fifo = dir_ / "fifo.log", link = dir_ / "link.log", target = dir_ / "target.log";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(target) << "secret\n";
  fs::create_symlink(target, link);
  fs::create_directories(dir_ / "dir.log");
  for (const fs::path& p : {fifo, link, dir_ / "dir.log"}) {
    std::string error;
    ASSERT_TRUE(finishes_within(std::chrono::seconds(10), [&error, p] {
      try {
        tail_file(p.string(), 10);
      } catch (const LogFileError& e) {
        error = e.what();
      }
    })) << p << ": tail_file blocked";  // the old ifstream waited for a writer to open the FIFO
    EXPECT_NE(error.find(p.string()), std::string::npos) << p << ": " << error;
    EXPECT_NE(error.find(p == link ? "symbolic link" : "not a regular file"), std::string::npos) << error;
  }
}

TEST_F(Security, ALogRouteOnAFifoAnswersAConflictAndTheServerStaysResponsive) {
  LoggingTrial lt = start_logging_trial();
  ASSERT_TRUE(lt.logging) << "the fake trainer wrote no log line in 20 s";
  auto& c = lt.controller;
  const std::string url = lt.url, t = lt.trial;
  const int64_t id = lt.experiment;
  const fs::path run_dir = lt.run_dir;
  fs::remove(run_dir / "stdout.log");
  ASSERT_EQ(::mkfifo((run_dir / "stdout.log").c_str(), 0600), 0);
  // Each request on the FIFO is answered at once (the old open waited for a writer, holding an io
  // thread for good), and the server goes on answering the others.
  for (int i = 0; i < 8; ++i) {
    const ClientResponse r = http_request(url, "GET", "/api/v1/trials/" + t + "/logs?stream=stdout&lines=1");
    EXPECT_EQ(r.status, 409) << r.body;
    EXPECT_NE(r.body.find("bad_log"), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("not a regular file"), std::string::npos) << r.body;
  }
  EXPECT_EQ(http_request(url, "GET", "/healthz").status, 200);
  EXPECT_NE(get(url, "/api/v1/trials/" + t + "/logs")["text"].get<std::string>().find("worker-log-line"),
            std::string::npos);
  std::ofstream(run_dir / "finish").put('\n');
  ASSERT_TRUE(done(url, id, std::chrono::seconds(30)));
  c->stop();
}

// ---- Listening beyond loopback ----

class Binding : public ControllerFixture {
 protected:
  // `precon ARGS` with PRECON_TOKEN unset; its status and output.
  test::CommandResult precon(const std::string& args) const {
    return test::run_command("env -u PRECON_TOKEN " + std::string(PRECON_BIN) + " " + args + " --db " +
                             (dir_ / "precon.db").string());
  }
};

TEST_F(Binding, BeyondLoopbackNeedsAConfiguredTokenWithAClearError) {
  std::ofstream(dir_ / "r.toml") << recipe(5, "");
  for (const char* bind : {"0.0.0.0", "::", "10.1.2.3"}) {
    for (const std::string& sub : std::vector<std::string>{"serve --port 0", "run " + (dir_ / "r.toml").string()}) {
      const test::CommandResult r = precon(sub + " --bind " + bind);
      SCOPED_TRACE(sub + " --bind " + bind);
      EXPECT_EQ(r.status, 2) << r.output;
      EXPECT_NE(r.output.find(std::string("listening on ") + bind +
                              " makes the controller reachable from other machines"),
                std::string::npos) << r.output;
      EXPECT_NE(r.output.find("--admin-token-file"), std::string::npos) << r.output;
    }
  }
  EXPECT_FALSE(fs::exists(dir_ / "precon.db.token"));  // refused before anything was written

  const fs::path open_file = dir_ / "token-0644";
  std::ofstream(open_file) << "a-token-others-can-read\n";
  fs::permissions(open_file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  test::CommandResult r = precon("serve --port 0 --bind 0.0.0.0 --admin-token-file " + open_file.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("readable by group or others; run `chmod 600"), std::string::npos) << r.output;
  r = precon("serve --port 0 --bind 0.0.0.0 --admin-token-file " + (dir_ / "absent").string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("No such file"), std::string::npos) << r.output;
  const fs::path empty = dir_ / "token-empty";
  std::ofstream(empty) << "\n";
  fs::permissions(empty, fs::perms::owner_read | fs::perms::owner_write);
  r = precon("serve --port 0 --bind 0.0.0.0 --admin-token-file " + empty.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("first line is empty"), std::string::npos) << r.output;
  r = precon("serve --port 0 --bind 0.0.0.0 --admin-token x --admin-token-file " + empty.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("keep one"), std::string::npos) << r.output;
}

// With a token from a file (0600) it listens on every interface and that token, and no other,
// opens the state-changing routes.
TEST_F(Binding, ATokenFileOpensEveryInterface) {
  const fs::path file = dir_ / "admin.token";
  const std::string token = "file-token-" + orch::random_hex_token();
  std::ofstream(file) << token << "\n";
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  const std::string db = (dir_ / "precon.db").string(), runs = (dir_ / "runs").string();
  const pid_t pid = fork();
  if (pid == 0) {
    ::unsetenv("PRECON_TOKEN");
    std::freopen((dir_ / "serve.log").c_str(), "w", stderr);
    execl(PRECON_BIN, PRECON_BIN, "serve", "--db", db.c_str(), "--runs", runs.c_str(), "--port", "0", "--bind",
          "0.0.0.0", "--admin-token-file", file.c_str(), "--slurm", "off", (char*)nullptr);
    _exit(127);
  }
  std::string url;
  const bool up = wait_for([&] {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return true;
    std::ifstream(db + ".url") >> url;
    return !url.empty() && slurp(db + ".token") == token + "\n";
  }, std::chrono::seconds(60));
  ASSERT_TRUE(up && !url.empty()) << slurp(dir_ / "serve.log");
  const std::string port = url.substr(url.rfind(':') + 1);
  const std::string local = "http://127.0.0.1:" + port;
  ASSERT_TRUE(wait_for([&] {
    try {
      return http_request(local, "GET", "/healthz").status == 200;
    } catch (const ClientError&) {
      return false;
    }
  }, std::chrono::seconds(30))) << slurp(dir_ / "serve.log");
  EXPECT_EQ(post(local, "/api/v1/experiments/999/cancel", "", token).status, 404);  // let in: no such experiment
  EXPECT_EQ(post(local, "/api/v1/experiments/999/cancel", "", "guess").status, 401);
  EXPECT_EQ(post(local, "/api/v1/experiments/999/cancel", "", "").status, 401);
  EXPECT_EQ(slurp(dir_ / "serve.log").find(token), std::string::npos) << "the token was logged";
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(dir_ / "serve.log");
}

}  // namespace
}  // namespace precon::orch::testing
