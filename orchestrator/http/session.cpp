// The HTTP server's sessions (session.h): one connection each, from its first request to its close.
#include "orchestrator/http/session.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "orchestrator/http/printable.h"
#include "orchestrator/http/request_reader.h"

namespace precon::orch::http_session {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// After an answer that closes the connection the peer may still be sending (a refused
// oversized body); reading and discarding it for a while keeps the kernel from answering with a
// reset that would destroy our answer before the peer reads it.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 64 << 20;

// On every answer. The dashboard loads only its own files (no inline script or style: it sets
// styles through the CSSOM) and talks only to this origin; no page may frame it (its cancel
// buttons could be clicked through a decoy), browsers must not guess a type other than the one
// sent, and no URL of it leaves as a referrer.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace

Session::Session(tcp::socket&& socket, HttpServer::State& state, std::string address, std::string remote,
                 std::optional<Response> refusal)
    : state_(state),
      stream_(std::move(socket)),
      deadline_(stream_.get_executor()),
      admitted_(std::chrono::steady_clock::now().time_since_epoch().count()),
      reserve_until_(refusal ? std::chrono::steady_clock::now() + state.options.reserve_timeout
                             : std::chrono::steady_clock::time_point::max()),
      address_(std::move(address)),
      remote_(std::move(remote)),
      refusal_(std::move(refusal)) {}

Session::~Session() {
  std::lock_guard lock(state_.mutex);
  state_.sessions.erase(this);
  if (counted) uncount();
  if (reserved) unreserve();
  if (state_.sessions.empty()) state_.sessions_gone.notify_all();
}

void Session::uncount() {
  counted = false;
  --state_.serving;
  if (--state_.per_address[address_] == 0) state_.per_address.erase(address_);
}

void Session::unreserve() {
  reserved = false;
  --state_.reserving;
}

bool Session::may_leave_reserve() const {
  const Phase phase = phase_.load();
  return phase == Phase::kIdle || phase == Phase::kClosing || header_since_.load() > 0;
}

void Session::evict(bool slow_header) {
  net::post(stream_.get_executor(), [self = shared_from_this(), slow_header] {
    self->evicted_ = true;
    const Phase phase = self->phase_;
    if (phase == Phase::kIdle || phase == Phase::kClosing || (slow_header && self->header_since_ > 0)) {
      self->stream_.cancel();
    }
  });
}

void Session::run() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_for_request(); });
}

std::string Session::describe() const {
  static constexpr const char* kPhases[] = {"idle", "reading a request", "answering", "closing"};
  return remote_ + " (" + kPhases[static_cast<int>(phase_.load())] + ")";
}

void Session::stop() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->phase_ == Phase::kIdle) self->stream_.cancel();
  });
}

void Session::wait_for_request() {
  if (state_.stopping || evicted_) return close();
  phase_ = Phase::kIdle;
  parser_.emplace();
  parser_->body_limit(state_.options.body_limit);
  if (buffer_.size() > 0) return read_header();  // pipelined: the next request is here already
  const auto& o = state_.options;
  if (refusal_) {
    stream_.expires_at(reserve_until_);
  } else {
    stream_.expires_after(requests_ == 0 ? std::min(o.first_request_timeout, o.idle_timeout) : o.idle_timeout);
  }
  idle_since_ = std::max<int64_t>(1, std::chrono::steady_clock::now().time_since_epoch().count());
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->idle_since_ = 0;
    if (ec) return self->close();  // idle timeout, peer gone, eviction or stop(): nothing to answer
    self->buffer_.commit(n);
    self->read_header();
  });
}

// The header timeout, then the read timeout, count from here. They are our own timer rather than
// the stream's, which would close the socket and leave no way to answer 408.
void Session::read_header() {
  phase_ = Phase::kReading;
  timed_out_ = false;
  ++requests_;
  request_start_ = std::chrono::steady_clock::now();
  header_since_ = std::max<int64_t>(1, request_start_.time_since_epoch().count());
  stream_.expires_never();
  arm_deadline(std::min(state_.options.header_timeout, state_.options.read_timeout));
  bhttp::async_read_header(stream_, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

// Setting the expiry cancels the wait for the previous one.
void Session::arm_deadline(std::chrono::milliseconds limit) {
  const auto at = std::min(request_start_ + limit, reserve_until_);
  deadline_after_ = std::chrono::duration_cast<std::chrono::milliseconds>(at - request_start_);
  deadline_.expires_at(at);
  deadline_.async_wait([self = shared_from_this(), request = requests_](beast::error_code ec) {
    if (ec || self->requests_ != request || self->phase_ != Phase::kReading) return;
    self->timed_out_ = true;
    self->stream_.cancel();
  });
}

// Before the body: refuse badly framed requests, and answer what the router would refuse on the
// header alone (no token, no route) without reading an unauthenticated body or inviting it with
// "100 Continue". Either way the unread body ends the connection. A connection in the reserve is
// answered only for a reserved route.
void Session::on_header(beast::error_code ec) {
  header_since_ = 0;
  if (ec) return on_read_error(ec);
  if (std::optional<Response> misdirected = host_refusal(parser_->get())) return answer_and_close(std::move(*misdirected));
  if (refusal_ && !reserved_route()) return answer_and_close(*refusal_);
  arm_deadline(state_.options.read_timeout);
  std::string route;
  if (std::optional<Response> refused = header_refusal(*parser_, state_.router, remote_, route)) {
    return answer_and_close(std::move(*refused), std::move(route));
  }
  const RequestHeader& header = parser_->get();
  if (!beast::iequals(header[bhttp::field::expect], "100-continue")) return read_body();
  net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     if (ec) return self->on_read_error(ec);
                     self->read_body();
                   });
}

// A Host this server does not answer to: a page elsewhere whose name was pointed at this address.
std::optional<Response> Session::host_refusal(const RequestHeader& header) const {
  const std::optional<HostCheck>& check = state_.options.host_check;
  if (!check) return std::nullopt;
  const auto it = header.find(bhttp::field::host);
  std::optional<std::string_view> host;
  if (it != header.end()) host = std::string_view(it->value().data(), it->value().size());
  if (check->allows(host, header.version(), state_.port)) return std::nullopt;
  const std::string shown = host ? "Host \"" + printable(host->substr(0, 200)) + "\"" : std::string("a request without Host");
  return error_response(421, "misdirected_request",
                        shown + " is not a name this controller answers to (its address, localhost, or a name given "
                                "to `precon serve --allowed-host`)");
}

// The route the request's header names (HEAD as GET), or null.
const Route* Session::matched_route() const {
  const auto& message = parser_->get();
  const std::string method = message.method() == bhttp::verb::head ? "GET" : std::string(message.method_string());
  const auto target = message.target();
  return state_.router.match(method, std::string(target.substr(0, target.find('?'))));
}

bool Session::reserved_route() const {
  const Route* route = matched_route();
  return route && route->reserved;
}

void Session::read_body() {
  bhttp::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->on_read_error(ec);
    self->handle();
  });
}

void Session::on_read_error(beast::error_code ec) {
  if (evicted_) return close();  // its place went to another connection
  if (timed_out_) {
    const char* what = parser_->is_header_done() ? "the request was" : "the request header was";
    return answer_and_close(error_response(
        408, "request_timeout",
        std::string(what) + " not complete within " + std::to_string(deadline_after_.count()) + " ms"));
  }
  if (std::optional<Response> answer = parse_error_answer(ec, state_.options.body_limit)) {
    return answer_and_close(std::move(*answer));
  }
  close();  // peer gone mid-request, stop(): nobody to answer
}

// An answer before the request was read in full: the connection closes after it, because
// whatever follows on it cannot be told apart from the rest of this request.
void Session::answer_and_close(Response response, std::string route) {
  deadline_.cancel();
  Request request;
  request.route = std::move(route);
  if (parser_ && parser_->is_header_done()) {
    const auto& header = parser_->get();
    request.method = std::string(header.method_string());
    request.path = std::string(header.target().substr(0, header.target().find('?')));
  }
  request.remote = remote_;
  report(request, response, 0);
  send(std::move(response), false, 11, false);
}

void Session::handle() {
  deadline_.cancel();
  phase_ = Phase::kAnswering;
  if (const Route* route = offloaded_route()) return offload(*route);
  Request request;
  double seconds = 0;
  std::optional<std::string> failure;
  Response response = answer_request(parser_->get(), state_.router, remote_, request, seconds, failure);
  finish(std::move(request), std::move(response), seconds, std::move(failure));
}

// The request's route when a worker pool answers it, else null.
const Route* Session::offloaded_route() const {
  if (!state_.pool && !state_.writers) return nullptr;
  const Route* route = matched_route();
  if (!route) return nullptr;
  return (route->writes && state_.writers) || (route->offload && state_.pool) ? route : nullptr;
}

// Answers on the route's worker pool; the parser is left alone on this strand until the answer is back.
void Session::offload(const Route& route) {
  const bool writes = route.writes && state_.writers;
  WorkPool& pool = writes ? *state_.writers : *state_.pool;
  const bool queued = pool.try_post([self = shared_from_this()] {
    Request request;
    double seconds = 0;
    std::optional<std::string> failure;
    Response response = answer_request(self->parser_->get(), self->state_.router, self->remote_, request, seconds, failure);
    const size_t bytes = response.body.size();
    net::post(self->stream_.get_executor(), [self, request = std::move(request), response = std::move(response),
                                             seconds, failure = std::move(failure)]() mutable {
      self->finish(std::move(request), std::move(response), seconds, std::move(failure));
    });
    self->state_.trim_heap(bytes, seconds);
  });
  if (queued) return;
  Request request = to_request(parser_->get(), "", remote_);
  request.route = route.name;
  const std::string what = writes ? "writes" : "slow requests";
  const size_t waiting = writes ? state_.options.writer_queue : state_.options.worker_queue;
  Response busy = error_response(503, "busy",
                                 "the controller is answering as many " + what + " as it queues (" +
                                     std::to_string(waiting) + " waiting); retry shortly");
  busy.headers["Retry-After"] = "1";
  finish(std::move(request), std::move(busy), 0, std::nullopt);
}

void Session::finish(Request request, Response response, double seconds, std::optional<std::string> failure) {
  const auto& message = parser_->get();
  if (failure) state_.log("answering " + request.method + " " + request.path + " failed: " + *failure);
  report(request, response, seconds);
  send(std::move(response), message.keep_alive(), message.version(), message.method() == bhttp::verb::head);
}

void Session::report(const Request& request, const Response& response, double seconds) {
  if (!state_.options.on_request) return;
  try {
    state_.options.on_request(request, response, seconds);
  } catch (const std::exception& e) {
    state_.log(std::string("on_request hook failed: ") + e.what());
  } catch (...) {
    state_.log("on_request hook failed");
  }
}

// head: the answer to a HEAD request: the GET answer's header, Content-Length included, without its body.
void Session::send(Response&& response, bool keep_alive, unsigned version, bool head) {
  phase_ = Phase::kAnswering;
  const int status = response.status >= 100 && response.status <= 599 ? response.status : 500;
  response_ = {};
  response_.version(version == 10 ? 10 : 11);
  response_.result(static_cast<unsigned>(status));
  response_.set(bhttp::field::server, "precon");
  response_.set("Content-Security-Policy", kContentSecurityPolicy);
  response_.set("X-Content-Type-Options", "nosniff");
  response_.set("Referrer-Policy", "no-referrer");
  if (!response.content_type.empty()) response_.set(bhttp::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) response_.set(name, value);
  response_.keep_alive(keep_alive && !state_.stopping && !evicted_ && !refusal_);
  if (head) {
    response_.content_length(response.body.size());
  } else {
    response_.body() = std::move(response.body);
    response_.prepare_payload();
  }
  stream_.expires_after(state_.options.read_timeout);
  bhttp::async_write(stream_, response_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->close();
    if (!self->response_.keep_alive()) return self->linger();
    self->wait_for_request();
  });
}

void Session::linger() {
  phase_ = Phase::kClosing;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  drain_.resize(16384);
  stream_.expires_after(kLingerTime);
  drain();
}

void Session::drain() {
  stream_.async_read_some(net::buffer(drain_), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->drained_ += n;
    if (ec || self->drained_ > kLingerBytes) return self->close();
    self->drain();
  });
}

void Session::close() {
  phase_ = Phase::kClosing;
  deadline_.cancel();  // its wait holds the session: a peer gone mid-request would keep its slot
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

}  // namespace precon::orch::http_session
