// Helpers shared by the HTTP tests: an echo handler and the check of the one error shape.
#pragma once

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orchestrator/http/router.h"

namespace precon::orch::testing {

using json = nlohmann::json;

// Answers with what routing made of the request.
inline Response echo(Request& request) {
  json query = json::object();
  for (const auto& [k, v] : request.query) query[k] = v;
  json params = json::object();
  for (const auto& [k, v] : request.params) params[k] = v;
  return json_response({{"route", request.route}, {"params", params}, {"query", query}, {"body", request.body},
                        {"remote", request.remote}});
}

inline json error_of(const std::string& body) { return json::parse(body).at("error"); }

// Checks the one error shape exactly: {"error": {"code": ..., "message": ...}} and nothing else.
inline void expect_error(int status, const std::string& body, int want_status, const std::string& want_code) {
  EXPECT_EQ(status, want_status) << body;
  const json doc = json::parse(body);
  ASSERT_TRUE(doc.is_object() && doc.size() == 1 && doc.contains("error")) << body;
  const json& error = doc["error"];
  ASSERT_TRUE(error.is_object() && error.size() == 2) << body;
  EXPECT_EQ(error.at("code"), want_code) << body;
  EXPECT_TRUE(error.at("message").is_string() && !error.at("message").get<std::string>().empty()) << body;
}

}  // namespace precon::orch::testing
