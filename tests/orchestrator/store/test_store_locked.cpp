// Another process holding the controller's database locked (the sqlite3 program in BEGIN
// EXCLUSIVE) while workers report, over real sockets: /healthz keeps answering and says the store
// is blocked (so does /metrics), reports are answered 503 store_busy with Retry-After at once, and
// once the lock is released every point sent arrives: the store holds exactly what was sent.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "orchestrator/service/controller.h"
#include "orchestrator/store/store.h"
#include "tests/orchestrator/support/controller_fixture.h"
#include "worker/report/reporter.h"

namespace precon::orch::testing {
namespace {

using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

double elapsed_s(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// The sqlite3 program on PATH ("" when there is none).
std::string sqlite3_program() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(start, end - start)) / "sqlite3";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return "";
}

// `sqlite3 DB` in another process, in BEGIN EXCLUSIVE from the constructor until release().
class ExternalLock {
 public:
  explicit ExternalLock(const fs::path& db) {
    const std::string program = sqlite3_program();
    if (program.empty()) {
      error_ = "the sqlite3 program is not on PATH (deploy/install-deps.sh installs it)";
      return;
    }
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) {
      error_ = "pipe failed";
      return;
    }
    const std::string file = db.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to_child[0], STDIN_FILENO);
      ::dup2(from_child[1], STDOUT_FILENO);
      ::execl(program.c_str(), "sqlite3", "-batch", file.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    in_ = to_child[1];
    out_ = from_child[0];
    write(".timeout 10000\nBEGIN EXCLUSIVE;\nSELECT 'locked';\n");
    std::string said;
    const auto end = SteadyClock::now() + std::chrono::seconds(20);
    while (said.find("locked\n") == std::string::npos && SteadyClock::now() < end) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char chunk[256];
      const ssize_t n = ::read(out_, chunk, sizeof chunk);
      if (n <= 0) break;
      said.append(chunk, static_cast<size_t>(n));
    }
    if (said.find("locked\n") == std::string::npos) error_ = "sqlite3 did not take the lock: " + said;
  }
  ~ExternalLock() {
    release();
    if (out_ >= 0) ::close(out_);
  }
  ExternalLock(const ExternalLock&) = delete;
  ExternalLock& operator=(const ExternalLock&) = delete;

  const std::string& error() const { return error_; }
  // COMMIT, and the program exits.
  void release() {
    if (in_ < 0) return;
    write("COMMIT;\n.quit\n");
    ::close(in_);
    in_ = -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }

 private:
  void write(const std::string& text) {
    if (::write(in_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) error_ = "writing to sqlite3 failed";
  }
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string error_;
};

class StoreLocked : public ControllerFixture {};

// A report of one record (`loss` at `step`), as a worker sends it.
std::string report_body(int64_t trial, int64_t step, double value) {
  return json{{"trial", trial}, {"records", {{{"step", step}, {"values", {{"loss", value}}}}}}}.dump();
}

TEST_F(StoreLocked, HealthzAnswersReportsGet503AndEveryPointArrivesAfterTheRelease) {
  const fs::path trainer = dir_ / "fake-train.sh";
  std::ofstream(trainer) << "#!/bin/sh\nprintf '%s\\n' \"$PRECON_TRIAL_TOKEN\" > \"$4/token.txt\"\n"
                            "while [ ! -e \"$4/finish\" ]; do sleep 0.05; done\n";  // waits for the test
  fs::permissions(trainer, fs::perms::owner_all);
  ControllerOptions o = controller_options(1);
  o.trainer = trainer;
  auto c = std::make_unique<Controller>(o);
  c->start();
  const std::string url = c->url();
  const int64_t id = submit(url, recipe(100000, ""));
  ASSERT_GT(id, 0);
  const json trial_json = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  const int64_t trial = trial_json["id"];
  const fs::path run_dir = trial_json["run_dir"].get<std::string>();
  ASSERT_TRUE(wait_for([&] { return fs::exists(run_dir / "token.txt") && fs::file_size(run_dir / "token.txt") == 33; },
                       std::chrono::seconds(20)));
  std::string token;
  std::getline(std::ifstream(run_dir / "token.txt"), token);

  std::mutex sent_mu;
  std::map<int64_t, double> sent;  // step -> value: the reference the store must equal in the end
  const auto send = [&](int64_t step) {
    const double value = 1.0 + static_cast<double>(step) / 1024.0;
    {
      std::lock_guard lock(sent_mu);
      sent[step] = value;
    }
    return post(url, "/api/v1/report", report_body(trial, step, value), token);
  };
  ASSERT_EQ(send(1).status, 200);

  ExternalLock lock(o.db);
  ASSERT_EQ(lock.error(), "");
  const auto locked_at = SteadyClock::now();

  // Workers keep reporting, each resending a refused report: more of them than the io threads.
  std::atomic<bool> released{false};
  std::atomic<int> refused{0}, refused_without_retry_after{0}, other{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 8; ++w) {
    workers.emplace_back([&, w] {
      for (int64_t step = 100 + w * 1000;; ++step) {
        for (;;) {
          ClientResponse r = send(step);
          if (r.status == 200) break;
          if (r.status == 503 && r.body.find("store_busy") != std::string::npos) {
            ++refused;
            if (r.headers["retry-after"] != "1") ++refused_without_retry_after;
          } else {
            ++other;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        if (released) return;
      }
    });
  }
  // The project's own reporter, as precon-train runs it, during the lock and after.
  std::vector<std::string> reporter_log;
  {
    worker::ReporterOptions ro;
    ro.url = url + "/api/v1/report";
    ro.token = token;
    ro.trial = std::to_string(trial);
    ro.log = [&](const std::string& line) { reporter_log.push_back(line); };
    worker::Reporter reporter(ro);
    for (int64_t step = 20000; step < 20050; ++step) {
      const double value = 2.0 + static_cast<double>(step) / 4096.0;
      {
        std::lock_guard guard(sent_mu);
        sent[step] = value;
      }
      reporter.push({step, 0.0, {{"loss", value}}});
    }

    // While locked: one report is answered 503 store_busy with Retry-After within a second or so,
    // and /healthz within a bound, saying the store is blocked; so does /metrics.
    const auto start = SteadyClock::now();
    ClientResponse r = send(2);
    EXPECT_LT(elapsed_s(start), 2.5);
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_EQ(r.headers["retry-after"], "1");
    EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["code"], "store_busy") << r.body;
    double slowest = 0;
    for (int i = 0; i < 20; ++i) {
      const auto asked = SteadyClock::now();
      ClientResponse h = http_request(url, "GET", "/healthz", "", {}, std::chrono::seconds(5));
      slowest = std::max(slowest, elapsed_s(asked));
      ASSERT_EQ(h.status, 200) << h.body;
      const json store = json::parse(h.body)["store"];
      EXPECT_EQ(store["blocked"], true) << h.body;
      EXPECT_GT(store["blocked_seconds"].get<double>(), 0.0) << h.body;
      EXPECT_LE(store["blocked_seconds"].get<double>(), elapsed_s(locked_at) + 0.1) << h.body;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_LT(slowest, 0.5);  // before: unanswered for as long as the lock was held
    ClientResponse m = http_request(url, "GET", "/metrics");
    const size_t at = m.body.find("\nprecon_store_blocked_seconds ");
    ASSERT_NE(at, std::string::npos) << m.body.substr(0, 2000);
    EXPECT_GT(std::stod(m.body.substr(at + 30)), 1.0);
    EXPECT_GT(refused.load(), 0);
    EXPECT_EQ(refused_without_retry_after.load(), 0);
    EXPECT_EQ(other.load(), 0);
    EXPECT_TRUE(c->store().write_blocked_since().has_value());

    lock.release();
    released = true;
    for (std::thread& t : workers) t.join();
    EXPECT_EQ(send(2).status, 200);  // the refused one, sent again
    EXPECT_TRUE(reporter.flush(std::chrono::seconds(30)));
  }
  EXPECT_EQ(other.load(), 0);
  EXPECT_FALSE(c->store().write_blocked_since().has_value());
  EXPECT_EQ(get(url, "/healthz")["store"], json({{"blocked", false}}));
  bool reporter_retried = false;
  for (const std::string& line : reporter_log) reporter_retried |= line.find("HTTP 503") != std::string::npos;
  EXPECT_TRUE(reporter_retried) << "the reporter never met the lock";

  // Every point sent is stored, with its value, and nothing else.
  std::map<int64_t, double> stored;
  for (const MetricPoint& p : c->store().metrics(trial, "loss")) stored[p.step] = p.value;
  EXPECT_EQ(stored.size(), sent.size());
  EXPECT_TRUE(stored == sent);
  std::ofstream(run_dir / "finish").put('\n');
  ASSERT_TRUE(done(url, id, std::chrono::seconds(30)));
  c->stop();
}

// Locks of a few milliseconds (another connection's short write transactions, as SQLite's own
// housekeeping takes its locks for a moment) are waited out: reports that queue behind a write
// meeting such a lock are not answered store_busy. Only a lock held past LockWait::kBlockedAfter
// marks the store blocked. (The load test met one such 503 among 51,114 reports.)
TEST(StoreBriefLocks, ReportsQueuedBehindAShortLockWaitInsteadOfFailing) {
  const fs::path dir = fs::temp_directory_path() / ("precon_brief_locks_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::atomic<int> busy{0}, written{0};
  {
    Store store(dir / "precon.db");
    ExperimentRow e;
    e.name = "brief";
    e.objective_metric = "loss";
    e.run_root = dir.string();
    std::vector<TrialRow> rows(4);
    for (int i = 0; i < 4; ++i) rows[i].index = i;
    const int64_t exp = store.create_experiment(e, rows);
    const std::vector<TrialRow> trials = store.trials(exp);
    ASSERT_EQ(trials.size(), 4u);

    std::atomic<bool> stop{false};
    std::thread locker([&] {
      sqlite3* other = nullptr;
      ASSERT_EQ(sqlite3_open((dir / "precon.db").c_str(), &other), SQLITE_OK);
      sqlite3_busy_timeout(other, 5000);
      while (!stop.load()) {
        ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
      }
      sqlite3_close(other);
    });
    std::vector<std::thread> reporters;
    for (int r = 0; r < 4; ++r) {
      reporters.emplace_back([&, r] {
        for (int step = 0; step < 60; ++step) {
          try {
            store.insert_metrics(trials[r].id, {{"loss", step, 1.0 / (step + 1), 0}}, WriteWait::kBrief);
            ++written;
          } catch (const StoreBusyError&) {
            ++busy;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      });
    }
    for (std::thread& t : reporters) t.join();
    stop = true;
    locker.join();
    EXPECT_FALSE(store.write_blocked_since().has_value());
  }
  fs::remove_all(dir);
  EXPECT_EQ(busy.load(), 0) << "reports answered store_busy behind locks of 20 ms";
  EXPECT_EQ(written.load(), 240);
}

}  // namespace
}  // namespace precon::orch::testing
