// The one HTTP/1.1 client of the project (plain http, Boost.Beast): URL parsing, and a
// connection that sends one request and reads its answer within a deadline. The worker's
// reporter keeps one connection alive and abortable; the controller's CLI and tests make one
// request per connection (http_request). Any HTTP status is an answer, never an error; what
// fails (a bad URL, no route, a refused connection, a timeout, a broken answer) throws
// HttpClientError saying at which stage.
// Thread-safety: an HttpConnection is used by one thread at a time (its abort flag may be set
// from any thread); the free functions are reentrant.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "worker/common/error.h"

namespace precon::worker {

// Parsed "http://host[:port][/path][?query]".
struct HttpUrl {
  std::string host;          // name or address; an IPv6 address without brackets
  uint16_t port = 80;        // from the URL, 80 when absent
  std::string target = "/";  // path (and query), "/" when absent
};

// Where an exchange stopped; kUrl: it never started (the URL is malformed).
enum class HttpStage { kUrl, kResolve, kConnect, kSend, kRead };

// An HTTP exchange failed before an answer was complete. what() names the stage and the
// peer in words ("no answer from 127.0.0.1:8000: timed out after 150 ms").
class HttpClientError : public WorkerError {
 public:
  HttpClientError(const std::string& message, HttpStage stage, bool timed_out = false, bool refused = false)
      : WorkerError(message), stage_(stage), timed_out_(timed_out), refused_(refused) {}
  HttpStage stage() const { return stage_; }
  bool timed_out() const { return timed_out_; }  // the deadline passed (not an abort)
  bool refused() const { return refused_; }      // nothing listens at host:port

 private:
  HttpStage stage_;
  bool timed_out_;
  bool refused_;
};

// The stage as a phrase: "resolving the host", "connecting", "sending the request",
// "reading the answer" ("parsing the URL" for kUrl).
const char* http_stage_text(HttpStage stage);

// Throws HttpClientError (kUrl) naming the URL and what is wrong with it (only http://).
HttpUrl parse_http_url(const std::string& url);

struct HttpRequest {
  std::string method = "GET";                  // any token; unknown verbs are sent as written
  std::string target = "/";                    // path and query, sent as is
  std::string body;                            // sent with Content-Type: application/json unless
  std::map<std::string, std::string> headers;  // headers name another Content-Type
};

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-cased names; repeated fields joined with ", "
  bool keep_alive = false;                     // the server keeps the connection open
};

struct HttpConnectionOptions {
  std::string user_agent = "precon";
  uint64_t body_limit = uint64_t{1} << 20;  // answers with a larger body fail (kRead)
  bool keep_alive = true;                   // ask the server to keep the connection open
  // Polled while waiting: once true, the exchange in progress gives up (HttpClientError, not
  // timed_out) within about 25 ms. Must outlive the connection.
  const std::atomic<bool>* abort = nullptr;
};

class HttpConnection {
 public:
  HttpConnection(HttpUrl url, HttpConnectionOptions options = {});
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Connects when no connection is open, sends the request, reads the answer; all before
  // `timeout` has passed. After a failure, or an answer without keep-alive, the connection is
  // closed and the next call opens a new one. A server that answers before reading the whole
  // request (e.g. 413) and closes is still heard.
  HttpResponse exchange(const HttpRequest& request, std::chrono::milliseconds timeout);
  bool is_open() const;
  void close();
  const HttpUrl& url() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// One request on a connection of its own (no keep-alive).
HttpResponse http_request(const HttpUrl& url, const HttpRequest& request, std::chrono::milliseconds timeout,
                          HttpConnectionOptions options = {});

}  // namespace precon::worker
