// The HTTP server's listener and lifecycle: listening, accepting within the connection caps,
// the io threads, and a stop that lets requests in progress finish. A session per connection
// (session.h) does the rest; both share HttpServer::State (server_state.h).
// GCC 12 in C++20 mode needs <utility> ahead of Boost.Asio's headers.
#include <utility>

#include "orchestrator/http/server.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "orchestrator/http/printable.h"
#include "orchestrator/http/server_state.h"
#include "orchestrator/http/session.h"

namespace precon::orch {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using http_session::Session;

namespace {

// Accept errors such as "too many open files" would spin; retry after a pause instead.
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);

}  // namespace

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
  bool slow_header = true;  // what the evicted session was chosen for
  {
    std::lock_guard lock(mutex);
    const size_t from_address = per_address.count(address) ? per_address[address] : 0;
    const bool address_full = from_address >= options.max_connections_per_address;
    if (address_full || serving >= options.max_connections) {
      // Over the address's cap a connection of that address makes room (which also frees one
      // in all); over the total cap alone, any.
      if (Session* victim = evictable(address_full ? address : "", slow_header)) {
        evicted = sessions.at(victim).lock();
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
      if (reserving >= options.reserved_connections) {
        Session* victim = reserve_evictable();
        if (victim) evicted = sessions.at(victim).lock();
        if (!evicted) return;  // closed unanswered
        evicted->unreserve();
      }
      refusal->headers["Retry-After"] = "1";
    }
    session = std::make_shared<Session>(std::move(socket), *this, address,
                                        address + ":" + std::to_string(peer.port()), std::move(refusal));
    if (refused) {
      session->reserved = true;
      ++reserving;
    } else {
      session->counted = true;
      ++serving;
      ++per_address[address];
    }
    sessions.emplace(session.get(), session);
  }
  if (evicted) evicted->evict(slow_header);
  session->run();
}

// A session sending its header slowly goes first: a client sends a header in one go. Then the one
// idle longest, which costs its client no more than a reconnect.
Session* HttpServer::State::evictable(const std::string& address, bool& slow_header) {
  Session* slowest = nullptr;
  Session* idlest = nullptr;
  int64_t slowest_since = 0, idlest_since = 0;
  const int64_t latest = (std::chrono::steady_clock::now() - options.evictable_after).time_since_epoch().count();
  for (const auto& [raw, weak] : sessions) {
    if (!raw->counted || (!address.empty() && raw->address() != address)) continue;
    const int64_t header = raw->header_since();
    if (header > 0 && header <= latest && (!slowest || header < slowest_since)) {
      slowest = raw;
      slowest_since = header;
    }
    const int64_t idle = raw->idle_since();
    if (idle > 0 && idle <= latest && (!idlest || idle < idlest_since)) {
      idlest = raw;
      idlest_since = idle;
    }
  }
  slow_header = slowest != nullptr;
  return slowest ? slowest : idlest;
}

Session* HttpServer::State::reserve_evictable() {
  Session* oldest = nullptr;
  for (const auto& [raw, weak] : sessions) {
    if (raw->reserved && raw->may_leave_reserve() && (!oldest || raw->admitted() < oldest->admitted())) oldest = raw;
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
  s.port = port_;
  listening_ = true;
}

void HttpServer::start() {
  if (started_ || stopped_) throw ServerError("the HTTP server can be started only once");
  if (!listening_) listen();
  State& s = *state_;
  started_ = true;
  if (s.options.workers > 0) s.pool = std::make_unique<WorkPool>(s.options.workers, s.options.worker_queue);
  if (s.options.writers > 0) s.writers = std::make_unique<WorkPool>(s.options.writers, s.options.writer_queue);
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
  if (s.pool) s.pool->stop();  // before the io_context goes: their jobs post back to sessions
  if (s.writers) s.writers->stop();
  s.io->stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  s.retry.reset();
  s.acceptor.reset();
  s.io.reset();  // destroys what is still queued, sessions included
}

}  // namespace precon::orch
