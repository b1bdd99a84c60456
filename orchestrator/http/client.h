// The controller's client for the CLI and the tests: one request to a controller's base URL,
// with errors that say what to check. The HTTP exchange itself is the project's one client
// (worker/common/http_client.h); this adds the base URL's path prefix and the wording.
// Thread-safety: http_request may be called from any number of threads at once.
#pragma once

#include <chrono>
#include <map>
#include <stdexcept>
#include <string>

#include "worker/common/http_client.h"

namespace precon::orch {

// The controller could not be reached or did not answer; the message says what to check.
class ClientError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// status, body, headers (lower-cased names).
using ClientResponse = worker::HttpResponse;

// base_url: "http://host:port" (a path in it is prefixed to target); target: "/api/v1/...".
// Any HTTP status is returned, not thrown; throws ClientError on a bad URL, a refused
// connection, a timeout (for the whole exchange) or a broken answer.
ClientResponse http_request(const std::string& base_url, const std::string& method, const std::string& target,
                            const std::string& body = "", const std::map<std::string, std::string>& headers = {},
                            std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace precon::orch
