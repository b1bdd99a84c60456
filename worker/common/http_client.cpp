// GCC 12 in C++20 mode needs <utility> ahead of Boost.Asio's headers.
#include <utility>

#include "worker/common/http_client.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace precon::worker {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// How often a waiting exchange looks up to see whether it was asked to give up: the bound on
// how late an abort takes effect.
constexpr auto kAbortPoll = std::chrono::milliseconds(25);

std::string lower(beast::string_view s) {
  std::string out(s.data(), s.size());
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string authority(const HttpUrl& url) {
  const bool v6 = url.host.find(':') != std::string::npos;
  return (v6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port);
}

}  // namespace

const char* http_stage_text(HttpStage stage) {
  switch (stage) {
    case HttpStage::kUrl: return "parsing the URL";
    case HttpStage::kResolve: return "resolving the host";
    case HttpStage::kConnect: return "connecting";
    case HttpStage::kSend: return "sending the request";
    case HttpStage::kRead: return "reading the answer";
  }
  return "?";
}

HttpUrl parse_http_url(const std::string& url) {
  const auto fail = [&](const std::string& why) {
    return HttpClientError("URL \"" + url + "\": " + why + " (expected http://host:port/path)", HttpStage::kUrl);
  };
  const std::string_view scheme = "http://";
  if (url.rfind("https://", 0) == 0) throw fail("https is not supported; precon speaks plain http");
  if (url.rfind(scheme, 0) != 0) throw fail("only http:// URLs are supported");
  std::string_view rest = std::string_view(url).substr(scheme.size());
  HttpUrl out;
  const size_t slash = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    if (rest[slash] == '#') throw fail("a fragment has no meaning here");
    out.target = std::string(rest.substr(slash));
    if (out.target[0] == '?') out.target.insert(0, "/");
  }
  if (authority.find('@') != std::string_view::npos) throw fail("credentials belong in a token, not the URL");
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) throw fail("unterminated [IPv6] address");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') throw fail("unexpected text after the [IPv6] address");
    if (!after.empty()) port = after.substr(1);
    if (after == ":") throw fail("empty port");
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) throw fail("empty port");
    }
  }
  if (out.host.empty()) throw fail("no host");
  if (!port.empty()) {
    unsigned value = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || value > 65535) throw fail("port must be a number from 1 to 65535");
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value == 0 || value > 65535) throw fail("port must be a number from 1 to 65535");
    out.port = static_cast<uint16_t>(value);
  }
  return out;
}

struct HttpConnection::State {
  HttpUrl url;
  HttpConnectionOptions options;
  net::io_context io;
  tcp::resolver resolver{io};
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  bool open = false;

  void close() {
    resolver.cancel();
    if (stream) {
      beast::error_code ignored;
      stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream->close();
    }
    open = false;
    buffer.clear();
  }

  // Starts one asynchronous operation and runs the loop until it completes, the deadline passes
  // (then: timeout) or the abort flag is set (then: operation_aborted). Either way the operation
  // has finished when this returns, so nothing refers to the caller's frame afterwards.
  template <class Start>
  beast::error_code await(Start&& start, Clock::time_point deadline) {
    std::optional<beast::error_code> result;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io.restart();
    while (!result) {
      const bool aborted = options.abort && options.abort->load();
      const auto now = Clock::now();
      if (aborted || now >= deadline) {
        close();
        io.restart();
        io.run();  // the cancelled operation completes; nothing else is pending
        return aborted ? beast::error_code(net::error::operation_aborted) : beast::error_code(beast::error::timeout);
      }
      io.run_for(std::min<Clock::duration>(kAbortPoll, deadline - now));
    }
    return *result;
  }

  [[noreturn]] void fail(HttpStage stage, beast::error_code ec, std::chrono::milliseconds timeout) {
    close();
    const bool timed_out = ec == beast::error::timeout;
    const std::string cause = timed_out ? "timed out after " + std::to_string(timeout.count()) + " ms"
                              : ec == net::error::operation_aborted ? std::string("abandoned")
                                                                    : ec.message();
    std::string message;
    switch (stage) {
      case HttpStage::kResolve: message = "cannot resolve " + url.host + ": " + cause; break;
      case HttpStage::kConnect: message = "cannot connect to " + authority(url) + ": " + cause; break;
      case HttpStage::kSend: message = "sending to " + authority(url) + " failed: " + cause; break;
      default: message = "no answer from " + authority(url) + ": " + cause; break;
    }
    throw HttpClientError(message, stage, timed_out, ec == net::error::connection_refused);
  }
};

HttpConnection::HttpConnection(HttpUrl url, HttpConnectionOptions options) : state_(std::make_unique<State>()) {
  state_->url = std::move(url);
  state_->options = std::move(options);
}

HttpConnection::~HttpConnection() { state_->close(); }

bool HttpConnection::is_open() const { return state_->open; }
void HttpConnection::close() { state_->close(); }
const HttpUrl& HttpConnection::url() const { return state_->url; }

HttpResponse HttpConnection::exchange(const HttpRequest& request, std::chrono::milliseconds timeout) {
  State& s = *state_;
  const auto deadline = Clock::now() + timeout;
  beast::error_code ec;
  if (!s.open) {
    tcp::resolver::results_type endpoints;
    ec = s.await(
        [&](auto handler) {
          s.resolver.async_resolve(s.url.host, std::to_string(s.url.port),
                                   [&endpoints, handler](beast::error_code e, tcp::resolver::results_type r) mutable {
                                     endpoints = std::move(r);
                                     handler(e);
                                   });
        },
        deadline);
    if (ec) s.fail(HttpStage::kResolve, ec, timeout);
    s.stream.emplace(s.io);
    ec = s.await([&](auto handler) { s.stream->async_connect(endpoints, handler); }, deadline);
    if (ec) s.fail(HttpStage::kConnect, ec, timeout);
    s.open = true;
  }

  bhttp::request<bhttp::string_body> message;
  message.version(11);
  const bhttp::verb verb = bhttp::string_to_verb(request.method);
  if (verb == bhttp::verb::unknown) {
    message.method_string(request.method);
  } else {
    message.method(verb);
  }
  message.target(request.target.empty() ? "/" : request.target);
  message.set(bhttp::field::host, authority(s.url));
  message.set(bhttp::field::user_agent, s.options.user_agent);
  if (!request.body.empty()) message.set(bhttp::field::content_type, "application/json");
  for (const auto& [name, value] : request.headers) message.set(name, value);
  message.keep_alive(s.options.keep_alive);
  message.body() = request.body;
  message.prepare_payload();

  ec = s.await([&](auto handler) { bhttp::async_write(*s.stream, message, handler); }, deadline);
  // A server refusing the request (413) may close before reading it all: its answer is still
  // worth reading.
  if (ec && ec != net::error::broken_pipe && ec != net::error::connection_reset) s.fail(HttpStage::kSend, ec, timeout);

  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(s.options.body_limit);
  ec = s.await([&](auto handler) { bhttp::async_read_header(*s.stream, s.buffer, parser, handler); }, deadline);
  // Boost 1.74 loses the parser's own body_limit error for a Content-Length body.
  if (!ec && parser.content_length() && *parser.content_length() > s.options.body_limit) ec = bhttp::error::body_limit;
  if (!ec && !parser.is_done()) {
    ec = s.await([&](auto handler) { bhttp::async_read(*s.stream, s.buffer, parser, handler); }, deadline);
  }
  if (ec) s.fail(HttpStage::kRead, ec, timeout);

  const auto& answer = parser.get();
  HttpResponse response;
  response.status = static_cast<int>(answer.result_int());
  response.body = answer.body();
  response.keep_alive = answer.keep_alive();
  for (const auto& field : answer) {
    auto [it, inserted] = response.headers.emplace(lower(field.name_string()), std::string(field.value()));
    if (!inserted) it->second += ", " + std::string(field.value());
  }
  if (!s.options.keep_alive || !response.keep_alive) s.close();
  return response;
}

HttpResponse http_request(const HttpUrl& url, const HttpRequest& request, std::chrono::milliseconds timeout,
                          HttpConnectionOptions options) {
  options.keep_alive = false;
  HttpConnection connection(url, std::move(options));
  return connection.exchange(request, timeout);
}

}  // namespace precon::worker
