// read_requests (orchestrator/http/request_reader.h) runs the server's request parsing over bytes
// in memory, for the fuzz target: here it must answer every input of the fuzz target's seed
// corpus exactly as a real HttpServer answers the same bytes sent on one connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "orchestrator/http/request_reader.h"
#include "orchestrator/http/server.h"
#include "tests/orchestrator/support/http_test_util.h"

namespace precon::orch {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBodyLimit = 64 << 10;

Router test_router() {
  Router router(RouterOptions{"admin-token", [](const std::string&) {}});
  router.add({"GET", "/healthz", testing::echo, false, "healthz", nullptr});
  router.add({"GET", "/api/v1/experiments/{id}", [](Request& req) {
                return json_response({{"id", path_int(req, "id")}});
              }, false, "experiment_show", nullptr});
  router.add({"GET", "/api/v1/trials/{id}/metrics", [](Request& req) {
                return json_response({{"id", path_int(req, "id")}, {"max", query_int(req, "max_points", 2000)}});
              }, false, "trial_metrics", nullptr});
  router.add({"POST", "/api/v1/experiments", [](Request& req) { return json_response(json_body(req), 201); }, true,
              "experiments_submit", nullptr});
  router.add({"POST", "/api/v1/report", [](Request& req) { return json_response({{"ok", json_body(req).is_object()}}); },
              false, "report", [](const Request& req) { return bearer_token(req) == "trial-token"; }});
  router.add({"GET", "/{path*}", testing::echo, false, "rest", nullptr});
  return router;
}

// The statuses of the responses in what a server sent on one connection (100 Continue skipped).
std::vector<int> statuses(const std::string& stream) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < stream.size()) {
    const size_t end = stream.find("\r\n\r\n", pos);
    if (end == std::string::npos || stream.compare(pos, 5, "HTTP/") != 0) break;
    const int status = std::stoi(stream.substr(pos + 9, 3));
    std::string head = stream.substr(pos, end - pos);
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t at = head.find("content-length:");
    const size_t length = at == std::string::npos ? 0 : std::stoul(head.substr(at + 15));
    pos = end + 4 + length;
    if (status != 100) out.push_back(status);
  }
  return out;
}

// Sends bytes on one connection, closes the sending side and returns everything answered.
std::string exchange(uint16_t port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string all;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    char chunk[4096];
    for (ssize_t n; (n = ::recv(fd, chunk, sizeof chunk, 0)) > 0;) all.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return all;
}

TEST(HttpRequestReader, AnswersTheFuzzCorpusAsTheServerDoes) {
  const Router router = test_router();
  ServerOptions options;
  options.body_limit = kBodyLimit;
  options.log = [](const std::string&) {};
  HttpServer server(router, options);
  server.start();
  const fs::path corpus = fs::path(PRECON_SOURCE_DIR) / "tests/fuzz/corpus/fuzz_http_request";
  size_t inputs = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(corpus)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const std::string bytes = text.str();
    std::vector<int> from_reader;
    const std::vector<ReadOutcome> outcomes = read_requests(bytes, router, kBodyLimit);
    for (const ReadOutcome& o : outcomes) from_reader.push_back(o.response.status);
    EXPECT_EQ(statuses(exchange(server.port(), bytes)), from_reader) << e.path().filename();
    ++inputs;
  }
  EXPECT_GE(inputs, 10u);
}

TEST(HttpRequestReader, PipelinedRequestsAndWhatEndsTheConnection) {
  const Router router = test_router();
  const std::string get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  std::vector<ReadOutcome> o = read_requests(get + get + "GET /api/v1/experiments/7 HTTP/1.1\r\nConnection: close\r\n\r\n" + get,
                                             router, kBodyLimit);
  ASSERT_EQ(o.size(), 3u);  // nothing after "Connection: close" is read
  EXPECT_EQ(o[2].request.route, "experiment_show");
  EXPECT_EQ(o[2].response.body, R"({"id":7})");
  EXPECT_TRUE(o[2].closes);
  EXPECT_FALSE(o[0].closes);

  // A refusal before the body closes the connection: the request after it is never answered.
  o = read_requests("POST /api/v1/experiments HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}" + get, router, kBodyLimit);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].response.status, 401);
  EXPECT_TRUE(o[0].closes);

  o = read_requests("POST /api/v1/report HTTP/1.1\r\nAuthorization: Bearer trial-token\r\nTransfer-Encoding: gzip\r\n\r\n" + get,
                    router, kBodyLimit);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].response.status, 501);

  o = read_requests("POST /api/v1/report HTTP/1.1\r\nAuthorization: Bearer trial-token\r\nContent-Length: 70000\r\n\r\n{",
                    router, kBodyLimit);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].response.status, 413);

  EXPECT_TRUE(read_requests("POST /api/v1/report HTTP/1.1\r\nContent-Length: 10\r\n", router, kBodyLimit).empty())
      << "a request cut short by the peer gets no answer";
  EXPECT_EQ(read_requests("GET / HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n", router, kBodyLimit).at(0).response.status,
            431);
  EXPECT_EQ(read_requests("GET /\x01 HTTP/1.1\r\n\r\n", router, kBodyLimit).at(0).response.status, 400);
}

}  // namespace
}  // namespace precon::orch
