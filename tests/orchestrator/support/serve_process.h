// `precon serve` as a child process for tests that kill it with SIGKILL and start it again on the
// same database: the port is picked free once and kept across restarts (running workers report
// to it), and a start that finds it taken meanwhile is retried.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/orchestrator/support/controller_fixture.h"

namespace precon::orch::testing {

class ServeProcess {
 public:
  // `dir` holds precon.db, runs/ and serve.log; `args` are added to `precon serve`'s own.
  ServeProcess(std::filesystem::path dir, std::vector<std::string> args) : dir_(std::move(dir)), args_(std::move(args)) {}
  ~ServeProcess() {
    if (pid_ > 0) kill9();
  }

  // Starts it and waits until /healthz answers; false (with the log in the failure) otherwise.
  bool start() {
    if (port_ == 0) port_ = free_port();
    for (int tries = 0; tries < 20; ++tries) {
      pid_ = fork();
      if (pid_ == 0) {
        ::setenv("PRECON_TOKEN", "admin-secret", 1);
        for (const auto& [key, value] : env_) ::setenv(key.c_str(), value.c_str(), 1);
        std::freopen((dir_ / "serve.log").c_str(), "a", stderr);
        std::vector<std::string> a = {PRECON_BIN, "serve", "--db", (dir_ / "precon.db").string(), "--runs",
                                      (dir_ / "runs").string(), "--port", std::to_string(port_)};
        a.insert(a.end(), args_.begin(), args_.end());
        std::vector<char*> argv;
        for (std::string& s : a) argv.push_back(s.data());
        argv.push_back(nullptr);
        execv(PRECON_BIN, argv.data());
        _exit(127);
      }
      bool exited = false;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      bool up = false;
      while (!up && !exited && std::chrono::steady_clock::now() < deadline) {
        if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
          exited = true;
          break;
        }
        try {
          up = http_request(url(), "GET", "/healthz").status == 200;
        } catch (const std::exception&) {
        }
        if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the next look
      }
      if (up && !exited) return true;
      if (!exited) kill9();
      pid_ = -1;
      // Exited at once: the port was taken meanwhile (retried), or the start failed for good.
      if (log().find("ddress already in use") == std::string::npos) break;
    }
    ADD_FAILURE() << "precon serve did not start:\n" << log();
    return false;
  }
  // Environment variables set for the next start()s (fault injection).
  void set_env(const std::string& key, const std::string& value) { env_[key] = value; }
  void clear_env() { env_.clear(); }
  // Waits up to `timeout` for the controller to exit by itself; true when it did.
  bool wait_exit(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return pid_ <= 0;
  }
  void kill9() { end(SIGKILL); }
  void terminate() { end(SIGTERM); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const {
    std::ifstream in(dir_ / "serve.log");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

 private:
  void end(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::filesystem::path dir_;
  std::vector<std::string> args_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  std::map<std::string, std::string> env_;
};

}  // namespace precon::orch::testing
