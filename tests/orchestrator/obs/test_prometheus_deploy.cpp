// deploy/: the Prometheus scrape config and alert rules pass promtool (config, rules, and the
// rules' unit tests in tests/prometheus/alerts_test.yml); every metric name in the alert rules and
// the Grafana dashboard is one /metrics exports, and every dashboard expression is valid PromQL;
// the systemd unit passes systemd-analyze verify and runs `precon serve` the way it must.
#include <regex>
#include <set>

#include "orchestrator/obs/controller_metrics.h"
#include "tests/orchestrator/support/prometheus_util.h"
#include "tests/common/skip.h"

#include <nlohmann/json.hpp>

namespace precon::orch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSource = PRECON_SOURCE_DIR;

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  EXPECT_TRUE(f) << "cannot read " << p;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("precon_deploy_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Every series name /metrics can export: each family (with a sample of every kind made to exist)
// and a histogram's _bucket, _sum and _count; plus Prometheus's own `up`.
std::set<std::string> exported_names() {
  ControllerMetrics m;
  m.add_executor("local");
  m.trial_active(1, "e");
  m.report(1, {{"train_loss", 1, 1, 0}, {"val_loss", 1, 1, 0}, {"tokens_per_second", 1, 1, 0}, {"step_seconds", 1, 1, 0},
               {"optim_grafting_seconds", 1, 1, 0}, {"inverse_root_failures", 1, 1, 0}});
  m.trial_failed_attempts(2, "e", 1);
  m.http_request("metrics", 200, 0.001);
  m.store_write("update_trial", 0.001);
  std::set<std::string> names{"up"};
  for (const auto& [name, type] : parse_exposition(m.serialize()).types) {
    names.insert(name);
    if (type == "histogram")
      for (const char* suffix : {"_bucket", "_sum", "_count"}) names.insert(name + suffix);
  }
  return names;
}

// Metric-looking identifiers of a PromQL expression outside string literals: names with our
// prefix, and `up`.
std::vector<std::string> metric_names_in(const std::string& expr) {
  const std::string unquoted = std::regex_replace(expr, std::regex(R"("(\\.|[^"\\])*")"), "\"\"");
  std::vector<std::string> out;
  const std::regex ident(R"([A-Za-z_:][A-Za-z0-9_:]*)");
  for (auto it = std::sregex_iterator(unquoted.begin(), unquoted.end(), ident); it != std::sregex_iterator(); ++it) {
    const std::string name = it->str();
    if (name.rfind("precon_", 0) == 0 || name == "up") out.push_back(name);
  }
  return out;
}

// Every "expr" (panel targets) and "query"/"definition" (template variables) string in the dashboard.
void collect_exprs(const json& j, const std::string& key, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) {
      if (k == key && v.is_string()) out.push_back(v.get<std::string>());
      collect_exprs(v, key, out);
    }
  } else if (j.is_array()) {
    for (const json& v : j) collect_exprs(v, key, out);
  }
}

TEST(PrometheusDeploy, ScrapeConfigAndAlertRulesPassPromtool) {
  CommandResult r = run_command("promtool check config '" + (kSource / "deploy/prometheus/prometheus.yml").string() + "'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1 rule files found"), std::string::npos) << r.output;
  r = run_command("promtool check rules '" + (kSource / "deploy/prometheus/precon-alerts.yml").string() + "'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("6 rules found"), std::string::npos) << r.output;
  // The alerts fire on the synthetic series they are meant for, and only then.
  r = run_command("cd '" + (kSource / "tests/prometheus").string() + "' && promtool test rules alerts_test.yml");
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST(PrometheusDeploy, AlertRulesUseOnlyExportedMetrics) {
  const std::set<std::string> names = exported_names();
  std::istringstream rules(read_text(kSource / "deploy/prometheus/precon-alerts.yml"));
  std::string line;
  std::set<std::string> alerts;
  int exprs = 0;
  while (std::getline(rules, line)) {
    const size_t a = line.find("- alert: ");
    if (a != std::string::npos) alerts.insert(line.substr(a + 9));
    const size_t e = line.find("expr: ");
    if (e == std::string::npos) continue;
    ++exprs;
    for (const std::string& n : metric_names_in(line.substr(e + 6))) EXPECT_TRUE(names.count(n)) << n << " in: " << line;
  }
  EXPECT_EQ(exprs, 6);
  for (const char* want : {"PreconControllerDown", "PreconAttemptsFailingRepeatedly", "PreconTrialFailingRepeatedly",
                           "PreconTrialNoProgress", "PreconInverseRootFailures"})
    EXPECT_TRUE(alerts.count(want)) << want;
}

TEST(PrometheusDeploy, GrafanaDashboardQueriesExportedMetricsInValidPromQL) {
  const std::set<std::string> names = exported_names();
  const json dash = json::parse(read_text(kSource / "deploy/grafana/precon-dashboard.json"), nullptr, false);
  ASSERT_TRUE(dash.is_object()) << "deploy/grafana/precon-dashboard.json is not valid JSON";
  EXPECT_EQ(dash["uid"], "precon-controller");
  std::vector<std::string> exprs, var_queries;
  collect_exprs(dash["panels"], "expr", exprs);
  collect_exprs(dash["templating"], "definition", var_queries);
  EXPECT_GE(exprs.size(), 15u);
  ASSERT_EQ(var_queries.size(), 3u);

  std::set<std::string> used;
  for (const std::string& e : exprs) {
    std::vector<std::string> in = metric_names_in(e);
    EXPECT_FALSE(in.empty()) << "no precon metric in: " << e;
    for (const std::string& n : in) {
      EXPECT_TRUE(names.count(n)) << n << " in: " << e;
      used.insert(n);
    }
  }
  for (const std::string& q : var_queries) {
    const std::smatch m = [&] { std::smatch s; std::regex_match(q, s, std::regex(R"(label_values\((.*), \w+\))")); return s; }();
    ASSERT_EQ(m.size(), 2u) << q;
    for (const std::string& n : metric_names_in(m[1].str())) EXPECT_TRUE(names.count(n)) << n << " in: " << q;
  }
  // Each training family the issue names has a panel.
  for (const char* n : {"precon_trial_train_loss", "precon_trial_val_loss", "precon_trial_step",
                        "precon_trial_tokens_per_second", "precon_trial_step_seconds", "precon_trial_optimizer_seconds",
                        "precon_trial_inverse_root_failures_total", "precon_trials", "precon_queue_length"})
    EXPECT_TRUE(used.count(n)) << n << " has no panel";

  // Valid PromQL: promtool parses each expression as a recording rule (dashboard variables filled in).
  const fs::path dir = temp_dir("grafana");
  std::ofstream rules(dir / "panels.yml");
  rules << "groups:\n  - name: panels\n    rules:\n";
  for (size_t i = 0; i < exprs.size(); ++i) {
    std::string e = std::regex_replace(exprs[i], std::regex(R"(\$job)"), "precon");
    e = std::regex_replace(e, std::regex(R"(\$(experiment|trial))"), ".*");
    rules << "      - record: panel_" << i << "\n        expr: '" << std::regex_replace(e, std::regex("'"), "''") << "'\n";
  }
  rules.close();
  CommandResult r = run_command("promtool check rules '" + (dir / "panels.yml").string() + "'");
  EXPECT_EQ(r.status, 0) << r.output << "\n" << read_text(dir / "panels.yml");
  fs::remove_all(dir);
}

TEST(PrometheusDeploy, SystemdUnitVerifiesAndRunsPreconServe) {
  const std::string unit = read_text(kSource / "deploy/systemd/precon.service");
  std::map<std::string, std::string> keys;
  std::istringstream in(unit);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (line.empty() || line[0] == '#' || line[0] == '[' || eq == std::string::npos) continue;
    keys[line.substr(0, eq)] = line.substr(eq + 1);
  }
  EXPECT_NE(keys["ExecStart"].find("/precon serve "), std::string::npos) << keys["ExecStart"];
  EXPECT_NE(keys["ExecStart"].find("--bind 127.0.0.1"), std::string::npos);  // loopback by default
  // Stopping the controller must not kill the workers it started: a restart adopts them.
  EXPECT_EQ(keys["KillMode"], "process");
  EXPECT_EQ(keys["KillSignal"], "SIGTERM");
  EXPECT_EQ(keys["Restart"], "on-failure");
  EXPECT_EQ(keys["WantedBy"], "multi-user.target");
  EXPECT_EQ(keys["User"], "precon");

  // systemd's own check, with ExecStart pointing at the precon we built.
  CommandResult have = run_command("command -v systemd-analyze");
  if (have.status != 0) {
    PRECON_SKIP_UNLESS_CI("systemd-analyze is not installed (Debian package systemd; deploy/install-deps.sh); "
                          "the keys above were checked");
  }
  const fs::path dir = temp_dir("systemd");
  std::ofstream(dir / "precon.service") << std::regex_replace(unit, std::regex("/usr/local/bin/precon"), PRECON_BIN);
  CommandResult r = run_command("cd '" + dir.string() + "' && systemd-analyze verify ./precon.service");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "") << "systemd-analyze verify warned";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace precon::orch::testing
