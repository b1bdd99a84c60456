// The route tests' fixture: a temporary directory whose database a test seeds with known rows, a
// controller on it (trainer /bin/false: nothing a seed holds may launch; the tests' admin token
// "admin-secret"; the dashboard's files from the source tree) and GET over a real socket.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "orchestrator/http/client.h"
#include "orchestrator/service/controller.h"

namespace precon::orch::testing {

class RouteFixture : public ::testing::Test {
 protected:
  // Makes the directory only: a test seeds db() before start(), or the controller's store after.
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("precon_route_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    controller_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::filesystem::path db() const { return dir_ / "precon.db"; }
  ControllerOptions options() const {
    ControllerOptions o;
    o.db = db();
    o.run_root = dir_ / "runs";
    o.web_dir = std::filesystem::path(PRECON_SOURCE_DIR) / "web";
    o.trainer = "/bin/false";
    o.admin_token = "admin-secret";
    o.log = [](const std::string&) {};
    return o;
  }
  // (Re)starts the controller on the fixture's database.
  void start(const ControllerOptions& o) {
    controller_.reset();
    controller_ = std::make_unique<Controller>(o);
    controller_->start();
    url_ = controller_->url();
  }
  void start() { start(options()); }

  // GET target (with `token` as the bearer token when given), expecting status `expect`: the body
  // as JSON (discarded when it is not).
  nlohmann::json get(const std::string& target, int expect = 200, const std::string& token = "") {
    std::map<std::string, std::string> headers;
    if (!token.empty()) headers["Authorization"] = "Bearer " + token;
    ClientResponse r = http_request(url_, "GET", target, "", headers);
    EXPECT_EQ(r.status, expect) << target << ": " << r.body;
    return nlohmann::json::parse(r.body, nullptr, false);
  }

  std::filesystem::path dir_;
  std::unique_ptr<Controller> controller_;
  std::string url_;
};

}  // namespace precon::orch::testing
