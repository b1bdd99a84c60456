// Sends metric records to the controller over HTTP, in batches, from a background thread.
// Training never waits on it: push() only queues, and the thread catches up whenever the
// controller answers. metrics.jsonl stays the source of truth.
//
// Request: POST <url path>, HTTP/1.1, keep-alive, headers
//   Authorization: Bearer <token>
//   Content-Type: application/json
// body
//   {"trial": "<id>", "records": [{"step": N, "time": T, "values": {"<name>": v|null, ...}}, ...]}
// with records in push order and at most max_batch_records of them (about 100 bytes per value).
// Reports are idempotent, keyed by (trial, metric, step): the same batch can arrive twice (an
// answer lost to a timeout is resent), and the controller stores it once.
//
// Answers:
//   2xx            delivered. A JSON object body may carry {"ok": true, "stop": bool,
//                  "reason": "..."}; "stop": true latches stop_requested() (stop_reason()).
//   401, 403       permanent: logged once, the reporter stops sending and drops what it holds.
//   413            the batch is halved and resent; a single record that is too large is dropped.
//   408, 429       retried, like 5xx.
//   other 4xx      the batch can never succeed: logged (with the answer's text) and dropped.
//   anything else  (3xx, 5xx, refused or reset connections, timeouts) retried with capped
//                  exponential backoff, the batch and everything after it kept in memory. Nothing
//                  is dropped however long the controller is away; past queue_warn_records
//                  queued records one warning is logged.
// A failure streak is logged once when it starts and once when delivery resumes.
//
// Thread-safety: push, stop_requested, stop_reason, flush and disabled may be called from any
// thread; the log callback is called from the reporter's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "worker/common/http_client.h"
#include "worker/report/metrics.h"

namespace precon::worker {

// A reporter's settings.
struct ReporterOptions {
  std::string url;    // controller report endpoint, http://host:port/path
  std::string token;  // the trial's bearer token
  std::string trial;  // the trial's id, sent in every body
  std::function<void(const std::string&)> log;  // warnings; default: stderr
  std::chrono::milliseconds io_timeout{5000};      // each request, from resolving to the answer's end
  std::chrono::milliseconds backoff_initial{200};  // first retry delay; doubles per failure
  std::chrono::milliseconds backoff_max{5000};     // retry delay cap
  std::chrono::milliseconds close_flush{2000};     // how long the destructor waits for delivery
  size_t max_batch_records = 512;                  // records per request
  size_t queue_warn_records = 100000;              // queued records that trigger one warning
};

class Reporter {
 public:
  // Parses the URL (throws ReportError naming it) and starts the sending thread; connects lazily.
  explicit Reporter(ReporterOptions options);
  // Waits up to close_flush for delivery, then abandons any request in flight and joins the
  // thread: returns in about close_flush even when the controller never answers. (One case is
  // not bounded: a host name whose DNS lookup hangs, since getaddrinfo cannot be interrupted;
  // controller URLs on a cluster name an address or a host from /etc/hosts.)
  ~Reporter();
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  // Queues a record (copied) and returns at once. Dropped silently once disabled().
  void push(const MetricRecord& record);
  // The controller answered "stop": true (early stopping, cancel). Latched.
  bool stop_requested() const;
  std::string stop_reason() const;
  // Waits until every pushed record has been answered or `timeout` passes. True when nothing is
  // left to send (delivered, or refused for good with a logged 4xx); false on timeout or when
  // the reporter is disabled.
  bool flush(std::chrono::milliseconds timeout);
  // The controller refused the token (401/403): nothing more is sent.
  bool disabled() const;

 private:
  enum class Outcome { kDelivered, kRetry, kTooLarge, kDrop, kDisable };

  void run();
  Outcome send(HttpConnection& conn, const std::string& body);
  // One request and its answer; nullopt when the transport failed (last_failure_ says how).
  std::optional<Outcome> exchange(HttpConnection& conn, const std::string& body);
  Outcome classify(unsigned status, const std::string& answer);
  void warn(const std::string& message);

  ReporterOptions options_;
  HttpUrl url_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;      // records pushed, or closing
  std::condition_variable drained_;   // queue and in-flight batch emptied
  std::deque<MetricRecord> queue_;    // not yet taken by the thread
  size_t in_flight_ = 0;              // records taken by the thread, not yet answered
  bool closing_ = false;              // destructor: finish the current attempt and exit
  bool disabled_ = false;
  bool stop_requested_ = false;
  std::string stop_reason_;
  bool warned_queue_ = false;

  std::atomic<bool> abort_{false};  // destructor: abandon the request in flight
  std::string last_failure_;        // reporter thread only: why the last attempt failed

  std::thread thread_;  // last: started after everything above exists
};

}  // namespace precon::worker
