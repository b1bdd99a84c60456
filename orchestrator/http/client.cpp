// GCC 12 in C++20 mode needs <utility> ahead of Boost.Asio's headers.
#include <utility>

#include "orchestrator/http/client.h"

#include <algorithm>
#include <functional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "worker/report/reporter.h"

namespace precon::orch {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

namespace {

// Larger than any answer of ours (a downsampled metric series, a log tail).
constexpr uint64_t kAnswerLimit = uint64_t{1} << 30;

std::string lower(beast::string_view s) {
  std::string out(s.data(), s.size());
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

ClientResponse http_request(const std::string& base_url, const std::string& method, const std::string& target,
                            const std::string& body, const std::map<std::string, std::string>& headers,
                            std::chrono::milliseconds timeout) {
  worker::ControllerUrl url;
  try {
    url = worker::parse_controller_url(base_url);
  } catch (const std::exception& e) {
    throw ClientError(e.what());
  }
  std::string full_target = target.empty() ? "/" : target;
  if (url.target != "/") {
    std::string prefix = url.target;
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    full_target = prefix + full_target;
  }

  bhttp::request<bhttp::string_body> request;
  request.version(11);
  const bhttp::verb verb = bhttp::string_to_verb(method);
  if (verb == bhttp::verb::unknown) {
    request.method_string(method);
  } else {
    request.method(verb);
  }
  request.target(full_target);
  const bool v6 = url.host.find(':') != std::string::npos;
  request.set(bhttp::field::host, (v6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port));
  request.set(bhttp::field::user_agent, "precon");
  if (!body.empty()) request.set(bhttp::field::content_type, "application/json");
  for (const auto& [name, value] : headers) request.set(name, value);
  request.keep_alive(false);
  request.body() = body;
  request.prepare_payload();

  net::io_context io;
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(kAnswerLimit);
  const char* stage = "resolving the host";
  beast::error_code result;
  bool done = false;

  const auto finish = [&](beast::error_code ec) {
    result = ec;
    done = true;
  };
  const auto read = [&] {
    stage = "reading the answer";
    bhttp::async_read(stream, buffer, parser, [&](beast::error_code ec, size_t) { finish(ec); });
  };
  resolver.async_resolve(url.host, std::to_string(url.port), [&](beast::error_code ec, tcp::resolver::results_type r) {
    if (ec) return finish(ec);
    stage = "connecting";
    stream.async_connect(r, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return finish(ec);
      stage = "sending the request";
      bhttp::async_write(stream, request, [&](beast::error_code ec, size_t) {
        // A server refusing the request (413) may close before reading it all: its answer is
        // still worth reading.
        if (ec && ec != net::error::broken_pipe && ec != net::error::connection_reset) return finish(ec);
        read();
      });
    });
  });
  io.run_for(timeout);
  if (!done) {
    resolver.cancel();
    beast::error_code ignored;
    stream.socket().close(ignored);
    io.restart();
    io.run();  // the cancelled operations complete; nothing refers to this frame afterwards
    throw ClientError("the controller at " + base_url + " did not answer " + method + " " + full_target + " within " +
                      std::to_string(timeout.count()) + " ms (" + stage + ")");
  }
  if (result == net::error::connection_refused) {
    throw ClientError("cannot reach the controller at " + base_url +
                      ": connection refused — is `precon serve` running?");
  }
  if (result) {
    throw ClientError(method + " " + full_target + " to the controller at " + base_url + " failed while " + stage +
                      ": " + result.message());
  }
  ClientResponse response;
  const auto& message = parser.get();
  response.status = static_cast<int>(message.result_int());
  response.body = message.body();
  for (const auto& field : message) {
    auto [it, inserted] = response.headers.emplace(lower(field.name_string()), std::string(field.value()));
    if (!inserted) it->second += ", " + std::string(field.value());
  }
  return response;
}

}  // namespace precon::orch
