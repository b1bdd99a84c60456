#include "worker/report/reporter.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/common/fault_hook.h"

namespace precon::worker {

namespace {

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

HttpUrl controller_url(const std::string& url) {
  try {
    return parse_http_url(url);
  } catch (const HttpClientError& e) {
    throw ReportError(std::string("controller ") + e.what());
  }
}

}  // namespace

Reporter::Reporter(ReporterOptions options) : options_(std::move(options)), url_(controller_url(options_.url)) {
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

std::optional<Reporter::Outcome> Reporter::exchange(HttpConnection& conn, const std::string& body) {
  HttpRequest request{"POST", url_.target, body, {{"Authorization", "Bearer " + options_.token}}};
  try {
    const HttpResponse response = conn.exchange(request, options_.io_timeout);
    return classify(static_cast<unsigned>(response.status), response.body);
  } catch (const HttpClientError& e) {
    last_failure_ = e.what();
    return std::nullopt;
  }
}

Reporter::Outcome Reporter::send(HttpConnection& conn, const std::string& body) {
  // A kept-alive connection may have been closed by the controller while idle; that is not a
  // failure of the controller, so one fresh connection is tried before backing off.
  const bool reused = conn.is_open();
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
  HttpConnection conn(url_, {"precon-train", kAnswerLimit, /*keep_alive=*/true, &abort_});
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

  const int64_t kill_after_step = fault_point("report").step;  // test-only (fault_hook.h)
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
    if (kill_after_step >= 0 && outcome == Outcome::kDelivered && batch.back().step >= kill_after_step) fault_kill();
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
