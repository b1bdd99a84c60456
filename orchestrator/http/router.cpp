#include "orchestrator/http/router.h"

#include "orchestrator/http/printable.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <sstream>

namespace precon::orch {

namespace fs = std::filesystem;

namespace {

std::string dump(const nlohmann::json& json) {
  // Strings from requests or files may hold invalid UTF-8; dump() would throw on them.
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.empty() || path == "/") return out;
  if (path.front() == '/') path.remove_prefix(1);
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    out.push_back(path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) return out;
    start = slash + 1;
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

template <class T>
bool parse_number(const std::string& text, T& out) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return !text.empty() && ec == std::errc() && ptr == end;
}

const char* content_type_for(const fs::path& file) {
  std::string ext = file.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::map<std::string, const char*> kTypes = {
      {".html", "text/html; charset=utf-8"},  {".htm", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"}, {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},    {".json", "application/json"},
      {".map", "application/json"},           {".svg", "image/svg+xml"},
      {".png", "image/png"},                  {".ico", "image/x-icon"},
      {".txt", "text/plain; charset=utf-8"},  {".woff2", "font/woff2"},
  };
  const auto it = kTypes.find(ext);
  return it == kTypes.end() ? "application/octet-stream" : it->second;
}

}  // namespace

Response json_response(const nlohmann::json& body, int status) {
  Response response;
  response.status = status;
  response.body = dump(body);
  return response;
}

Response error_response(int status, std::string code, std::string message) {
  return json_response({{"error", {{"code", std::move(code)}, {"message", std::move(message)}}}}, status);
}

Response error_response(const ErrorAnswer& answer) {
  Response response = error_response(answer.status, answer.code, answer.message);
  if (answer.retry_after > 0) response.headers["Retry-After"] = std::to_string(answer.retry_after);
  return response;
}

bool percent_decode(std::string_view in, std::string& out, bool plus_is_space) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return true;
}

std::map<std::string, std::string> parse_query(std::string_view query) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= query.size()) {
    const size_t amp = std::min(query.find('&', start), query.size());
    const std::string_view piece = query.substr(start, amp - start);
    start = amp + 1;
    if (piece.empty()) continue;
    const size_t eq = piece.find('=');
    std::string key, value;
    if (!percent_decode(piece.substr(0, eq), key, true) ||
        (eq != std::string_view::npos && !percent_decode(piece.substr(eq + 1), value, true))) {
      throw HttpError(400, "bad_query", "malformed percent-encoding in the query string: \"" + std::string(piece) + "\"");
    }
    out[std::move(key)] = std::move(value);
  }
  return out;
}

Request make_request(std::string method, std::string_view target, std::string body) {
  Request request;
  request.method = std::move(method);
  request.body = std::move(body);
  const size_t question = target.find('?');
  request.path = std::string(target.substr(0, question));
  if (question != std::string_view::npos) request.query = parse_query(target.substr(question + 1));
  return request;
}

int64_t path_int(const Request& request, const std::string& name) {
  const auto it = request.params.find(name);
  if (it == request.params.end()) throw std::logic_error("the route has no path parameter {" + name + "}");
  int64_t value = 0;
  if (!parse_number(it->second, value)) {
    throw HttpError(400, "bad_param", "path parameter '" + name + "' must be an integer, got \"" + it->second + "\"");
  }
  return value;
}

int64_t query_int(const Request& request, const std::string& name, int64_t fallback) {
  const auto it = request.query.find(name);
  if (it == request.query.end()) return fallback;
  int64_t value = 0;
  if (!parse_number(it->second, value)) {
    throw HttpError(400, "bad_param", "query parameter '" + name + "' must be an integer, got \"" + it->second + "\"");
  }
  return value;
}

double query_double(const Request& request, const std::string& name, double fallback) {
  const auto it = request.query.find(name);
  if (it == request.query.end()) return fallback;
  double value = 0;
  if (!parse_number(it->second, value) || !std::isfinite(value)) {
    throw HttpError(400, "bad_param", "query parameter '" + name + "' must be a finite number, got \"" + it->second + "\"");
  }
  return value;
}

std::string query_string(const Request& request, const std::string& name, const std::string& fallback) {
  const auto it = request.query.find(name);
  return it == request.query.end() ? fallback : it->second;
}

size_t json_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::json json_body(const Request& request) {
  if (request.body.empty()) throw HttpError(400, "bad_json", "the request body is empty; expected a JSON document");
  // Printing or copying a value recurses once per level: a body of a few MB of '[' would
  // exhaust the stack of whatever handles it.
  if (json_depth(request.body) > kMaxJsonDepth) {
    throw HttpError(400, "bad_json", "the request body nests arrays/objects deeper than " +
                                         std::to_string(kMaxJsonDepth) + " levels");
  }
  try {
    return nlohmann::json::parse(request.body);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number past double
    throw HttpError(400, "bad_json", std::string("the request body is not valid JSON: ") + e.what());
  }
}

std::string bearer_token(const Request& request) {
  const auto it = request.headers.find("authorization");
  if (it == request.headers.end()) return "";
  const std::string& value = it->second;
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size()) return "";
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(value[i])) != kScheme[i]) return "";
  }
  const size_t start = value.find_first_not_of(' ', kScheme.size());
  if (start == std::string::npos) return "";
  return value.substr(start, value.find_last_not_of(' ') + 1 - start);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() != b.size() ? 1u : 0u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

Response static_file(const fs::path& directory, const std::string& relative_path) {
  const auto not_found = [&] { return error_response(404, "not_found", "no such file: /" + relative_path); };
  if (relative_path.find('\0') != std::string::npos || (!relative_path.empty() && relative_path.front() == '/')) {
    return error_response(403, "forbidden", "path outside the static directory");
  }
  std::error_code ec;
  const fs::path root = fs::canonical(directory, ec);
  if (ec) return not_found();
  fs::path file = root;
  const std::string rooted = "/" + relative_path;  // outlives the views split_path returns
  for (std::string_view part : split_path(rooted)) {
    if (part == "..") return error_response(403, "forbidden", "path outside the static directory");
    if (part.empty() || part == ".") continue;
    file /= std::string(part);
  }
  if (fs::is_directory(file, ec)) file /= "index.html";
  const fs::path real = fs::canonical(file, ec);
  if (ec) return not_found();
  // A symlink inside the directory must not lead out of it.
  if (std::mismatch(root.begin(), root.end(), real.begin(), real.end()).first != root.end()) {
    return error_response(403, "forbidden", "path outside the static directory");
  }
  if (!fs::is_regular_file(real, ec)) return not_found();
  std::ifstream in(real, std::ios::binary);
  if (!in) return not_found();
  Response response;
  response.content_type = content_type_for(real);
  response.body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("reading " + real.string() + " failed");
  response.headers["Cache-Control"] = "no-cache";
  return response;
}

Router::Router(RouterOptions options) : options_(std::move(options)) {
  if (!options_.log) options_.log = [](const std::string& message) { std::cerr << "precon: http: " << printable(message) << "\n"; };
}

void Router::add(Route route) {
  const auto fail = [&](const std::string& why) {
    return std::invalid_argument("route " + route.method + " \"" + route.pattern + "\": " + why);
  };
  if (route.method.empty()) throw fail("no method");
  if (!route.handler) throw fail("no handler");
  if (route.pattern.empty() || route.pattern.front() != '/') throw fail("the pattern must start with '/'");
  Entry entry;
  const std::vector<std::string_view> parts = split_path(route.pattern);
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string_view part = parts[i];
    if (part.empty()) throw fail("empty segment");
    if (part.front() == '{') {
      if (part.size() < 3 || part.back() != '}') throw fail("a parameter segment is \"{name}\" or \"{name*}\"");
      const bool rest = part[part.size() - 2] == '*';
      std::string name(part.substr(1, part.size() - (rest ? 3 : 2)));
      if (name.empty() || name.find_first_of("{}*") != std::string::npos) throw fail("bad parameter name");
      if (rest && i + 1 != parts.size()) throw fail("\"{name*}\" must be the last segment");
      entry.segments.push_back({rest ? Segment::kRest : Segment::kParam, std::move(name)});
    } else {
      if (part.find_first_of("{}") != std::string_view::npos) throw fail("braces inside a literal segment");
      entry.segments.push_back({Segment::kLiteral, std::string(part)});
    }
  }
  for (const Entry& other : entries_) {
    if (other.route.method == route.method && other.route.pattern == route.pattern) throw fail("added twice");
  }
  if (route.name.empty()) route.name = route.pattern;
  entry.route = std::move(route);
  entries_.push_back(std::move(entry));
}

void Router::add_static(const std::string& prefix, const fs::path& directory, std::string name) {
  std::string base = prefix;
  while (!base.empty() && base.back() == '/') base.pop_back();
  add({"GET", base + "/{path*}",
       [directory](Request& request) { return static_file(directory, request.params.at("path")); }, false,
       std::move(name), {}});
}

bool Router::decode_segments(const std::string& path, std::vector<std::string>& out) {
  out.clear();
  for (std::string_view raw : split_path(path)) {
    if (!percent_decode(raw, out.emplace_back(), false)) return false;
  }
  return true;
}

// score: the kinds of the matched segments, compared lexicographically: literal (2) > {param}
// (1) > {rest*} (0), so the most specific route wins.
bool Router::match_entry(const Entry& entry, const std::vector<std::string>& decoded, std::vector<int>& score,
                         std::map<std::string, std::string>& params) {
  score.clear();
  params.clear();
  size_t i = 0;
  for (const Segment& segment : entry.segments) {
    if (segment.kind == Segment::kRest) {
      std::string rest;
      for (size_t j = i; j < decoded.size(); ++j) rest += (j > i ? "/" : "") + decoded[j];
      params[segment.text] = std::move(rest);
      score.push_back(0);
      return true;
    }
    if (i >= decoded.size()) return false;
    if (segment.kind == Segment::kLiteral) {
      if (segment.text != decoded[i]) return false;
      score.push_back(2);
    } else {
      if (decoded[i].empty()) return false;
      params[segment.text] = decoded[i];
      score.push_back(1);
    }
    ++i;
  }
  return i == decoded.size();
}

const Route* Router::match(const std::string& method, const std::string& path,
                           std::map<std::string, std::string>* params) const {
  std::vector<std::string> decoded;
  if (!decode_segments(path, decoded)) return nullptr;
  const Entry* best = nullptr;
  std::vector<int> best_score, score;
  std::map<std::string, std::string> best_params, found;
  for (const Entry& entry : entries_) {
    if (entry.route.method != method || !match_entry(entry, decoded, score, found)) continue;
    if (!best || score > best_score) {
      best = &entry;
      best_score = score;
      best_params = found;
    }
  }
  if (best && params) *params = std::move(best_params);
  return best ? &best->route : nullptr;
}

std::vector<const Route*> Router::routes() const {
  std::vector<const Route*> out;
  for (const Entry& entry : entries_) out.push_back(&entry.route);
  return out;
}

bool Router::holds_token(const Request& request) const {
  const std::string sent = bearer_token(request);
  if (sent.empty()) return false;
  const bool admin = !options_.admin_token.empty() && constant_time_equal(sent, options_.admin_token);
  const bool reader = !options_.read_token.empty() && constant_time_equal(sent, options_.read_token);
  return admin || reader;
}

bool Router::authorized(const Entry& entry, const Request& request) const {
  if (entry.route.authorize) return entry.route.authorize(request);
  if (entry.route.needs_token) {
    return !options_.admin_token.empty() && constant_time_equal(bearer_token(request), options_.admin_token);
  }
  if (entry.route.needs_read_token && !options_.public_reads) return request.token_holder;
  return true;
}

std::optional<Response> Router::resolve(Request& request, const Entry*& found_entry) const {
  found_entry = nullptr;
  request.route.clear();
  request.params.clear();
  request.token_holder = false;
  std::vector<std::string> decoded;
  if (!decode_segments(request.path, decoded)) {
    return error_response(400, "bad_path", "malformed percent-encoding in the path \"" + request.path + "\"");
  }
  // HEAD is GET without the body (the server drops it).
  const std::string& method = request.method == "HEAD" ? std::string("GET") : request.method;
  // The best route under the request's method, and the best under any other method: the latter
  // decides between 405 and 404, except that a catch-all ({rest*}) route for GET must not turn
  // every unknown POST into a 405.
  const Entry* entry = nullptr;
  std::vector<int> entry_score, other_score, score;
  std::map<std::string, std::string> params, found;
  std::set<std::string> allowed;
  bool other_is_rest = false;
  for (const Entry& e : entries_) {
    if (!match_entry(e, decoded, score, found)) continue;
    if (e.route.method == method) {
      if (!entry || score > entry_score) {
        entry = &e;
        entry_score = score;
        params = found;
      }
    } else if (allowed.empty() || score > other_score) {
      allowed = {e.route.method};
      other_score = score;
      other_is_rest = !e.segments.empty() && e.segments.back().kind == Segment::kRest;
    } else if (score == other_score) {
      allowed.insert(e.route.method);
    }
  }
  const bool other_wins = !allowed.empty() && !other_is_rest && (!entry || other_score > entry_score);
  if (!entry && !other_wins) return error_response(404, "not_found", "no route for " + request.method + " " + request.path);
  if (other_wins) {
    if (allowed.count("GET")) allowed.insert("HEAD");
    std::string allow;
    for (const std::string& m : allowed) allow += (allow.empty() ? "" : ", ") + m;
    Response response = error_response(405, "method_not_allowed",
                                       request.method + " is not allowed on " + request.path + "; allowed: " + allow);
    response.headers["Allow"] = allow;
    return response;
  }
  request.route = entry->route.name;
  request.params = std::move(params);
  request.token_holder = holds_token(request);
  found_entry = entry;
  return std::nullopt;
}

Response Router::unauthorized(const Route& route, const Request& request) {
  const bool sent = request.headers.count("authorization") != 0;
  std::string message;
  if (route.authorize) message = sent ? "wrong token for this route" : "this route needs a token and none was sent";
  else if (!route.needs_token)
    message = sent ? "the token sent is neither this controller's read token nor its admin token"
                   : "reads on this controller need a token: send \"Authorization: Bearer <token>\" with its read "
                     "token or its admin token (or start it with --public-reads)";
  else if (!sent)
    message = "this route changes state: send \"Authorization: Bearer <token>\" with the controller's admin token";
  else if (bearer_token(request).empty())
    message = "the Authorization header is not \"Bearer <token>\"; this route needs the controller's admin token";
  else
    message = "the token sent is not this controller's admin token (a trial's token or one of another controller?)";
  Response response = error_response(401, "unauthorized", message);
  response.headers["WWW-Authenticate"] = "Bearer";
  return response;
}

std::optional<Response> Router::refuse_before_body(Request& request) const {
  try {
    const Entry* entry = nullptr;
    if (std::optional<Response> refused = resolve(request, entry)) return refused;
    if (!authorized(*entry, request)) return unauthorized(entry->route, request);
    return std::nullopt;
  } catch (...) {
    return error_response(error_answer(std::current_exception()));
  }
}

Response Router::dispatch(Request& request) const {
  const Entry* entry = nullptr;
  if (std::optional<Response> refused = resolve(request, entry)) return std::move(*refused);
  const Route* route = &entry->route;
  try {
    if (!authorized(*entry, request)) return unauthorized(*route, request);
    return route->handler(request);
  } catch (...) {
    const ErrorAnswer answer = error_answer(std::current_exception());
    if (answer.status >= 500 && answer.retry_after == 0) {
      try {
        options_.log("internal error in " + request.method + " " + request.path + " (route " + route->name + ")" +
                     (answer.cause.empty() ? "" : ": " + answer.cause));
      } catch (...) {  // a failing logger must not turn an answer into an exception
      }
    }
    return error_response(answer);
  }
}

}  // namespace precon::orch
