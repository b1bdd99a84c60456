// The one mapping from an exception to the API's error answer: which HTTP status and which
// stable code each error type gets. The router's dispatch and the server (for what fails before
// a route runs) both answer through it, so a type is mapped in one place only.
// Thread-safety: pure functions.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace precon::orch {

// What handlers throw to answer with a chosen status.
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string code, const std::string& message)
      : std::runtime_error(message), status(status), code(std::move(code)) {}
  int status;        // HTTP status, 4xx or 5xx
  std::string code;  // stable machine-readable code, e.g. "not_found", "bad_param"
};

struct ErrorAnswer {
  int status = 500;
  std::string code = "internal";  // the "code" of {"error": {"code", "message"}}
  std::string message;            // the "message": what the client is told
  std::string cause;              // for the log: what() of the exception, "" for a non-standard one
  int retry_after = 0;            // seconds for "Retry-After" (0: none); such a 5xx is not logged
};

// error: std::current_exception() inside a catch. By type, first match wins:
//   HttpError                        its status and code
//   nlohmann::json::parse_error      400 bad_json
//   other nlohmann::json errors      400 bad_request
//   worker::ConfigError              400 bad_recipe (a recipe or override the worker's schema refuses)
//   std::invalid_argument            400 bad_request
//   StoreBusyError                   503 store_busy with Retry-After: 1 (another process has locked the database)
//   DiskFullError                    507 disk_full (the disk under the database; the message says what to do)
//   other worker::WorkerError        500 worker_error (files, checkpoints, data the controller read)
//   anything else                    500 internal
// A 5xx is the controller's fault: the caller logs it (cause), the client sees "internal error: ...";
// one with retry_after is a passing state the client is to wait out, not logged.
ErrorAnswer error_answer(std::exception_ptr error);

}  // namespace precon::orch
