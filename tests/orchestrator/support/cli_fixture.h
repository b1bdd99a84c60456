// The CLI tests' fixture: `precon` run as a user runs it (its exit status and what it prints),
// and a `precon serve` in the background on a port it picks itself, stopped when the test ends.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <sstream>
#include <utility>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/orchestrator/support/controller_fixture.h"

namespace precon::orch::testing {

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A `precon serve` child process with its stderr in `log`; SIGTERM and waited for by stop() or
// when it goes out of scope (a failed assertion leaves no server behind).
struct Serve {
  pid_t pid = -1;
  std::string url;  // empty when it did not start (its reason is in `log`)
  fs::path log;
  fs::path db;

  Serve() = default;
  Serve(Serve&& o) noexcept : pid(std::exchange(o.pid, -1)), url(std::move(o.url)), log(std::move(o.log)), db(std::move(o.db)) {}
  Serve& operator=(Serve&&) = delete;
  ~Serve() { stop(); }
  // Its exit status after SIGTERM (-1 if it was not running or did not exit normally).
  int stop() {
    int status = -1;
    if (pid > 0) {
      int raw = 0;
      ::kill(pid, SIGTERM);
      if (::waitpid(pid, &raw, 0) == pid && WIFEXITED(raw)) status = WEXITSTATUS(raw);
    }
    pid = -1;
    return status;
  }
};

class CliFixture : public ControllerFixture {
 protected:
  // `precon ARGS` (a shell command line) in dir_: its exit status and stdout + stderr.
  test::CommandResult precon(const std::string& args) const {
    return test::run_command("cd '" + dir_.string() + "' && " + PRECON_BIN + " " + args);
  }

  // `BIN serve --db dir_/serve.db --port 0 --runs dir_/runs --slurm off EXTRA...` started in the
  // background (after removing an address an earlier one left); returns at once.
  Serve start_serve(const std::string& bin = PRECON_BIN, const std::vector<std::string>& extra = {}) {
    Serve s;
    s.log = dir_ / "serve.log";
    s.db = dir_ / "serve.db";
    fs::remove(s.db.string() + ".url");
    std::vector<std::string> args{bin, "serve", "--db", s.db.string(), "--port", "0", "--runs", (dir_ / "runs").string(),
                                  "--slurm", "off"};
    args.insert(args.end(), extra.begin(), extra.end());
    s.pid = ::fork();
    if (s.pid == 0) {
      const int fd = ::open(s.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDERR_FILENO);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    return s;
  }

  // start_serve(), then waits until it wrote its address next to the database (s.url), or exited.
  Serve serve(const std::string& bin = PRECON_BIN, const std::vector<std::string>& extra = {}) {
    Serve s = start_serve(bin, extra);
    const std::string url_file = s.db.string() + ".url";
    bool exited = false;
    wait_for([&] {
      if (::waitpid(s.pid, nullptr, WNOHANG) == s.pid) exited = true;
      return exited || read_file(url_file).find('\n') != std::string::npos;
    }, std::chrono::seconds(30));
    if (exited) {
      s.pid = -1;
      return s;
    }
    s.url = read_file(url_file);
    s.url = s.url.substr(0, s.url.find('\n'));
    return s;
  }
};

}  // namespace precon::orch::testing
