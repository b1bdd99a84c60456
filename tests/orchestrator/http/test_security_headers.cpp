// Every answer of the controller, whatever its route or status, forbids framing (clickjacking
// the cancel buttons), allows only the dashboard's own scripts and styles, and turns off MIME
// sniffing and referrers. Over a real socket to a real Controller serving the built dashboard.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <string>

#include "tests/orchestrator/support/controller_fixture.h"
#include "tests/orchestrator/support/raw_connection.h"

namespace precon::orch::testing {
namespace {

class SecurityHeaders : public ControllerFixture {};

// The value of header `name` (lowercase) in a raw response head, "" when absent.
std::string header_of(const std::string& response, const std::string& name) {
  std::string head = response.substr(0, response.find("\r\n\r\n"));
  std::string lower = head;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  const size_t at = lower.find("\r\n" + name + ":");
  if (at == std::string::npos) return "";
  const size_t begin = head.find_first_not_of(' ', at + name.size() + 3);
  return head.substr(begin, head.find("\r\n", begin) - begin);
}

TEST_F(SecurityHeaders, EveryAnswerForbidsFramingSniffingAndForeignScripts) {
  ControllerOptions o = controller_options();
#ifdef PRECON_WEB_OUT
  o.web_dir = PRECON_WEB_OUT;
#endif
  Controller c(o);
  c.start();
  const std::string host = "Host: 127.0.0.1:" + std::to_string(c.port()) + "\r\n";
  const std::string requests[] = {
      "GET / HTTP/1.1\r\n" + host,                          // the dashboard
      "GET /app.js HTTP/1.1\r\n" + host,                    // its script
      "GET /healthz HTTP/1.1\r\n" + host,                   // a JSON route
      "GET /api/v1/experiments/99 HTTP/1.1\r\n" + host,     // 404
      "POST /api/v1/experiments HTTP/1.1\r\n" + host + "Content-Length: 2\r\n",  // 401 before the body
      "GET /healthz HTTP/1.1\r\nHost: evil.example\r\n",    // 421
      "GET /healthz HTTP/9.9\r\n" + host,                   // 400 from the server itself
  };
  for (const std::string& r : requests) {
    RawConnection conn(c.port());
    ASSERT_TRUE(conn.send(r + "Connection: close\r\n\r\n{}"));
    const std::string answer = conn.read_response();
    SCOPED_TRACE(r.substr(0, r.find('\r')) + " -> " + answer.substr(0, answer.find('\r')));
    ASSERT_FALSE(answer.empty());
    const std::string csp = header_of(answer, "content-security-policy");
    EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << csp;
    EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
    EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
    EXPECT_NE(csp.find("style-src 'self'"), std::string::npos) << csp;
    EXPECT_EQ(csp.find("unsafe"), std::string::npos) << csp;
    EXPECT_EQ(header_of(answer, "x-content-type-options"), "nosniff");
    EXPECT_EQ(header_of(answer, "referrer-policy"), "no-referrer");
  }
}

}  // namespace
}  // namespace precon::orch::testing
