// One connection of the HTTP server: reads requests one after another (keep-alive), answers each
// through the router on this session's strand (or a worker pool for an offloaded or writing
// route), and closes on error, timeout, "Connection: close", eviction or stop. Internal to orchestrator/http:
// the listener (server.cpp) creates, counts, evicts and stops sessions.
// Thread-safety: the I/O runs on the session's strand; counted, reserved, uncount() and unreserve()
// under the registry's mutex; idle_since(), header_since(), may_leave_reserve(), admitted() and
// describe() from any thread; evict(), run() and stop() post to the strand.
#pragma once

// GCC 12 in C++20 mode needs <utility> ahead of Boost.Asio's headers.
#include <utility>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "orchestrator/http/router.h"
#include "orchestrator/http/server_state.h"

// Named, not in an anonymous namespace: HttpServer::State holds the sessions, and a member whose
// type has internal linkage draws -Wsubobject-linkage.
namespace precon::orch::http_session {

class Session : public std::enable_shared_from_this<Session> {
 public:
  // refusal: the connection is over a cap, in the reserve (HttpServer::State::admit): it may send one
  // request within reserve_timeout; a reserved route is answered, anything else gets the refusal.
  Session(boost::asio::ip::tcp::socket&& socket, HttpServer::State& state, std::string address, std::string remote,
          std::optional<Response> refusal);
  ~Session();

  // Within the caps (serving, per_address count it), or in the reserve over them (reserving counts
  // it). Read and written with the registry's mutex held.
  bool counted = false;
  bool reserved = false;
  const std::string& address() const { return address_; }
  // Steady-clock ns since which it waits for a request; 0 while reading or answering one.
  int64_t idle_since() const { return idle_since_.load(); }
  // Steady-clock ns since which it receives a request's header; 0 once that is complete.
  int64_t header_since() const { return header_since_.load(); }
  // Steady-clock ns when it was accepted.
  int64_t admitted() const { return admitted_; }
  // Nothing of a request past its header yet, or answered already and closing.
  bool may_leave_reserve() const;
  // With the registry's mutex held: no longer counted against the caps (the reserve).
  void uncount();
  void unreserve();
  // From admit(), its place given to a new connection (uncounted or unreserved already): a
  // connection waiting for a request or closing closes now, as does one still sending the header
  // it was chosen for (slow_header); one reading a request or being answered closes after its answer.
  void evict(bool slow_header);
  void run();
  // For HttpServer::stop()'s message about connections it cuts: "<address:port> (<phase>)".
  // Called with the registry's mutex held, which keeps the session's members alive.
  std::string describe() const;
  // From HttpServer::stop(): an idle connection closes now; a request being read or answered
  // finishes, and its answer closes the connection.
  void stop();

 private:
  enum class Phase { kIdle, kReading, kAnswering, kClosing };

  void wait_for_request();
  void read_header();
  // The request's deadline: `limit` from its first byte (the reserve's end at the latest).
  void arm_deadline(std::chrono::milliseconds limit);
  void on_header(boost::beast::error_code ec);
  const Route* matched_route() const;
  bool reserved_route() const;
  std::optional<Response> host_refusal(const boost::beast::http::request<boost::beast::http::string_body>& header) const;
  void read_body();
  void on_read_error(boost::beast::error_code ec);
  void answer_and_close(Response response, std::string route = "");
  void handle();
  const Route* offloaded_route() const;
  void offload(const Route& route);
  void finish(Request request, Response response, double seconds, std::optional<std::string> failure);
  void report(const Request& request, const Response& response, double seconds);
  void send(Response&& response, bool keep_alive, unsigned version, bool head);
  void linger();
  void drain();
  void close();

  HttpServer::State& state_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  boost::asio::steady_timer deadline_;  // the header or read timeout of the request being read
  uint64_t requests_ = 0;               // requests begun on this connection: tells a stale deadline apart
  bool timed_out_ = false;              // the deadline cut the read: answer 408
  std::chrono::steady_clock::time_point request_start_;  // its first byte
  std::chrono::milliseconds deadline_after_{0};          // from request_start_ to the deadline, for the 408
  const int64_t admitted_;
  const std::chrono::steady_clock::time_point reserve_until_;  // in the reserve: when its time is up
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  boost::beast::http::response<boost::beast::http::string_body> response_;  // alive until its write completes
  std::vector<char> drain_;
  size_t drained_ = 0;
  std::string address_;  // the peer's IP address, for the per-address cap
  std::string remote_;   // "address:port"
  std::optional<Response> refusal_;
  std::atomic<Phase> phase_{Phase::kIdle};  // read by describe() from HttpServer::stop()
  std::atomic<int64_t> idle_since_{0};      // read by admit() on the acceptor's strand
  std::atomic<int64_t> header_since_{0};    // likewise
  bool evicted_ = false;                    // its place was given to a newer connection
};

}  // namespace precon::orch::http_session
