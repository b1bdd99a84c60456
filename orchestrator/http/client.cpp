#include "orchestrator/http/client.h"

namespace precon::orch {

namespace {

// Larger than any answer of ours (a downsampled metric series, a log tail).
constexpr uint64_t kAnswerLimit = uint64_t{1} << 30;

}  // namespace

ClientResponse http_request(const std::string& base_url, const std::string& method, const std::string& target,
                            const std::string& body, const std::map<std::string, std::string>& headers,
                            std::chrono::milliseconds timeout) {
  worker::HttpUrl url;
  try {
    url = worker::parse_http_url(base_url);
  } catch (const worker::HttpClientError& e) {
    throw ClientError(std::string("controller ") + e.what());
  }
  std::string full_target = target.empty() ? "/" : target;
  if (url.target != "/") {
    std::string prefix = url.target;
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    full_target = prefix + full_target;
  }
  try {
    return worker::http_request(url, {method, full_target, body, headers}, timeout, {"precon", kAnswerLimit});
  } catch (const worker::HttpClientError& e) {
    if (e.timed_out()) {
      throw ClientError("the controller at " + base_url + " did not answer " + method + " " + full_target + " within " +
                        std::to_string(timeout.count()) + " ms (" + worker::http_stage_text(e.stage()) + ")");
    }
    if (e.refused()) {
      throw ClientError("cannot reach the controller at " + base_url +
                        ": connection refused — is `precon serve` running?");
    }
    throw ClientError(method + " " + full_target + " to the controller at " + base_url + " failed while " +
                      worker::http_stage_text(e.stage()) + ": " + e.what());
  }
}

}  // namespace precon::orch
