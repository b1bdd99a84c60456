#include "orchestrator/http/errors.h"

#include <nlohmann/json.hpp>

#include "orchestrator/store/disk_space.h"
#include "orchestrator/store/store.h"
#include "worker/common/error.h"
#include "worker/config/parse.h"

namespace precon::orch {

ErrorAnswer error_answer(std::exception_ptr error) {
  const auto client = [](int status, std::string code, std::string message) {
    return ErrorAnswer{status, std::move(code), std::move(message), ""};
  };
  const auto server = [](std::string code, const std::string& cause) {
    return ErrorAnswer{500, std::move(code), cause.empty() ? "internal error" : "internal error: " + cause, cause};
  };
  if (!error) return server("internal", "");
  try {
    std::rethrow_exception(error);
  } catch (const HttpError& e) {
    if (e.status >= 500) return ErrorAnswer{e.status, e.code, e.what(), e.what()};
    return client(e.status, e.code, e.what());
  } catch (const nlohmann::json::parse_error& e) {
    return client(400, "bad_json", std::string("the request body is not valid JSON: ") + e.what());
  } catch (const nlohmann::json::exception& e) {
    return client(400, "bad_request", e.what());
  } catch (const worker::ConfigError& e) {
    return client(400, "bad_recipe", e.what());
  } catch (const std::invalid_argument& e) {
    return client(400, "bad_request", e.what());
  } catch (const StoreBusyError& e) {
    return ErrorAnswer{503, "store_busy", e.what(), e.what(), 1};
  } catch (const DiskFullError& e) {
    return ErrorAnswer{507, "disk_full", e.what(), e.what()};
  } catch (const worker::WorkerError& e) {
    return server("worker_error", e.what());
  } catch (const std::exception& e) {
    return server("internal", e.what());
  } catch (...) {
    return server("internal", "");
  }
}

}  // namespace precon::orch
