// `precon run` and `precon serve` as a user starts them: the live view under a pseudo-terminal
// (redrawn in place, sized to the terminal, the leaderboard at the end), the dashboard they
// advertise only when they can serve it (the `web` target's output next to the program, or a
// message saying where they looked and how to build it), and a run whose run root or database
// cannot be written (it ends, with the reason, instead of retrying forever).
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <sstream>

#include "orchestrator/store/sqlite.h"
#include "orchestrator/store/store.h"
#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {
namespace {

class CliRun : public CliFixture {
 protected:
  // `precon ARGS` in dir_ on a pseudo-terminal of rows x columns; returns what it wrote and sets
  // status to its exit status.
  std::string on_terminal(const std::vector<std::string>& args, int columns, int rows, int& status) {
    winsize ws{};
    ws.ws_col = static_cast<unsigned short>(columns);
    ws.ws_row = static_cast<unsigned short>(rows);
    int master = -1;
    const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
    if (pid == 0) {
      std::vector<char*> argv{const_cast<char*>(PRECON_BIN)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      if (::chdir(dir_.c_str()) != 0) ::_exit(126);
      ::execv(PRECON_BIN, argv.data());
      ::_exit(127);
    }
    EXPECT_GT(pid, 0);
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO: the program ended and closed the terminal
      out.append(buf, static_cast<size_t>(n));
    }
    ::kill(pid, SIGKILL);  // only if it overran the deadline; a no-op on an exited zombie
    int raw = 0;
    ::waitpid(pid, &raw, 0);
    ::close(master);
    status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    return out;
  }
};

// Text as it stands on the screen line by line: escape sequences and carriage returns removed.
std::vector<std::string> screen_lines(const std::string& out) {
  const std::string plain = std::regex_replace(out, std::regex("\x1b\\[[0-9]*[A-Za-z]|\r"), "");
  std::vector<std::string> lines;
  std::istringstream in(plain);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST_F(CliRun, OnATerminalTheProgressRedrawsInPlaceAndEndsWithTheLeaderboard) {
  // Long enough (a few seconds) that every trial is seen running by a frame (one each 500 ms).
  std::ofstream(dir_ / "r.toml") << recipe(4000, "[sweep]\nmax_concurrent = 2\n[sweep.parameters]\n\"optimizer.lr\" = [0.001, 0.003]\n");
  int status = -1;
  const std::string out = on_terminal({"run", "r.toml", "--db", (dir_ / "precon.db").string(), "--runs",
                                       (dir_ / "runs").string(), "--cpus", "2", "--set", "train.log_every=20", "--set",
                                       "train.eval_every=500", "--set", "train.checkpoint_every=2000"}, 90, 30, status);
  EXPECT_EQ(status, 0) << out;
  // Redrawn in place: erase-line before each line and cursor-up over the previous frame.
  EXPECT_NE(out.find("\x1b[2Ktrial "), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\r\x1b\\[[0-9]+A\x1b\\[2K"))) << out;
  orch::Store store(dir_ / "precon.db");
  const std::vector<TrialRow> trials = store.trials(store.experiments().at(0).id);
  ASSERT_EQ(trials.size(), 2u);
  const std::vector<std::string> lines = screen_lines(out);
  for (const std::string& l : lines)
    if (l.starts_with("trial ") || l.starts_with("sweep: ")) {
      EXPECT_LE(l.size(), 89u) << "wider than the terminal: " << l;
    }
  // Each trial had a line of its own: its identifier, the value that differs, a bar, step/steps.
  for (const TrialRow& t : trials) {
    const std::regex row("^trial " + std::to_string(t.id) + " +lr=0\\.00[13] +\\[[#.]+\\] +[0-9]+/4000  ETA ");
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return std::regex_search(l, row); }))
        << "no progress line for trial " << t.id << " in\n" << out;
  }
  EXPECT_NE(out.find("sweep: 2 done, 0 running, 0 pending, 0 failed  elapsed "), std::string::npos) << out;
  const size_t board = out.find("objective: val_loss (lower is better)");
  ASSERT_NE(board, std::string::npos) << out;
  EXPECT_NE(out.find("At equal steps (step 4000)", board), std::string::npos) << out;
  EXPECT_NE(out.find("Pareto front", board), std::string::npos) << out;
  EXPECT_EQ(out.find("\x1b[", board), std::string::npos) << "the leaderboard is plain text";
}

TEST_F(CliRun, ServeSaysWhereItLookedWhenTheDashboardIsMissing) {
  // A copy of precon with no share/precon/web beside it: the API runs, / is not advertised.
  fs::create_directories(dir_ / "bin");
  fs::copy_file(PRECON_BIN, dir_ / "bin" / "precon");
  const std::string bin = (dir_ / "bin" / "precon").string();
  Serve s = serve(bin);
  ASSERT_FALSE(s.url.empty()) << read_file(s.log);
  EXPECT_EQ(http_request(s.url, "GET", "/healthz").status, 200);
  EXPECT_EQ(http_request(s.url, "GET", "/").status, 404);
  s.stop();
  const std::string log = read_file(s.log);
  EXPECT_NE(log.find("no dashboard: its files are not in " + (dir_ / "share" / "precon" / "web").string()),
            std::string::npos) << log;
  EXPECT_NE(log.find("--target web"), std::string::npos) << log;
  EXPECT_NE(log.find("--web-dir"), std::string::npos) << log;
  EXPECT_EQ(log.find("dashboard http"), std::string::npos) << log;

  // An explicit --web-dir without a dashboard is refused before anything starts, by both.
  std::ofstream(dir_ / "r.toml") << recipe(5, "");
  for (const std::string& sub : std::vector<std::string>{"serve --port 0", "run " + (dir_ / "r.toml").string()}) {
    const std::string cmd = bin + " " + sub + " --db " + (dir_ / "x.db").string() + " --web-dir " +
                            (dir_ / "nowhere").string() + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string refused;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) refused.append(buf, n);
    const int raw = ::pclose(p);
    EXPECT_EQ(WEXITSTATUS(raw), 2) << sub << ": " << refused;
    EXPECT_NE(refused.find("--web-dir " + (dir_ / "nowhere").string() + " holds no dashboard"), std::string::npos)
        << sub << ": " << refused;
    EXPECT_FALSE(fs::exists(dir_ / "x.db")) << sub << " started a controller";
  }

  // Files at ../share/precon/web from the program are found and served at /.
  fs::create_directories(dir_ / "share" / "precon" / "web");
  std::ofstream(dir_ / "share" / "precon" / "web" / "index.html") << "<!doctype html><title>beside the program</title>\n";
  Serve found = serve(bin);
  const ClientResponse index = http_request(found.url, "GET", "/");
  found.stop();
  EXPECT_EQ(index.status, 200);
  EXPECT_NE(index.body.find("beside the program"), std::string::npos) << index.body;
  EXPECT_NE(read_file(found.log).find("dashboard " + found.url + "/"), std::string::npos) << read_file(found.log);
}

// `precon run ARGS` in `dir`, killed after 120 s: before issue 28's fixes a run that could not
// write its run directories or its database retried forever; now it must end long before.
test::CommandResult run_bounded(const fs::path& dir, const std::string& args) {
  return test::run_command("cd '" + dir.string() + "' && timeout -s KILL 120 " + PRECON_BIN + " run " + args);
}

TEST_F(CliRun, RunDirectoryThatCannotBeCreatedFailsTheTrialAtOnce) {
  // A regular file where the run root's parent should be: mkdir says ENOTDIR, as it will every
  // time (root ignores a read-only mode, so this is the lasting error a test can make).
  std::ofstream(dir_ / "file") << "a regular file\n";
  std::ofstream(dir_ / "r.toml") << recipe(10, "[sweep]\nmax_attempts = 3\n[sweep.parameters]\n"
                                                "\"optimizer.lr\" = [0.001, 0.003]\n");
  const test::CommandResult r = run_bounded(dir_, "r.toml --quiet --cpus 1 --db run.db --runs file/runs");
  EXPECT_EQ(r.status, 1) << r.output;
  const std::string where = (dir_ / "file" / "runs").string();
  EXPECT_NE(r.output.find("failed: cannot create run directory " + where), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Not a directory (not retried"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("experiment 1 completed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("scheduler error"), std::string::npos) << r.output;

  Store store(dir_ / "run.db");
  const std::vector<TrialRow> trials = store.trials(1);
  ASSERT_EQ(trials.size(), 2u);
  for (const TrialRow& t : trials) {
    EXPECT_EQ(t.state, TrialState::failed);
    EXPECT_NE(t.reason.find("Not a directory"), std::string::npos) << t.reason;
    EXPECT_EQ(t.attempts, 0);
    EXPECT_TRUE(store.attempts(t.id).empty());
  }
}

TEST_F(CliRun, ReadAccessFlagsAreThoseOfServe) {
  // precon run takes precon serve's --public-reads / --no-public-reads, one of them at a time.
  std::ofstream(dir_ / "r.toml") << recipe(10, "");
  const test::CommandResult both = run_bounded(dir_, "r.toml --quiet --public-reads --no-public-reads");
  EXPECT_EQ(both.status, 2) << both.output;
  EXPECT_NE(both.output.find("--public-reads excludes --no-public-reads"), std::string::npos) << both.output;
  const test::CommandResult run = run_bounded(dir_, "r.toml --quiet --cpus 1 --db run.db --no-public-reads");
  EXPECT_EQ(run.status, 0) << run.output;
}

TEST_F(CliRun, DatabaseThatStaysUnwritableEndsTheRunNamingIt) {
  // The database refuses to record the end of an attempt, as a full disk refuses the writes that
  // need room: a trigger fails every update of an attempt row (and nothing else), so the trial
  // starts, trains and reports, and only its end cannot be stored.
  const fs::path db = dir_ / "serve.db";
  { Store create(db); }
  {
    sql::Database raw(db, false);
    raw.exec("CREATE TRIGGER unwritable BEFORE UPDATE ON attempts "
             "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
  }
  std::ofstream(dir_ / "r.toml") << recipe(10, "");
  const auto t0 = std::chrono::steady_clock::now();
  const test::CommandResult r = run_bounded(dir_, "r.toml --quiet --cpus 1 --db serve.db --runs runs --db-wait 1");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("precon: the database serve.db could not be written for 1 s ("), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("refused by the test"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("`precon serve --db serve.db` records what was not stored"), std::string::npos) << r.output;
  EXPECT_LT(took, 60) << r.output;

  // What it holds is intact: the trial is running, its one attempt open, its reports stored.
  int64_t trial_id = 0;
  {
    Store store(db);
    const std::vector<TrialRow> trials = store.trials(1);
    ASSERT_EQ(trials.size(), 1u);
    trial_id = trials[0].id;
    EXPECT_EQ(trials[0].state, TrialState::running);
    const std::vector<AttemptRow> attempts = store.attempts(trial_id);
    ASSERT_EQ(attempts.size(), 1u);
    EXPECT_EQ(attempts[0].ended_at, 0);
    EXPECT_GT(store.metric_count(trial_id), 0);
  }
  // Once it can be written again, a controller on it records the end the run could not.
  sql::Database(db, false).exec("DROP TRIGGER unwritable");
  Serve s = serve();
  ASSERT_FALSE(s.url.empty()) << read_file(s.log);
  ASSERT_TRUE(done(s.url, 1, std::chrono::seconds(60))) << read_file(s.log);
  const nlohmann::json t = get(s.url, "/api/v1/trials/" + std::to_string(trial_id));
  EXPECT_EQ(t["state"], "completed") << t.dump();
  EXPECT_EQ(t["last_step"], 10) << t.dump();
  EXPECT_EQ(t["attempts"].size(), 1u) << t.dump();
}

#ifdef PRECON_WEB_OUT
TEST_F(CliRun, TheBuildsPreconServesTheWebTargetsDashboard) {
  // The layout deploy/quickstart.sh builds: <build>/orchestrator/precon and the `web` target's
  // <build>/share/precon/web.
  Serve s = serve(PRECON_BIN);
  const ClientResponse index = http_request(s.url, "GET", "/");
  const ClientResponse app = http_request(s.url, "GET", "/app.js");
  s.stop();
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.body, read_file(fs::path(PRECON_WEB_OUT) / "index.html"));
  EXPECT_EQ(app.status, 200);
  EXPECT_NE(read_file(s.log).find("dashboard " + s.url + "/"), std::string::npos) << read_file(s.log);
}
#endif

}  // namespace
}  // namespace precon::orch::testing
