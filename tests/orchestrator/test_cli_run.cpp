// `precon run` and `precon serve` as a user starts them: the live view under a pseudo-terminal
// (redrawn in place, sized to the terminal, the leaderboard at the end), and the dashboard they
// advertise only when they can serve it (the `web` target's output next to the program, or a
// message saying where they looked and how to build it).
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <sstream>

#include "orchestrator/store/store.h"
#include "tests/orchestrator/cli_fixture.h"

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
    if (l.starts_with("trial ") || l.starts_with("sweep: ")) EXPECT_LE(l.size(), 89u) << "wider than the terminal: " << l;
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
