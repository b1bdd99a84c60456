// GCC 12 in C++20 mode needs <utility> ahead of Boost.Asio's headers.
#include <utility>

#include "orchestrator/http/server.h"

#include "orchestrator/http/printable.h"
#include "orchestrator/http/request_reader.h"
#include "orchestrator/http/work_pool.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace precon::orch {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

// A connection (defined below). Named, not in the anonymous namespace: HttpServer::State holds the
// sessions, and a member whose type has internal linkage draws -Wsubobject-linkage.
namespace http_session {
class Session;
}  // namespace http_session
using http_session::Session;

namespace {

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// After an answer that closes the connection the peer may still be sending (a refused
// oversized body); reading and discarding it for a while keeps the kernel from answering with a
// reset that would destroy our answer before the peer reads it.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 64 << 20;
// Accept errors such as "too many open files" would spin; retry after a pause instead.
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);
// Connections over the caps still being answered 503 and drained; beyond this they are closed
// unanswered, so a flood cannot grow the refusals either.
constexpr size_t kMaxRefusing = 64;

}  // namespace

// Declaration order matters: the io_context (and with it any session still queued in it) is
// destroyed before the session registry and its mutex, which session destructors use.
struct HttpServer::State {
  State(const Router& router, ServerOptions options) : router(router), options(std::move(options)) {}

  void log(const std::string& message) noexcept {
    try {
      options.log(message);
    } catch (...) {  // a failing logger must not take an io thread down
    }
  }
  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  void admit(tcp::socket socket);  // a session for the connection, or its refusal over a cap
  // The counted session waiting longest for a request, from `address` ("" any); null when none.
  // With the mutex held.
  Session* longest_idle(const std::string& address);
  // After a big or slow offloaded answer: free pages back to the system, at most once a second.
  void trim_heap(size_t bytes, double seconds);

  const Router& router;
  ServerOptions options;
  std::atomic<bool> stopping{false};
  std::mutex mutex;
  std::condition_variable sessions_gone;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  size_t serving = 0;                                  // sessions within the caps
  std::unordered_map<std::string, size_t> per_address;  // serving sessions by peer address
  std::optional<net::io_context> io;
  std::optional<tcp::acceptor> acceptor;    // on its own strand
  std::optional<net::steady_timer> retry;  // on the acceptor's strand
  std::unique_ptr<WorkPool> pool;          // offloaded routes; null without workers
  std::atomic<int64_t> last_trim{0};       // steady-clock ms of the last malloc_trim
};

namespace http_session {

// One connection: reads requests one after another (keep-alive), answers each through the
// router on this session's strand, and closes on error, timeout, "Connection: close" or stop.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // refusal: the connection is over a cap (HttpServer::State::admit); it is answered that and closed.
  Session(tcp::socket&& socket, HttpServer::State& state, std::string address, std::string remote,
          std::optional<Response> refusal)
      : state_(state),
        stream_(std::move(socket)),
        deadline_(stream_.get_executor()),
        address_(std::move(address)),
        remote_(std::move(remote)),
        refusal_(std::move(refusal)) {}

  ~Session() {
    std::lock_guard lock(state_.mutex);
    state_.sessions.erase(this);
    if (counted) uncount();
    if (state_.sessions.empty()) state_.sessions_gone.notify_all();
  }

  // Within the caps (serving, per_address count it). Read and written with the registry's mutex held.
  bool counted = false;
  const std::string& address() const { return address_; }
  // Steady-clock ns since which it waits for a request; 0 while reading or answering one.
  int64_t idle_since() const { return idle_since_.load(); }
  // With the registry's mutex held: no longer counted against the caps.
  void uncount() {
    counted = false;
    --state_.serving;
    if (--state_.per_address[address_] == 0) state_.per_address.erase(address_);
  }

  // From admit(), its place given to a new connection (uncounted already): an idle connection
  // closes now; one that began a request meanwhile closes after answering it.
  void evict() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->evicted_ = true;
      if (self->phase_ == Phase::kIdle) self->stream_.cancel();
    });
  }

  void run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->refusal_) return self->answer_and_close(*self->refusal_);
      self->wait_for_request();
    });
  }

  // For HttpServer::stop()'s message about connections it cuts: "<address:port> (<phase>)".
  // Called with the registry's mutex held, which keeps the session's members alive.
  std::string describe() const {
    static constexpr const char* kPhases[] = {"idle", "reading a request", "answering", "closing"};
    return remote_ + " (" + kPhases[static_cast<int>(phase_.load())] + ")";
  }

  // From HttpServer::stop(): an idle connection closes now; a request being read or answered
  // finishes, and its answer closes the connection.
  void stop() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->phase_ == Phase::kIdle) self->stream_.cancel();
    });
  }

 private:
  enum class Phase { kIdle, kReading, kAnswering, kClosing };

  void wait_for_request() {
    if (state_.stopping || evicted_) return close();
    phase_ = Phase::kIdle;
    parser_.emplace();
    parser_->body_limit(state_.options.body_limit);
    if (buffer_.size() > 0) return read_header();  // pipelined: the next request is here already
    const auto& o = state_.options;
    stream_.expires_after(requests_ == 0 ? std::min(o.first_request_timeout, o.idle_timeout) : o.idle_timeout);
    idle_since_ = std::max<int64_t>(1, std::chrono::steady_clock::now().time_since_epoch().count());
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->idle_since_ = 0;
      if (ec) return self->close();  // idle timeout, peer gone, eviction or stop(): nothing to answer
      self->buffer_.commit(n);
      self->read_header();
    });
  }

  // The read timeout covers the whole request from here. It is our own timer rather than the
  // stream's, which would close the socket and leave no way to answer 408.
  void read_header() {
    phase_ = Phase::kReading;
    timed_out_ = false;
    stream_.expires_never();
    deadline_.expires_after(state_.options.read_timeout);
    deadline_.async_wait([self = shared_from_this(), request = ++requests_](beast::error_code ec) {
      if (ec || self->requests_ != request || self->phase_ != Phase::kReading) return;
      self->timed_out_ = true;
      self->stream_.cancel();
    });
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  // Before the body: refuse badly framed requests, and answer what the router would refuse on the
  // header alone (no token, no route) without reading an unauthenticated body or inviting it with
  // "100 Continue". Either way the unread body ends the connection.
  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
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

  void read_body() {
    bhttp::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->on_read_error(ec);
      self->handle();
    });
  }

  void on_read_error(beast::error_code ec) {
    if (timed_out_) {
      return answer_and_close(error_response(
          408, "request_timeout",
          "the request was not complete within " + std::to_string(state_.options.read_timeout.count()) + " ms"));
    }
    if (std::optional<Response> answer = parse_error_answer(ec, state_.options.body_limit)) {
      return answer_and_close(std::move(*answer));
    }
    close();  // peer gone mid-request, stop(): nobody to answer
  }

  // An answer before the request was read in full: the connection closes after it, because
  // whatever follows on it cannot be told apart from the rest of this request.
  void answer_and_close(Response response, std::string route = "") {
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

  void handle() {
    deadline_.cancel();
    phase_ = Phase::kAnswering;
    if (const Route* route = offloaded_route()) return offload(*route);
    Request request;
    double seconds = 0;
    std::optional<std::string> failure;
    Response response = answer_request(parser_->get(), state_.router, remote_, request, seconds, failure);
    finish(std::move(request), std::move(response), seconds, std::move(failure));
  }

  // The request's route when the worker pool answers it, else null.
  const Route* offloaded_route() const {
    if (!state_.pool) return nullptr;
    const auto& message = parser_->get();
    const std::string method = message.method() == bhttp::verb::head ? "GET" : std::string(message.method_string());
    const auto target = message.target();
    const Route* route = state_.router.match(method, std::string(target.substr(0, target.find('?'))));
    return route && route->offload ? route : nullptr;
  }

  // Answers on the worker pool; the parser is left alone on this strand until the answer is back.
  void offload(const Route& route) {
    const bool queued = state_.pool->try_post([self = shared_from_this()] {
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
    Response busy = error_response(503, "busy",
                                   "the controller is answering as many slow requests as it queues (" +
                                       std::to_string(state_.options.worker_queue) + " waiting); retry shortly");
    busy.headers["Retry-After"] = "1";
    finish(std::move(request), std::move(busy), 0, std::nullopt);
  }

  void finish(Request request, Response response, double seconds, std::optional<std::string> failure) {
    const auto& message = parser_->get();
    if (failure) state_.log("answering " + request.method + " " + request.path + " failed: " + *failure);
    report(request, response, seconds);
    send(std::move(response), message.keep_alive(), message.version(), message.method() == bhttp::verb::head);
  }

  void report(const Request& request, const Response& response, double seconds) {
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
  void send(Response&& response, bool keep_alive, unsigned version, bool head) {
    phase_ = Phase::kAnswering;
    const int status = response.status >= 100 && response.status <= 599 ? response.status : 500;
    response_ = {};
    response_.version(version == 10 ? 10 : 11);
    response_.result(static_cast<unsigned>(status));
    response_.set(bhttp::field::server, "precon");
    if (!response.content_type.empty()) response_.set(bhttp::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) response_.set(name, value);
    response_.keep_alive(keep_alive && !state_.stopping && !evicted_);
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

  void linger() {
    phase_ = Phase::kClosing;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    drain_.resize(16384);
    stream_.expires_after(kLingerTime);
    drain();
  }

  void drain() {
    stream_.async_read_some(net::buffer(drain_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > kLingerBytes) return self->close();
      self->drain();
    });
  }

  void close() {
    phase_ = Phase::kClosing;
    deadline_.cancel();  // its wait holds the session: a peer gone mid-request would keep its slot
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  HttpServer::State& state_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  net::steady_timer deadline_;  // the read timeout of the request being read
  uint64_t requests_ = 0;       // requests begun on this connection: tells a stale deadline apart
  bool timed_out_ = false;      // the deadline cut the read: answer 408
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> response_;  // alive until its write completes
  std::vector<char> drain_;
  size_t drained_ = 0;
  std::string address_;  // the peer's IP address, for the per-address cap
  std::string remote_;   // "address:port"
  std::optional<Response> refusal_;
  std::atomic<Phase> phase_{Phase::kIdle};  // read by describe() from HttpServer::stop()
  std::atomic<int64_t> idle_since_{0};      // read by admit() on the acceptor's strand
  bool evicted_ = false;                    // its place was given to a newer connection
};

}  // namespace http_session
using namespace http_session;

void HttpServer::State::do_accept() {
  acceptor->async_accept(net::make_strand(*io),
                         [this](beast::error_code ec, tcp::socket socket) { on_accept(ec, std::move(socket)); });
}

void HttpServer::State::on_accept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor->is_open()) return;  // stop()
  if (ec) {
    log("accepting a connection failed: " + ec.message() + "; retrying");
    retry->expires_after(kAcceptRetry);
    retry->async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec && acceptor->is_open()) do_accept();
    });
    return;
  }
  if (!stopping) admit(std::move(socket));
  do_accept();
}

void HttpServer::State::admit(tcp::socket socket) {
  beast::error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // gone already
  const std::string address = peer.address().to_string();
  std::optional<Response> refusal;
  std::shared_ptr<Session> session, evicted;
  {
    std::lock_guard lock(mutex);
    const size_t from_address = per_address.count(address) ? per_address[address] : 0;
    const bool address_full = from_address >= options.max_connections_per_address;
    if (address_full || serving >= options.max_connections) {
      // Over the address's cap a connection of that address makes room (which also frees one
      // in all); over the total cap alone, any.
      if (Session* idle = longest_idle(address_full ? address : "")) {
        evicted = sessions.at(idle).lock();
        if (evicted) evicted->uncount();
      }
    }
    if (evicted) {
      // Its slot is the new connection's.
    } else if (serving >= options.max_connections) {
      refusal = error_response(503, "too_many_connections",
                               "the server has " + std::to_string(serving) +
                                   " connections open, its limit, all of them busy with requests; retry shortly");
    } else if (address_full) {
      refusal = error_response(503, "too_many_connections",
                               "this client address has " + std::to_string(from_address) +
                                   " connections open, the limit per address, all of them busy with requests; "
                                   "retry shortly");
    }
    const bool refused = refusal.has_value();
    if (refused) {
      if (sessions.size() - serving >= kMaxRefusing) return;  // closed unanswered
      refusal->headers["Retry-After"] = "1";
    }
    session = std::make_shared<Session>(std::move(socket), *this, address,
                                        address + ":" + std::to_string(peer.port()), std::move(refusal));
    if (!refused) {
      session->counted = true;
      ++serving;
      ++per_address[address];
    }
    sessions.emplace(session.get(), session);
  }
  if (evicted) evicted->evict();
  session->run();
}

Session* HttpServer::State::longest_idle(const std::string& address) {
  Session* oldest = nullptr;
  int64_t oldest_since = 0;
  const int64_t latest = (std::chrono::steady_clock::now() - options.evictable_after).time_since_epoch().count();
  for (const auto& [raw, weak] : sessions) {
    if (!raw->counted || (!address.empty() && raw->address() != address)) continue;
    const int64_t since = raw->idle_since();
    if (since > 0 && since <= latest && (!oldest || since < oldest_since)) {
      oldest = raw;
      oldest_since = since;
    }
  }
  return oldest;
}

void HttpServer::State::trim_heap(size_t bytes, double seconds) {
  if (bytes < options.trim_after_bytes && seconds < 1.0) return;
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t last = last_trim.load();
  if (now - last < 1000 || !last_trim.compare_exchange_strong(last, now)) return;
  ::malloc_trim(0);
}

bool reachable_from_other_machines(const std::string& bind) {
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(bind, ec);
  if (ec) return false;
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return !net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6()).is_loopback();
  }
  return !address.is_loopback();
}

HttpServer::HttpServer(const Router& router, ServerOptions options)
    : state_(std::make_unique<State>(router, std::move(options))) {
  ServerOptions& o = state_->options;
  if (!o.log) o.log = [](const std::string& message) { std::cerr << "precon: http: " << printable(message) << "\n"; };
  o.threads = std::max(o.threads, 1);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::listen() {
  if (listening_ || stopped_) throw ServerError("the HTTP server can listen only once");
  State& s = *state_;
  const std::string where = s.options.bind + ":" + std::to_string(s.options.port);
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(s.options.bind, ec);
  if (ec) {
    throw ServerError("cannot listen on \"" + s.options.bind +
                      "\": not an IP address (use 127.0.0.1 for this machine only, 0.0.0.0 for every interface)");
  }
  const tcp::endpoint endpoint(address, s.options.port);
  s.io.emplace(s.options.threads);
  s.acceptor.emplace(net::make_strand(*s.io));
  s.retry.emplace(s.acceptor->get_executor());
  s.acceptor->open(endpoint.protocol(), ec);
  if (!ec) s.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (ec == net::error::address_in_use) {
    throw ServerError("cannot listen on " + where +
                      ": the address is already in use (another `precon serve`?); stop it or choose another port");
  }
  if (!ec) s.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw ServerError("cannot listen on " + where + ": " + ec.message());
  port_ = s.acceptor->local_endpoint().port();
  listening_ = true;
}

void HttpServer::start() {
  if (started_ || stopped_) throw ServerError("the HTTP server can be started only once");
  if (!listening_) listen();
  State& s = *state_;
  started_ = true;
  if (s.options.workers > 0) s.pool = std::make_unique<WorkPool>(s.options.workers, s.options.worker_queue);
  s.do_accept();
  for (int i = 0; i < s.options.threads; ++i) {
    threads_.emplace_back([&s] {
      for (;;) {
        try {
          s.io->run();
          return;
        } catch (const std::exception& e) {  // handlers catch their own; this is a last resort
          s.log(std::string("io thread: ") + e.what());
        }
      }
    });
  }
}

uint16_t HttpServer::port() const { return port_; }

std::string HttpServer::url() const {
  const std::string& bind = state_->options.bind;
  const bool v6 = bind.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + bind + "]" : bind) + ":" + std::to_string(port_);
}

void HttpServer::stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  State& s = *state_;
  s.stopping = true;
  net::post(s.acceptor->get_executor(), [&s] {
    beast::error_code ignored;
    s.acceptor->close(ignored);
    s.retry->cancel();
  });
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(s.mutex);
    for (auto& [raw, weak] : s.sessions) {
      if (auto session = weak.lock()) live.push_back(std::move(session));
    }
  }
  for (auto& session : live) session->stop();
  live.clear();
  size_t cut = 0;
  std::string which;
  {
    std::unique_lock lock(s.mutex);
    s.sessions_gone.wait_for(lock, s.options.stop_timeout, [&] { return s.sessions.empty(); });
    cut = s.sessions.size();
    for (const auto& [raw, weak] : s.sessions) which += (which.empty() ? "" : ", ") + raw->describe();
  }
  if (cut > 0) {
    s.log("stopping: " + std::to_string(cut) + " connection(s) still busy after the stop timeout are cut: " + which);
  }
  if (s.pool) s.pool->stop();  // before the io_context goes: its jobs post back to sessions
  s.io->stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  s.retry.reset();
  s.acceptor.reset();
  s.io.reset();  // destroys what is still queued, sessions included
}

}  // namespace precon::orch
