// GCC 12 in C++20 mode needs <utility> ahead of Boost.Asio's headers.
#include <utility>

#include "orchestrator/http/request_reader.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include <boost/asio/buffer.hpp>

namespace precon::orch {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;

namespace {

std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

std::optional<Response> framing_refusal(const RequestHeader& header) {
  auto [first, last] = header.equal_range(bhttp::field::transfer_encoding);
  if (first == last) return std::nullopt;
  if (header.count(bhttp::field::content_length) > 0) {
    return error_response(400, "bad_framing", "the request has both Content-Length and Transfer-Encoding");
  }
  std::vector<std::string> codings;
  std::string sent;
  for (auto it = first; it != last; ++it) {
    sent += (sent.empty() ? "" : ", ") + std::string(sv(it->value()));
    for (auto coding : bhttp::token_list(it->value())) codings.push_back(lower(sv(coding)));
  }
  if (codings.size() == 1 && codings[0] == "chunked") return std::nullopt;
  return error_response(501, "unsupported_transfer_encoding",
                        "Transfer-Encoding \"" + sent + "\" is not supported: send the body as it is, or chunked");
}

Request to_request(const RequestHeader& header, std::string body, const std::string& remote) {
  Request request = make_request(std::string(header.method_string()), sv(header.target()), std::move(body));
  for (const auto& field : header) {
    auto [it, inserted] = request.headers.emplace(lower(sv(field.name_string())), std::string(field.value()));
    if (!inserted) it->second += ", " + std::string(field.value());
  }
  request.remote = remote;
  return request;
}

std::optional<Response> header_refusal(const RequestParser& parser, const Router& router, const std::string& remote,
                                       std::string& route) {
  route.clear();
  const RequestHeader& header = parser.get();
  if (std::optional<Response> refused = framing_refusal(header)) return refused;
  if (parser.is_done()) return std::nullopt;  // no body to leave unread
  std::optional<Response> refused;
  Request request;
  try {
    request = to_request(header, "", remote);
    refused = router.refuse_before_body(request);
  } catch (...) {
    refused = error_response(error_answer(std::current_exception()));
  }
  if (refused) route = request.route;
  return refused;
}

std::optional<Response> parse_error_answer(beast::error_code ec, size_t body_limit) {
  if (ec == bhttp::error::body_limit) {
    return error_response(413, "payload_too_large",
                          "the request body exceeds the limit of " + std::to_string(body_limit) + " bytes");
  }
  if (ec == bhttp::error::header_limit) {
    return error_response(431, "headers_too_large", "the request headers are too large");
  }
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() && ec != bhttp::error::end_of_stream &&
      ec != bhttp::error::partial_message) {
    return error_response(400, "bad_request", "malformed HTTP request: " + ec.message());
  }
  return std::nullopt;
}

Response answer_request(RequestHeader& message, const Router& router, const std::string& remote, Request& request,
                        double& seconds, std::optional<std::string>& failure) {
  seconds = 0;
  failure.reset();
  try {
    request = to_request(message, std::move(message.body()), remote);
    const auto start = std::chrono::steady_clock::now();
    Response response = router.dispatch(request);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return response;
  } catch (...) {
    const ErrorAnswer answer = error_answer(std::current_exception());
    if (answer.status >= 500) failure = answer.cause;
    return error_response(answer);
  }
}

namespace {

// Feeds the parser from bytes[pos...] until `done` holds, as Beast's read algorithms do over a
// socket: more bytes after "need more", and the end of the bytes as the peer closing its side.
template <class Done>
beast::error_code feed(RequestParser& parser, std::string_view bytes, size_t& pos, Done done) {
  while (!done()) {
    beast::error_code ec;
    const std::string_view rest = bytes.substr(pos);
    size_t used = 0;
    if (!rest.empty()) {
      used = parser.put(net::buffer(rest.data(), rest.size()), ec);
      pos += used;
      if (!ec) continue;
      if (ec != bhttp::error::need_more) return ec;
      if (used > 0) continue;
    }
    // Nothing more will arrive: the peer's end of stream.
    ec = {};
    if (parser.got_some()) {
      parser.put_eof(ec);
    } else {
      ec = bhttp::error::end_of_stream;
    }
    if (ec) return ec;
  }
  return {};
}

}  // namespace

std::vector<ReadOutcome> read_requests(std::string_view bytes, const Router& router, size_t body_limit) {
  std::vector<ReadOutcome> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    RequestParser parser;
    parser.body_limit(body_limit);
    const auto refuse = [&](Response response, std::string route) {
      ReadOutcome& o = out.emplace_back();
      o.request.route = std::move(route);
      if (parser.is_header_done()) {
        o.request.method = std::string(parser.get().method_string());
        o.request.path = std::string(parser.get().target().substr(0, parser.get().target().find('?')));
      }
      o.response = std::move(response);
      o.closes = true;
    };
    if (beast::error_code ec = feed(parser, bytes, pos, [&] { return parser.is_header_done(); })) {
      if (std::optional<Response> answer = parse_error_answer(ec, body_limit)) refuse(std::move(*answer), "");
      return out;
    }
    std::string route;
    if (std::optional<Response> refused = header_refusal(parser, router, "", route)) {
      refuse(std::move(*refused), route);
      return out;
    }
    parser.eager(true);
    if (beast::error_code ec = feed(parser, bytes, pos, [&] { return parser.is_done(); })) {
      if (std::optional<Response> answer = parse_error_answer(ec, body_limit)) refuse(std::move(*answer), "");
      return out;
    }
    RequestHeader& message = parser.get();
    const bool keep_alive = message.keep_alive();
    ReadOutcome& o = out.emplace_back();
    double seconds = 0;
    std::optional<std::string> failure;
    o.response = answer_request(message, router, "", o.request, seconds, failure);
    o.closes = !keep_alive;
    if (o.closes) return out;
  }
  return out;
}

}  // namespace precon::orch
