// GCC 12 in C++20 mode needs <utility> ahead of Boost.Asio's headers.
#include <utility>

#include "worker/report/reporter.h"

#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>
#include <random>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace precon::worker {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

// How often a blocked request looks up from the socket to see whether the destructor wants it
// to give up: the bound on how much the destructor overshoots close_flush.
constexpr auto kAbortPoll = std::chrono::milliseconds(25);
// An answer is a few hundred bytes; anything far larger is not our controller.
constexpr uint64_t kAnswerLimit = 1 << 20;

std::string make_body(const std::string& trial, const std::vector<MetricRecord>& batch) {
  nlohmann::json records = nlohmann::json::array();
  for (const MetricRecord& r : batch) {
    nlohmann::json values = nlohmann::json::object();
    for (const auto& [name, value] : r.values) values[name] = value;  // dump() writes NaN/Inf as null
    records.push_back({{"step", r.step}, {"time", r.time}, {"values", std::move(values)}});
  }
  return nlohmann::json{{"trial", trial}, {"records", std::move(records)}}.dump();
}

// The controller's error text ({"error": {"message": ...}}), else the start of the body.
std::string answer_text(const std::string& answer) {
  const auto json = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("error") && json["error"].is_object()) {
    const auto& message = json["error"].value("message", nlohmann::json());
    if (message.is_string()) return message.get<std::string>();
  }
  return answer.substr(0, 200);
}

}  // namespace

ControllerUrl parse_controller_url(const std::string& url) {
  const auto fail = [&](const std::string& why) -> ReportError {
    return ReportError("controller URL \"" + url + "\": " + why + " (expected http://host:port/path)");
  };
  const std::string_view scheme = "http://";
  if (url.rfind("https://", 0) == 0) throw fail("https is not supported; the worker reports over plain http");
  if (url.rfind(scheme, 0) != 0) throw fail("only http:// URLs are supported");
  std::string_view rest = std::string_view(url).substr(scheme.size());
  ControllerUrl out;
  const size_t slash = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    if (rest[slash] == '#') throw fail("a fragment has no meaning here");
    out.target = std::string(rest.substr(slash));
    if (out.target[0] == '?') out.target.insert(0, "/");
  }
  if (authority.find('@') != std::string_view::npos) throw fail("credentials belong in the token, not the URL");
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) throw fail("unterminated [IPv6] address");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') throw fail("unexpected text after the [IPv6] address");
    if (!after.empty()) port = after.substr(1);
    if (after == ":") throw fail("empty port");
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) throw fail("empty port");
    }
  }
  if (out.host.empty()) throw fail("no host");
  if (!port.empty()) {
    unsigned value = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || value > 65535) throw fail("port must be a number from 1 to 65535");
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value == 0 || value > 65535) throw fail("port must be a number from 1 to 65535");
    out.port = static_cast<uint16_t>(value);
  }
  return out;
}

// One keep-alive connection, driven by the reporter's thread only.
struct Reporter::Connection {
  net::io_context io;
  tcp::resolver resolver{io};
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  bool open = false;
  std::atomic<bool>* abort = nullptr;

  void close() {
    resolver.cancel();
    if (stream) {
      beast::error_code ignored;
      stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream->close();
    }
    open = false;
    buffer.clear();
  }

  // Starts one asynchronous operation and runs the loop until it completes, the deadline passes
  // (then: timeout) or the reporter is aborted (then: operation_aborted). Either way the
  // operation has finished when this returns, so nothing refers to this frame afterwards.
  template <class Start>
  beast::error_code await(Start&& start, std::chrono::steady_clock::time_point deadline) {
    std::optional<beast::error_code> result;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io.restart();
    while (!result) {
      const bool aborted = abort->load();
      if (aborted || std::chrono::steady_clock::now() >= deadline) {
        close();
        io.restart();
        io.run();  // the cancelled operation completes; nothing else is pending
        return aborted ? beast::error_code(net::error::operation_aborted) : beast::error_code(beast::error::timeout);
      }
      io.run_for(kAbortPoll);
    }
    return *result;
  }
};

Reporter::Reporter(ReporterOptions options) : options_(std::move(options)), url_(parse_controller_url(options_.url)) {
  if (!options_.log) {
    options_.log = [](const std::string& message) { std::cerr << "precon-train: report: " << message << "\n"; };
  }
  options_.max_batch_records = std::max<size_t>(options_.max_batch_records, 1);
  thread_ = std::thread([this] { run(); });
}

Reporter::~Reporter() {
  flush(options_.close_flush);
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  abort_ = true;
  wake_.notify_all();
  thread_.join();
}

void Reporter::push(const MetricRecord& record) {
  {
    std::lock_guard lock(mutex_);
    if (disabled_) return;
    queue_.push_back(record);
  }
  wake_.notify_one();
}

bool Reporter::stop_requested() const {
  std::lock_guard lock(mutex_);
  return stop_requested_;
}

std::string Reporter::stop_reason() const {
  std::lock_guard lock(mutex_);
  return stop_reason_;
}

bool Reporter::disabled() const {
  std::lock_guard lock(mutex_);
  return disabled_;
}

bool Reporter::flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  drained_.wait_for(lock, timeout, [&] { return disabled_ || (queue_.empty() && in_flight_ == 0); });
  return !disabled_ && queue_.empty() && in_flight_ == 0;
}

void Reporter::warn(const std::string& message) {
  try {
    options_.log(message);
  } catch (...) {  // a failing logger must not take the reporting thread down
  }
}

std::optional<Reporter::Outcome> Reporter::exchange(Connection& conn, const std::string& body) {
  const auto deadline = [&] { return std::chrono::steady_clock::now() + options_.io_timeout + kAbortPoll * 4; };
  beast::error_code ec;
  if (!conn.open) {
    tcp::resolver::results_type endpoints;
    ec = conn.await(
        [&](auto handler) {
          conn.resolver.async_resolve(url_.host, std::to_string(url_.port),
                                      [&endpoints, handler](beast::error_code e, tcp::resolver::results_type r) mutable {
                                        endpoints = std::move(r);
                                        handler(e);
                                      });
        },
        deadline());
    if (ec) {
      last_failure_ = "cannot resolve " + url_.host + ": " + ec.message();
      return std::nullopt;
    }
    conn.stream.emplace(conn.io);
    conn.stream->expires_after(options_.io_timeout);
    ec = conn.await([&](auto handler) { conn.stream->async_connect(endpoints, handler); }, deadline());
    if (ec) {
      last_failure_ = "cannot connect: " + ec.message();
      conn.close();
      return std::nullopt;
    }
    conn.open = true;
  }

  http::request<http::string_body> request{http::verb::post, url_.target, 11};
  request.set(http::field::host, url_.host + ":" + std::to_string(url_.port));
  request.set(http::field::user_agent, "precon-train");
  request.set(http::field::authorization, "Bearer " + options_.token);
  request.set(http::field::content_type, "application/json");
  request.keep_alive(true);
  request.body() = body;
  request.prepare_payload();

  conn.stream->expires_after(options_.io_timeout);
  ec = conn.await([&](auto handler) { http::async_write(*conn.stream, request, handler); }, deadline());
  if (ec) {
    last_failure_ = "sending the report failed: " + ec.message();
    conn.close();
    return std::nullopt;
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(kAnswerLimit);
  conn.stream->expires_after(options_.io_timeout);
  ec = conn.await([&](auto handler) { http::async_read(*conn.stream, conn.buffer, parser, handler); }, deadline());
  if (ec) {
    last_failure_ = "no answer: " + ec.message();
    conn.close();
    return std::nullopt;
  }
  const auto& response = parser.get();
  if (!response.keep_alive()) conn.close();
  return classify(response.result_int(), response.body());
}

Reporter::Outcome Reporter::send(Connection& conn, const std::string& body) {
  // A kept-alive connection may have been closed by the controller while idle; that is not a
  // failure of the controller, so one fresh connection is tried before backing off.
  const bool reused = conn.open;
  std::optional<Outcome> outcome = exchange(conn, body);
  if (!outcome && reused && !abort_) outcome = exchange(conn, body);
  return outcome.value_or(Outcome::kRetry);
}

Reporter::Outcome Reporter::classify(unsigned status, const std::string& answer) {
  if (status >= 200 && status < 300) {
    const auto json = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
    if (json.is_object() && json.value("stop", nlohmann::json(false)) == true) {
      const auto reason = json.value("reason", nlohmann::json(""));
      std::lock_guard lock(mutex_);
      if (!stop_requested_) stop_reason_ = reason.is_string() ? reason.get<std::string>() : reason.dump();
      stop_requested_ = true;
    }
    return Outcome::kDelivered;
  }
  last_failure_ = "HTTP " + std::to_string(status) + ": " + answer_text(answer);
  if (status == 401 || status == 403) return Outcome::kDisable;
  if (status == 413) return Outcome::kTooLarge;
  if (status == 408 || status == 429) return Outcome::kRetry;
  if (status >= 400 && status < 500) return Outcome::kDrop;
  return Outcome::kRetry;
}

void Reporter::run() {
  Connection conn;
  conn.abort = &abort_;
  std::minstd_rand rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.8, 1.2);  // spreads many workers' retries
  auto backoff = options_.backoff_initial;
  size_t batch_limit = options_.max_batch_records;
  bool failing = false;
  std::vector<MetricRecord> batch;
  std::string body;

  // Under mutex_; the warning is logged after unlocking, so a logger may call back in.
  std::string backlog_warning;
  const auto check_backlog = [&] {
    const size_t held = queue_.size() + in_flight_;
    if (!warned_queue_ && held > options_.queue_warn_records) {
      warned_queue_ = true;
      backlog_warning = std::to_string(held) + " records waiting for the controller at " + options_.url +
                        "; all are kept in memory and will be sent when it answers (metrics.jsonl has them too)";
    }
  };
  const auto log_backlog = [&] {
    if (!backlog_warning.empty()) warn(std::exchange(backlog_warning, {}));
  };

  for (;;) {
    if (batch.empty()) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (closing_) return;
      check_backlog();
      const size_t n = std::min(queue_.size(), batch_limit);
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + n));
      queue_.erase(queue_.begin(), queue_.begin() + n);
      in_flight_ = n;
      body = make_body(options_.trial, batch);
    }
    log_backlog();

    Outcome outcome = send(conn, body);
    if (outcome == Outcome::kTooLarge && batch.size() == 1) outcome = Outcome::kDrop;
    switch (outcome) {
      case Outcome::kDelivered:
        if (failing) warn("controller at " + options_.url + " answers again; catching up");
        failing = false;
        backoff = options_.backoff_initial;
        break;
      case Outcome::kRetry: {
        if (!failing) {
          warn("controller at " + options_.url + ": " + last_failure_ +
               "; retrying with backoff, records are kept and training continues");
        }
        failing = true;
        {
          std::unique_lock lock(mutex_);
          const auto delay = std::chrono::duration_cast<std::chrono::milliseconds>(backoff * jitter(rng));
          if (wake_.wait_for(lock, delay, [&] { return closing_; })) return;
          check_backlog();
        }
        log_backlog();
        backoff = std::min(backoff * 2, options_.backoff_max);
        continue;  // the same batch again: it is idempotent
      }
      case Outcome::kTooLarge: {
        // Give the second half back to the queue, in order, and resend a smaller batch now.
        const size_t keep = batch.size() / 2;
        batch_limit = keep;
        std::lock_guard lock(mutex_);
        queue_.insert(queue_.begin(), std::make_move_iterator(batch.begin() + keep), std::make_move_iterator(batch.end()));
        batch.resize(keep);
        in_flight_ = keep;
        body = make_body(options_.trial, batch);
        continue;
      }
      case Outcome::kDrop:
        warn("controller at " + options_.url + " refused " + std::to_string(batch.size()) + " records (steps " +
             std::to_string(batch.front().step) + ".." + std::to_string(batch.back().step) + ") with " + last_failure_ +
             "; they will not be resent (metrics.jsonl has them)");
        break;
      case Outcome::kDisable: {
        warn("controller at " + options_.url + " rejected this trial's token (" + last_failure_ +
             "); no more reports will be sent, metrics.jsonl stays complete. Check the token given to precon-train.");
        std::lock_guard lock(mutex_);
        disabled_ = true;
        queue_.clear();
        in_flight_ = 0;
        drained_.notify_all();
        return;
      }
    }
    batch.clear();
    std::lock_guard lock(mutex_);
    in_flight_ = 0;
    if (queue_.empty()) drained_.notify_all();
  }
}

}  // namespace precon::worker
