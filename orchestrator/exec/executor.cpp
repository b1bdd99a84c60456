#include "orchestrator/exec/executor.h"

#include <sys/wait.h>

#include <cstring>

#include "worker/train/exit_codes.h"

namespace precon::orch {

Executor::~Executor() = default;

std::vector<Executor::BatchResult> Executor::launch_batch(const std::vector<LaunchSpec>& specs, int) {
  std::vector<BatchResult> out(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      out[i].handle = launch(specs[i]);
    } catch (const std::exception& e) {
      out[i].error = e.what();
    }
  }
  return out;
}

const char* exit_kind_name(ExitKind k) {
  switch (k) {
    case ExitKind::succeeded: return "succeeded";
    case ExitKind::failed: return "failed";
    case ExitKind::usage: return "usage";
    case ExitKind::requeue: return "requeue";
    case ExitKind::killed: return "killed";
    case ExitKind::lost: return "lost";
  }
  return "unknown";
}

ExitStatus lost(std::string detail) {
  ExitStatus s;
  s.kind = ExitKind::lost;
  s.detail = std::move(detail);
  return s;
}

ExitStatus classify_exit(int wait_status) {
  ExitStatus s;
  if (WIFSIGNALED(wait_status)) {
    s.kind = ExitKind::killed;
    s.signal = WTERMSIG(wait_status);
    const char* abbrev = sigabbrev_np(s.signal);
    s.detail = abbrev ? std::string("killed by SIG") + abbrev : "killed by signal " + std::to_string(s.signal);
    return s;
  }
  if (!WIFEXITED(wait_status)) {
    s.kind = ExitKind::lost;
    s.detail = "unexpected wait status " + std::to_string(wait_status);
    return s;
  }
  s.code = WEXITSTATUS(wait_status);
  switch (s.code) {
    case worker::kExitOk:
      s.kind = ExitKind::succeeded;
      s.detail = "exit code 0";
      break;
    case worker::kExitUsage:
      s.kind = ExitKind::usage;
      s.detail = "usage or configuration error (exit 2)";
      break;
    case worker::kExitRequeue:
      s.kind = ExitKind::requeue;
      s.detail = "requeue requested (exit 75)";
      break;
    default:
      s.kind = ExitKind::failed;
      s.detail = "exit code " + std::to_string(s.code);
      break;
  }
  return s;
}

}  // namespace precon::orch
