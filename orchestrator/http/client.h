// A small synchronous HTTP/1.1 client for the CLI and the tests: one connection per request.
// Thread-safety: http_request may be called from any number of threads at once.
#pragma once

#include <chrono>
#include <map>
#include <stdexcept>
#include <string>

namespace precon::orch {

// The controller could not be reached or did not answer; the message says what to check.
class ClientError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ClientResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-cased names
};

// base_url: "http://host:port" (a path in it is prefixed to target); target: "/api/v1/...".
// Any HTTP status is returned, not thrown; throws ClientError on a bad URL, a refused
// connection, a timeout (for the whole exchange) or a broken answer.
ClientResponse http_request(const std::string& base_url, const std::string& method, const std::string& target,
                            const std::string& body = "", const std::map<std::string, std::string>& headers = {},
                            std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace precon::orch
