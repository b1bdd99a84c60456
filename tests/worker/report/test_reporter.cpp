// The HTTP reporter against a real Boost.Beast server on 127.0.0.1 (an ephemeral port, in this
// process), which records what it receives and can fail, go down, refuse tokens or say "stop".
#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/http_test_server.h"
#include "worker/report/reporter.h"

namespace precon::worker {
namespace {

namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A request as the controller saw it.
struct Received {
  std::string target;
  std::string authorization;
  std::string content_type;
  nlohmann::json body;
};

// The controller's report endpoint, reduced to what the reporter can observe.
class FakeController {
 public:
  std::string url() const { return server_.base_url() + "/api/v1/report"; }
  uint16_t port() const { return server_.port(); }

  // Stop listening and drop open connections: connections are refused until come_up().
  void go_down() { server_.go_down(); }
  void come_up() { server_.come_up(); }
  // Close kept-alive connections, as a server does with idle ones, but keep listening.
  void drop_connections() { server_.drop_connections(); }

  void answer_next(unsigned status, int count) {
    std::lock_guard lock(mutex_);
    forced_status_ = status;
    forced_count_ = count;
  }
  void set_stop(const std::string& reason) {
    std::lock_guard lock(mutex_);
    stop_ = true;
    reason_ = reason;
  }
  void require_token(const std::string& token) {
    std::lock_guard lock(mutex_);
    token_ = token;
  }
  // Batches with more records than this are refused with 413, as a body limit would.
  void limit_records(size_t n) {
    std::lock_guard lock(mutex_);
    max_records_ = n;
  }

  int requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::vector<Received> received() const {
    std::lock_guard lock(mutex_);
    return received_;
  }
  // Bodies answered with a forced failure (answer_next), in arrival order.
  std::vector<nlohmann::json> refused() const {
    std::lock_guard lock(mutex_);
    return refused_;
  }
  // Steps of every accepted record, in arrival order.
  std::vector<int64_t> steps() const {
    std::vector<int64_t> out;
    for (const Received& r : received()) {
      for (const auto& record : r.body["records"]) out.push_back(record["step"].get<int64_t>());
    }
    return out;
  }

 private:
  void answer(const test::TestRequest& request, test::TestResponse& response) {
    std::lock_guard lock(mutex_);
    ++requests_;
    response.set(http::field::content_type, "application/json");
    const auto error = [&](unsigned status, const std::string& message) {
      response.result(status);
      response.body() = nlohmann::json{{"error", {{"code", "test"}, {"message", message}}}}.dump();
    };
    const auto body = nlohmann::json::parse(request.body(), nullptr, false);
    if (!token_.empty() && request[http::field::authorization] != "Bearer " + token_) {
      error(401, "wrong token for this trial");
    } else if (forced_count_ > 0) {
      --forced_count_;
      if (!body.is_discarded()) refused_.push_back(body);
      error(forced_status_, "forced failure");
    } else if (body.is_discarded()) {
      error(400, "body is not JSON");
    } else if (body["records"].size() > max_records_) {
      error(413, "too many records");
    } else {
      received_.push_back({std::string(request.target()), std::string(request[http::field::authorization]),
                           std::string(request[http::field::content_type]), body});
      response.body() = nlohmann::json{{"ok", true}, {"stop", stop_}, {"reason", reason_}}.dump();
    }
  }

  mutable std::mutex mutex_;
  int requests_ = 0;
  std::vector<Received> received_;
  std::vector<nlohmann::json> refused_;
  unsigned forced_status_ = 500;
  int forced_count_ = 0;
  bool stop_ = false;
  std::string reason_;
  std::string token_;
  size_t max_records_ = SIZE_MAX;
  // Last: it answers through the members above from its io thread until it is gone.
  test::TestHttpServer server_{[this](const test::TestRequest& request, test::TestResponse& response) {
    answer(request, response);
  }};
};

// Collects the reporter's warnings.
class LogSink {
 public:
  std::function<void(const std::string&)> callback() {
    return [this](const std::string& m) {
      std::lock_guard lock(mutex_);
      messages_.push_back(m);
    };
  }
  int count(const std::string& part) const {
    std::lock_guard lock(mutex_);
    int n = 0;
    for (const auto& m : messages_) n += m.find(part) != std::string::npos;
    return n;
  }
  size_t size() const {
    std::lock_guard lock(mutex_);
    return messages_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

MetricRecord record(int64_t step) {
  return {step, 1.7e9 + 0.5 * static_cast<double>(step), {{"train_loss", 4.0 / static_cast<double>(step)}, {"lr", 1e-3}}};
}

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t s = first; s <= last; ++s) out.push_back(s);
  return out;
}

ReporterOptions options(const FakeController& controller, LogSink& log, const std::string& token = "tok-1") {
  ReporterOptions o;
  o.url = controller.url();
  o.token = token;
  o.trial = "exp3-t17";
  o.log = log.callback();
  o.backoff_initial = 20ms;
  o.backoff_max = 200ms;
  return o;
}

// URL parsing itself is tested with the HTTP client (test_common_http_client.cpp).
TEST(ReportReporter, BadUrlIsAReportErrorNamingIt) {
  LogSink log;
  ReporterOptions o;
  o.url = "https://ctl/r";
  o.log = log.callback();
  try {
    Reporter reporter(o);
    FAIL() << "an https URL was accepted";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("controller URL \"https://ctl/r\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("https is not supported"), std::string::npos) << e.what();
  }
}

TEST(ReportReporter, DeliversEveryRecordInOrderWithTokenAndJson) {
  FakeController controller;
  LogSink log;
  Reporter reporter(options(controller, log));
  for (int64_t s = 1; s <= 1200; ++s) {
    MetricRecord r = record(s);
    if (s == 3) r.values.emplace_back("grad_norm", std::nan(""));
    reporter.push(r);
  }
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.steps(), range(1, 1200));
  const auto received = controller.received();
  ASSERT_GE(received.size(), 3u);  // at most max_batch_records (512) per request
  for (const Received& r : received) {
    EXPECT_EQ(r.target, "/api/v1/report");
    EXPECT_EQ(r.authorization, "Bearer tok-1");
    EXPECT_EQ(r.content_type, "application/json");
    EXPECT_EQ(r.body["trial"], "exp3-t17");
    EXPECT_LE(r.body["records"].size(), 512u);
  }
  const auto& first = received[0].body["records"][0];
  EXPECT_EQ(first["step"], 1);
  EXPECT_DOUBLE_EQ(first["time"].get<double>(), 1.7e9 + 0.5);
  EXPECT_DOUBLE_EQ(first["values"]["train_loss"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(first["values"]["lr"].get<double>(), 1e-3);
  bool saw_null = false;
  for (const Received& r : received) {
    for (const auto& rec : r.body["records"]) {
      if (rec["step"] == 3) saw_null = rec["values"]["grad_norm"].is_null();
    }
  }
  EXPECT_TRUE(saw_null);
  EXPECT_FALSE(reporter.stop_requested());
  EXPECT_EQ(log.size(), 0u);
}

TEST(ReportReporter, CatchesUpWhenTheControllerComesUpLate) {
  FakeController controller;
  controller.go_down();
  LogSink log;
  Reporter reporter(options(controller, log));
  for (int64_t s = 1; s <= 30; ++s) reporter.push(record(s));
  EXPECT_FALSE(reporter.flush(300ms));  // push never blocks; nothing can be delivered yet
  for (int64_t s = 31; s <= 60; ++s) reporter.push(record(s));
  EXPECT_EQ(controller.requests(), 0);
  controller.come_up();
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.steps(), range(1, 60));
  EXPECT_EQ(log.count("retrying with backoff"), 1);  // one line per failure streak, not per attempt
  EXPECT_EQ(log.count("answers again"), 1);
}

// Steps of a report body's records.
std::vector<int64_t> steps_of(const nlohmann::json& body) {
  std::vector<int64_t> out;
  for (const auto& r : body["records"]) out.push_back(r["step"].get<int64_t>());
  return out;
}

// The server fails the first three attempts: each retry resends the records of the attempt
// before it (possibly with more behind them), and the first accepted batch starts with them.
TEST(ReportReporter, RetriesServerErrors) {
  FakeController controller;
  controller.answer_next(500, 3);
  LogSink log;
  Reporter reporter(options(controller, log));
  reporter.push(record(1));
  ASSERT_TRUE(eventually([&] { return controller.refused().size() == 3; }));
  for (int64_t s = 2; s <= 10; ++s) reporter.push(record(s));
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.steps(), range(1, 10));
  const std::vector<nlohmann::json> refused = controller.refused();
  ASSERT_EQ(refused.size(), 3u);
  for (const nlohmann::json& body : refused) EXPECT_EQ(steps_of(body), range(1, 1)) << body.dump();
  const std::vector<Received> received = controller.received();
  ASSERT_FALSE(received.empty());
  EXPECT_EQ(steps_of(received[0].body).front(), 1);
  EXPECT_EQ(controller.requests(), static_cast<int>(refused.size() + received.size()));
  EXPECT_EQ(log.count("HTTP 500: forced failure"), 1);  // one line per failure streak
  EXPECT_EQ(log.count("answers again"), 1);
}

TEST(ReportReporter, RetriesTooManyRequests) {
  FakeController controller;
  controller.answer_next(429, 2);
  LogSink log;
  Reporter reporter(options(controller, log));
  reporter.push(record(1));
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.steps(), range(1, 1));
  EXPECT_EQ(controller.requests(), 3);
  const std::vector<nlohmann::json> refused = controller.refused();
  ASSERT_EQ(refused.size(), 2u);
  for (const nlohmann::json& body : refused) EXPECT_EQ(steps_of(body), range(1, 1)) << body.dump();
}

TEST(ReportReporter, ClientErrorDropsOnlyThatBatch) {
  FakeController controller;
  controller.answer_next(404, 1);
  LogSink log;
  Reporter reporter(options(controller, log));
  reporter.push(record(1));
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.requests(), 1);  // never resent
  EXPECT_EQ(log.count("HTTP 404: forced failure"), 1);
  reporter.push(record(2));
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.steps(), range(2, 2));
}

TEST(ReportReporter, TooLargeBatchesAreSplit) {
  FakeController controller;
  controller.limit_records(4);
  controller.go_down();  // records pile up, so that a batch of more than 4 is sure to be sent
  LogSink log;
  Reporter reporter(options(controller, log));
  for (int64_t s = 1; s <= 40; ++s) reporter.push(record(s));
  controller.come_up();
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.steps(), range(1, 40));
  EXPECT_GT(controller.requests(), static_cast<int>(controller.received().size()));  // some got 413
  EXPECT_EQ(log.count("will not be resent"), 0);  // split and resent, never dropped
}

TEST(ReportReporter, StopAnswerIsVisible) {
  FakeController controller;
  LogSink log;
  Reporter reporter(options(controller, log));
  reporter.push(record(1));
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_FALSE(reporter.stop_requested());
  controller.set_stop("asha: below the median at rung 2");
  reporter.push(record(2));
  ASSERT_TRUE(eventually([&] { return reporter.stop_requested(); }));
  EXPECT_EQ(reporter.stop_reason(), "asha: below the median at rung 2");
  reporter.push(record(3));  // records after the stop answer still go out
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.steps(), range(1, 3));
}

TEST(ReportReporter, WrongTokenIsPermanentWithoutRetrying) {
  FakeController controller;
  controller.require_token("the-right-one");
  LogSink log;
  Reporter reporter(options(controller, log, "a-wrong-one"));
  reporter.push(record(1));
  ASSERT_TRUE(eventually([&] { return reporter.disabled(); }));
  for (int64_t s = 2; s <= 50; ++s) reporter.push(record(s));
  EXPECT_FALSE(reporter.flush(200ms));  // would spin here if it kept retrying
  EXPECT_EQ(controller.requests(), 1);
  EXPECT_EQ(controller.steps().size(), 0u);
  EXPECT_EQ(log.size(), 1u);
  EXPECT_EQ(log.count("HTTP 401: wrong token for this trial"), 1);
}

TEST(ReportReporter, ReconnectsQuietlyWhenAnIdleConnectionIsClosed) {
  FakeController controller;
  LogSink log;
  Reporter reporter(options(controller, log));
  reporter.push(record(1));
  ASSERT_TRUE(reporter.flush(5s));
  controller.drop_connections();
  reporter.push(record(2));
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.steps(), range(1, 2));
  EXPECT_EQ(log.size(), 0u);  // a closed keep-alive connection is not a failure
}

TEST(ReportReporter, KeepsEverythingWhenTheBacklogGrows) {
  FakeController controller;
  controller.go_down();
  LogSink log;
  ReporterOptions o = options(controller, log);
  o.queue_warn_records = 100;
  Reporter reporter(o);
  for (int64_t s = 1; s <= 250; ++s) reporter.push(record(s));
  ASSERT_TRUE(eventually([&] { return log.count("records waiting") == 1; }));
  controller.come_up();
  ASSERT_TRUE(reporter.flush(5s));
  EXPECT_EQ(controller.steps(), range(1, 250));
  EXPECT_EQ(log.count("records waiting"), 1);
}

TEST(ReportReporter, UnansweredRequestTimesOutAndIsRetried) {
  // Listening but never accepting: connect completes (the kernel's backlog), no answer comes.
  test::SilentListener silent;
  LogSink log;
  ReporterOptions o;
  o.url = silent.base_url() + "/r";
  o.trial = "t";
  o.log = log.callback();
  o.io_timeout = 150ms;
  o.backoff_initial = 20ms;
  o.close_flush = 0ms;
  Reporter reporter(o);
  reporter.push(record(1));
  ASSERT_TRUE(eventually([&] { return log.count("no answer") == 1; }));
}

TEST(ReportReporter, DestructorIsBoundedWhenTheControllerNeverAnswers) {
  // Default timeouts: the destructor waits close_flush (2 s), then abandons a read that would
  // otherwise wait 5 s.
  test::SilentListener silent;
  LogSink log;
  ReporterOptions o;
  o.url = silent.base_url() + "/r";
  o.trial = "t";
  o.log = log.callback();
  const auto start = Clock::now();
  {
    Reporter reporter(o);
    for (int64_t s = 1; s <= 10; ++s) reporter.push(record(s));
  }
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 1900ms);
  EXPECT_LT(took, 3s);  // close_flush plus the abort poll, with room for a loaded machine
}

TEST(ReportReporter, DestructorIsBoundedWhenNothingListens) {
  FakeController controller;
  controller.go_down();  // connections are refused
  LogSink log;
  ReporterOptions o = options(controller, log);
  o.backoff_initial = 200ms;
  o.backoff_max = 5s;
  o.close_flush = 300ms;
  const auto start = Clock::now();
  {
    Reporter reporter(o);
    for (int64_t s = 1; s <= 10; ++s) reporter.push(record(s));
  }
  EXPECT_LT(Clock::now() - start, 1500ms);  // close_flush 300 ms, not a 5 s backoff
}

}  // namespace
}  // namespace precon::worker
