// What the HTTP server's listener (server.cpp) and its sessions (session.cpp) share: the router and
// options, the io_context, the registry of open sessions with the counts the connection caps use,
// and the worker pools of offloaded and writing routes. Internal to orchestrator/http.
// Thread-safety: sessions, serving, reserving and per_address under `mutex`; stopping and last_trim atomic;
// the rest is set up before the io threads start (HttpServer::listen/start) and only read after.
#pragma once

// GCC 12 in C++20 mode needs <utility> ahead of Boost.Asio's headers.
#include <utility>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>

#include "orchestrator/http/router.h"
#include "orchestrator/http/server.h"
#include "orchestrator/http/work_pool.h"

namespace precon::orch {

namespace http_session {
class Session;  // session.h
}  // namespace http_session

// Declaration order matters: the io_context (and with it any session still queued in it) is
// destroyed before the session registry and its mutex, which session destructors use.
struct HttpServer::State {
  using Session = http_session::Session;
  using tcp = boost::asio::ip::tcp;

  State(const Router& router, ServerOptions options) : router(router), options(std::move(options)) {}

  void log(const std::string& message) noexcept {
    try {
      options.log(message);
    } catch (...) {  // a failing logger must not take an io thread down
    }
  }
  void do_accept();
  void on_accept(boost::beast::error_code ec, tcp::socket socket);
  void admit(tcp::socket socket);  // a session for the connection, or its refusal over a cap
  // The counted session from `address` ("" any) that may give its place to a new connection (see
  // ServerOptions::max_connections), and whether it was chosen for sending its header slowly; null
  // when none. With the mutex held.
  Session* evictable(const std::string& address, bool& slow_header);
  // The reserved session that may give its place to a new one (see
  // ServerOptions::reserved_connections); null when none. With the mutex held.
  Session* reserve_evictable();
  // After a big or slow offloaded answer: free pages back to the system, at most once a second.
  void trim_heap(size_t bytes, double seconds);

  const Router& router;
  ServerOptions options;
  std::atomic<bool> stopping{false};
  std::mutex mutex;
  std::condition_variable sessions_gone;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  size_t serving = 0;                                  // sessions within the caps
  size_t reserving = 0;                                // sessions over the caps, in the reserve
  std::unordered_map<std::string, size_t> per_address;  // serving sessions by peer address
  std::optional<boost::asio::io_context> io;
  std::optional<tcp::acceptor> acceptor;                  // on its own strand
  std::optional<boost::asio::steady_timer> retry;         // on the acceptor's strand
  std::unique_ptr<WorkPool> pool;                         // offloaded routes; null without workers
  std::unique_ptr<WorkPool> writers;                      // routes that write; null without writers
  std::atomic<int64_t> last_trim{0};                      // steady-clock ms of the last malloc_trim
  uint16_t port = 0;                                      // the bound port (HostCheck matches it)
};

}  // namespace precon::orch
