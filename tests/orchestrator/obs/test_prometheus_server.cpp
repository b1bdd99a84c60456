// A real Prometheus server (Debian's `prometheus`) scrapes a live controller every second during
// a sweep; the test reads a trial's training loss back through Prometheus's query API and
// compares it with the value in precon's store, then sees the series go stale once the trial
// ends. The server runs on loopback with a temporary config and storage and is killed on every
// way out of the test.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmath>

#include "orchestrator/service/controller.h"
#include "tests/orchestrator/support/controller_fixture.h"
#include "tests/orchestrator/support/prometheus_util.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;


std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

class PrometheusServer : public ControllerFixture {
 protected:
  // Instant query; the result vector, or an empty array when Prometheus cannot answer yet.
  json query(const std::string& promql, const std::string& time = "") {
    try {
      ClientResponse r = http_request(prom_url_, "GET",
                                      "/api/v1/query?query=" + url_encode(promql) + (time.empty() ? "" : "&time=" + time),
                                      "", {}, std::chrono::seconds(5));
      json j = json::parse(r.body, nullptr, false);
      if (r.status == 200 && j.is_object() && j["status"] == "success") return j["data"]["result"];
      ADD_FAILURE() << promql << ": " << r.status << " " << r.body;
    } catch (const ClientError& e) {
      ADD_FAILURE() << promql << ": " << e.what();
    }
    return json::array();
  }
  std::string prometheus_log() {
    std::ifstream f(dir_ / "prometheus.log");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  std::string prom_url_;
};

TEST_F(PrometheusServer, ScrapesASweepAndAnswersWithTheStoredLoss) {
  orch::Controller c(controller_options(1));
  c.start();

  std::ofstream(dir_ / "prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                            "scrape_configs:\n  - job_name: precon\n    metrics_path: /metrics\n"
                                            "    static_configs:\n      - targets: [\"127.0.0.1:" +
                                                std::to_string(c.port()) + "\"]\n";
  // Started until it is ready; another port when the one picked was taken in the meantime.
  std::unique_ptr<ChildProcess> prometheus;
  for (int attempt = 0; attempt < 3 && !prometheus; ++attempt) {
    const uint16_t port = free_port();
    ASSERT_NE(port, 0);
    prom_url_ = "http://127.0.0.1:" + std::to_string(port);
    prometheus = std::make_unique<ChildProcess>(
        std::vector<std::string>{"prometheus", "--config.file=" + (dir_ / "prometheus.yml").string(),
                                 "--storage.tsdb.path=" + (dir_ / "prometheus-data").string(),
                                 "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"},
        dir_ / "prometheus.log");
    ASSERT_TRUE(prometheus->started());
    const bool ready = wait_for([&] {
      if (!prometheus->running()) return true;
      try {
        return http_request(prom_url_, "GET", "/-/ready", "", {}, std::chrono::seconds(2)).status == 200;
      } catch (const ClientError&) {
        return false;
      }
    }, seconds(20));
    ASSERT_TRUE(ready) << "prometheus did not become ready in 20 s:\n" << prometheus_log();
    if (!prometheus->running()) prometheus.reset();
  }
  ASSERT_TRUE(prometheus) << "prometheus exited at start, or is not on PATH (Debian package prometheus; "
                             "deploy/install-deps.sh):\n"
                          << prometheus_log();
  ASSERT_TRUE(wait_for([&] {
    json r = query("up{job=\"precon\"}");
    return r.size() == 1 && r[0]["value"][1] == "1";
  }, seconds(15))) << prometheus_log();

  // A long single-trial sweep, cancelled once the loss has been read back.
  ClientResponse sub = post(c.url(), "/api/v1/experiments", json{{"recipe", recipe(100000, "")}, {"source", "t.toml"}}.dump(),
                            "admin-secret");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const int64_t id = json::parse(sub.body)["id"];
  const int64_t trial_id = c.store().trials(id).at(0).id;
  const std::string trial = std::to_string(trial_id);
  const std::string selector = "{experiment=\"tiny\",trial=\"" + trial + "\"}";

  ASSERT_TRUE(wait_for([&] {
    json r = query("precon_trial_step" + selector);
    return r.size() == 1 && std::stod(r[0]["value"][1].get<std::string>()) >= 3;
  }, seconds(30))) << prometheus_log();
  // Step and loss at one evaluation time come from the same scrape.
  const std::string at = std::to_string(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  json both = query("{__name__=~\"precon_trial_step|precon_trial_train_loss\",trial=\"" + trial + "\"}", at);
  ASSERT_EQ(both.size(), 2u) << both.dump();
  double step = NAN, loss = NAN;
  for (const json& s : both) {
    const double v = std::stod(s["value"][1].get<std::string>());
    (s["metric"]["__name__"] == "precon_trial_step" ? step : loss) = v;
    EXPECT_EQ(s["metric"]["job"], "precon");
    EXPECT_EQ(s["metric"]["experiment"], "tiny");
  }
  auto stored = c.store().metric_at_or_before(trial_id, "train_loss", static_cast<int64_t>(step));
  ASSERT_TRUE(stored);
  EXPECT_EQ(static_cast<double>(stored->step), step);
  EXPECT_NEAR(loss, stored->value, 1e-12 * std::abs(stored->value)) << "step " << step;
  json running = query("precon_trials{state=\"running\"}");
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0]["value"][1], "1");

  // Ended: the controller drops the trial's series and Prometheus marks them stale.
  ASSERT_EQ(post(c.url(), "/api/v1/trials/" + trial + "/cancel", "", "admin-secret").status, 200);
  ASSERT_TRUE(wait_for([&] { return c.store().trial(trial_id)->state == TrialState::cancelled; }, seconds(30)));
  EXPECT_TRUE(wait_for([&] { return query("precon_trial_train_loss" + selector).empty(); }, seconds(10)));
  EXPECT_TRUE(wait_for([&] {
    json r = query("precon_trials{state=\"cancelled\"}");
    return r.size() == 1 && r[0]["value"][1] == "1";
  }, seconds(10)));
  prometheus->stop();
  c.stop();
}

}  // namespace
}  // namespace precon::orch::testing
