// Routing for the controller's HTTP API as a pure function of the request: no sockets here, so
// every rule (404/405/401, the one error shape, path parameters) is testable directly.
// Thread-safety: build the Router (add, add_static) before the server starts; afterwards
// dispatch/match/routes are const and may be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/http/errors.h"

namespace precon::orch {

struct Request {
  std::string method;                          // "GET", "POST", ... as sent
  std::string path;                            // as sent (still percent-encoded), without the query
  std::map<std::string, std::string> query;    // decoded; a repeated key keeps its last value
  std::map<std::string, std::string> headers;  // lower-cased names; repeated fields joined with ", "
  std::string body;
  std::map<std::string, std::string> params;   // decoded path parameters, filled by the router
  std::string remote;                          // peer "address:port" ("" outside the server)
  std::string route;  // matched Route::name, filled by the router ("" when no route matched)
  bool token_holder = false;  // sent the admin or the read token (filled by the router)
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;  // extra headers (e.g. "Allow", "Cache-Control")
};

Response json_response(const nlohmann::json& body, int status = 200);
// The one error shape: {"error": {"code": "...", "message": "..."}}.
Response error_response(int status, std::string code, std::string message);
// The answer for an exception, by the one mapping (errors.h), with its Retry-After if any.
Response error_response(const ErrorAnswer& answer);

using Handler = std::function<Response(Request&)>;

struct Route {
  std::string method;   // "GET", "POST", ...
  // Segments are literals, "{name}" (one segment, decoded into params[name]) or, last only,
  // "{name*}" (the decoded rest of the path, possibly empty or holding '/').
  std::string pattern;  // e.g. "/api/v1/trials/{id}/metrics"
  Handler handler;
  bool needs_token = false;  // changes state: requires "Authorization: Bearer <admin token>"
  std::string name;          // label for metrics, e.g. "trial_metrics"
  // Optional own check that replaces the admin-token check (e.g. the worker report route and its
  // per-trial token); false answers 401. Runs twice: on the header alone (body "") before the
  // body is read, so it must not refuse for want of a body, and again with the body.
  std::function<bool(const Request&)> authorize;
  // Reads stored data: needs the read or the admin token unless RouterOptions::public_reads.
  bool needs_read_token = false;
  // Slow on a big experiment: the server answers it on its worker pool, whose queue is bounded
  // (full: 503 busy), never on an io thread (ServerOptions::workers).
  bool offload = false;
  // Writes the store (a worker's report): answered on the server's writer pool, bounded the same
  // way (ServerOptions::writers), never on an io thread, which a database locked by another
  // process would otherwise hold.
  bool writes = false;
  // Answered even when the server is at its connection caps, from the connections it keeps in
  // reserve for that (ServerOptions::reserved_connections): /healthz and the workers' reports.
  bool reserved = false;
};

struct RouterOptions {
  std::string admin_token;  // "" refuses every needs_token route (401)
  std::function<void(const std::string&)> log;  // 500s are logged here; default: stderr
  std::string read_token = "";  // also accepted by needs_read_token routes; "" = the admin token only
  bool public_reads = true; // needs_read_token routes answer anyone (no token needed)
};

class Router {
 public:
  explicit Router(RouterOptions options = {});

  // Throws std::invalid_argument for a malformed pattern, an empty method or handler, or a
  // method+pattern already added.
  void add(Route route);
  // GET prefix/{path*} served from directory by static_file; prefix "/" also answers "/" with
  // index.html. Literal and parameter routes win over it.
  void add_static(const std::string& prefix, const std::filesystem::path& directory, std::string name = "static");

  // Never throws. 404 not_found (no route for the path), 405 method_not_allowed with "Allow",
  // 401 unauthorized, 400 bad_path (bad percent-encoding); a handler's exception answers as
  // error_answer maps it (errors.h), a 5xx logged. HEAD is routed as GET (the server sends the
  // answer without its body).
  Response dispatch(Request& request) const;
  // What dispatch would answer without running a handler, judged on the request's header alone
  // (its body not read yet): 400/404/405/401 as above; nullopt when the handler would run.
  std::optional<Response> refuse_before_body(Request& request) const;

  // The route for method and path (encoded, without the query) and its decoded parameters;
  // nullptr when none. Most specific wins: literal over {param} over {rest*}, segment by segment.
  const Route* match(const std::string& method, const std::string& path,
                     std::map<std::string, std::string>* params = nullptr) const;
  std::vector<const Route*> routes() const;

 private:
  struct Segment {
    enum Kind { kLiteral, kParam, kRest } kind;
    std::string text;  // literal text or parameter name
  };
  struct Entry {
    Route route;
    std::vector<Segment> segments;
  };
  static bool decode_segments(const std::string& path, std::vector<std::string>& out);
  static bool match_entry(const Entry& entry, const std::vector<std::string>& decoded, std::vector<int>& score,
                          std::map<std::string, std::string>& params);
  bool holds_token(const Request& request) const;  // the admin or the read token
  bool authorized(const Entry& entry, const Request& request) const;
  // The refusal for a request no handler will see, or nullopt and its entry (params filled).
  std::optional<Response> resolve(Request& request, const Entry*& entry) const;
  static Response unauthorized(const Route& route, const Request& request);

  RouterOptions options_;
  std::vector<Entry> entries_;
};

// Builds a Request from a request target ("/a/b?x=1&y=%20"); throws HttpError 400 bad_query
// for malformed percent-encoding in the query.
Request make_request(std::string method, std::string_view target, std::string body = "");

// Percent-decoding; false for a '%' not followed by two hex digits. '+' becomes a space only
// when plus_is_space (query strings).
bool percent_decode(std::string_view in, std::string& out, bool plus_is_space);
std::map<std::string, std::string> parse_query(std::string_view query);  // throws HttpError 400

// Path parameter as an integer: HttpError 400 bad_param when it is not a decimal int64.
int64_t path_int(const Request& request, const std::string& name);
// Query parameter helpers: fallback when absent; HttpError 400 bad_param when malformed.
int64_t query_int(const Request& request, const std::string& name, int64_t fallback);
double query_double(const Request& request, const std::string& name, double fallback);
std::string query_string(const Request& request, const std::string& name, const std::string& fallback = "");
// The body as JSON; HttpError 400 bad_json (naming the position) when empty, malformed or nested
// deeper than kMaxJsonDepth arrays/objects.
constexpr size_t kMaxJsonDepth = 64;
nlohmann::json json_body(const Request& request);
// How deeply arrays and objects nest in JSON text (brackets inside strings do not count).
size_t json_depth(std::string_view text);

// "Authorization: Bearer <token>" -> token; "" when absent or another scheme.
std::string bearer_token(const Request& request);
// Comparison whose time does not depend on where the strings differ.
bool constant_time_equal(std::string_view a, std::string_view b);

// A file under directory: 403 forbidden for ".." segments, absolute paths or anything that
// resolves (through symlinks) outside directory; 404 not_found when absent. "" or a directory
// serves its index.html. Content type from the extension (html, js, css, json, map, svg, png, ...).
Response static_file(const std::filesystem::path& directory, const std::string& relative_path);

}  // namespace precon::orch
