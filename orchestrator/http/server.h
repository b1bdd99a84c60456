// The controller's HTTP/1.1 server (Boost.Beast): a listener accepting connections and one
// session per connection, each on its own strand, reading requests with a body limit and
// timeouts, answering through a Router on the io thread, keeping connections alive.
// Thread-safety: start/stop/port/url from one controlling thread; on_request and log are
// called from the io threads concurrently and must be thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "orchestrator/http/host_check.h"
#include "orchestrator/http/router.h"

namespace precon::orch {

class ServerError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ServerOptions {
  std::string bind = "127.0.0.1";  // listen address; loopback unless asked otherwise
  uint16_t port = 0;               // 0: an ephemeral port, see HttpServer::port()
  int threads = 2;                 // io threads running sessions and handlers
  size_t body_limit = 8 << 20;     // bytes; larger bodies get 413 and the connection closes
  // From the first byte of a request to its last (also bounds writing the answer); a client
  // that stalls mid-request is answered 408 and dropped.
  std::chrono::milliseconds read_timeout{std::chrono::seconds(30)};
  // From the first byte of a request to the end of its header (at most read_timeout). A client
  // sends its header in one go; one still sending it after this long (a slow-loris sending a byte
  // every few seconds) is answered 408 and dropped.
  std::chrono::milliseconds header_timeout{std::chrono::seconds(5)};
  // A kept-alive connection waiting for its next request is closed after this long.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};
  // A connection that has not sent its first request yet is closed after this long (at most
  // idle_timeout): opened and left silent, it holds a slot for nothing.
  std::chrono::milliseconds first_request_timeout{std::chrono::seconds(5)};
  // stop(): how long requests already being read or answered may take before they are cut.
  std::chrono::milliseconds stop_timeout{std::chrono::seconds(5)};
  // Connections open at once, in all and from one client address. A connection beyond either cap
  // takes the place of a connection under that cap, which is closed: the one still sending its
  // request header that began it longest ago, else the one that has waited longest for its next
  // request (or its first); either at least evictable_after. So neither idle connections nor slow
  // ones, however many and from however many addresses, lock other clients out (those of the same
  // address included: the CLI and the workers' reports on loopback).
  size_t max_connections = 1024;
  size_t max_connections_per_address = 256;
  // How long a connection must have waited (or been sending its header) before it may give its
  // place: one that has just connected or been answered is about to send, most likely.
  std::chrono::milliseconds evictable_after{std::chrono::seconds(1)};
  // When no connection under a cap may give its place (every one is reading a request body or
  // being answered, or has only just connected), the new connection is still read: up to
  // reserved_connections such connections may each send one request within reserve_timeout. A
  // reserved route (Route::reserved: /healthz, the workers' reports) is answered; any other
  // request is answered 503 too_many_connections (with Retry-After); the connection closes after
  // either. A connection over the caps when the reserve is full takes the place of the reserved
  // one admitted longest ago that has not sent its whole header yet (or is closing), else it is
  // closed unanswered.
  size_t reserved_connections = 64;
  std::chrono::milliseconds reserve_timeout{std::chrono::seconds(2)};
  // Threads and waiting places of the worker pool that answers the routes marked `offload`
  // (Route::offload); a request for one while `worker_queue` wait already is answered 503 busy
  // (with Retry-After). 0 threads: those routes are answered on the io threads.
  size_t workers = 2;
  size_t worker_queue = 32;
  // Likewise for the routes marked `writes` (Route::writes), apart from the slow reads so that
  // neither waits for the other.
  size_t writers = 2;
  size_t writer_queue = 256;
  // After an offloaded answer of at least this many bytes (or one whose handler took over a
  // second) the server returns the heap's free pages to the system (malloc_trim), at most once a
  // second, so a burst of big reads does not leave the process at its peak size.
  size_t trim_after_bytes = 1 << 20;
  // Called after every answer with the request (request.route is the Route::name, "" when no
  // route matched or the server answered by itself: 400/408/413/431/501), the response and the
  // seconds spent in the router. For /metrics: count by request.route and response.status.
  // Before reading a body (and before "100 Continue") the server asks the router whether it
  // would refuse the request on its header alone (Router::refuse_before_body: no token, no
  // route); if so it answers that and closes the connection, the body unread. A request with a
  // Transfer-Encoding other than chunked answers 501 and closes. HEAD is answered like GET,
  // without the body.
  std::function<void(const Request&, const Response&, double seconds)> on_request;
  // The Host header values answered (see HostCheck); any other is answered 421 and the connection
  // closes, before the router sees the request. Unset: any Host (a server only tests reach).
  std::optional<HostCheck> host_check;
  std::function<void(const std::string&)> log;  // connection-level problems; default: stderr
};

// True when `bind` is an IP address other than a loopback one (127.0.0.0/8, ::1, or ::ffff:127.x):
// a server listening there can be reached from other machines. False for loopback and for
// text that is not an address (HttpServer::start refuses that with its own error).
bool reachable_from_other_machines(const std::string& bind);

class HttpServer {
 public:
  // The router must outlive the server and not change after start().
  HttpServer(const Router& router, ServerOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens without answering: connections wait in the backlog until start(), so a
  // caller can learn the port and finish setting up what the handlers use first. Throws
  // ServerError saying what to do when the address is malformed or taken. Once only.
  void listen();
  // listen() unless done, then accepts and spawns the io threads. Once only.
  void start();
  uint16_t port() const;    // the bound port (after listen)
  std::string url() const;  // "http://127.0.0.1:PORT" (IPv6 in brackets)
  // Stops accepting, closes idle connections, lets requests in progress finish (their answers
  // carry "Connection: close") for up to stop_timeout, then cuts the rest and joins the
  // threads. Idempotent; the server cannot be started again.
  void stop();

  struct State;  // shared with the listener and sessions (server_state.h, session.h)

 private:
  std::unique_ptr<State> state_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  bool listening_ = false;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace precon::orch
