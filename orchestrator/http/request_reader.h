// Reading one HTTP request without a socket: the checks and conversions the server's sessions
// make between Beast's parser and the Router, and read_requests(), which runs them over bytes in
// memory exactly as a session does over a connection (the fuzz target and tests use it).
// Thread-safety: pure functions (the router's own rules apply to it).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http.hpp>

#include "orchestrator/http/router.h"

namespace precon::orch {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;
using RequestHeader = RequestParser::value_type;

// Beast frames a request body by Content-Length or a final "chunked" coding, and takes any
// other Transfer-Encoding as "no body": that body would then be read as the next request. We
// decode no transfer coding but chunked: anything else answers 501 (RFC 9112 6.1), both framings
// at once 400, and either closes the connection. nullopt when the framing is fine.
std::optional<Response> framing_refusal(const RequestHeader& header);

// The request as the router sees it, from the header (and the body when read).
Request to_request(const RequestHeader& header, std::string body, const std::string& remote);

// After the header: a refusal that ends the connection with the body unread (bad framing, or
// what the router refuses on the header alone: no route, no token), else nullopt. `route` is
// the matched route's name for the report.
std::optional<Response> header_refusal(const RequestParser& parser, const Router& router, const std::string& remote,
                                       std::string& route);

// The answer to a parse error: 413 body too large, 431 header too large, 400 malformed;
// nullopt when there is nobody to answer (the peer went away mid-request).
std::optional<Response> parse_error_answer(boost::beast::error_code ec, size_t body_limit);

// What a session answers to a request read in full: the router's dispatch, a thrown error
// mapped by error_answer (a 5xx sets `failure` to its cause, for the log). Fills `request` and the seconds spent.
Response answer_request(RequestHeader& message, const Router& router, const std::string& remote, Request& request,
                        double& seconds, std::optional<std::string>& failure);

struct ReadOutcome {
  Request request;    // as the router saw it (method and path only when refused before the body)
  Response response;
  bool closes = false;  // the connection ends after this answer
};

// The answers a session gives to `bytes` arriving on one connection and then the peer closing
// its side: requests read one after another while the connection is kept alive, each through
// the same steps as a session (header limit, framing, refusal before the body, body limit,
// dispatch). Stops at the first answer that closes the connection or when the bytes end.
std::vector<ReadOutcome> read_requests(std::string_view bytes, const Router& router, size_t body_limit);

}  // namespace precon::orch
