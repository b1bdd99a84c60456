#include "orchestrator/exec/executor.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <fstream>

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

ExitStatus lost(std::string detail) {
  ExitStatus s;
  s.kind = ExitKind::lost;
  s.detail = std::move(detail);
  return s;
}

std::filesystem::path trainer_stderr_path(const std::filesystem::path& run_dir) { return run_dir / "stderr.log"; }

std::string trainer_error_message(const std::filesystem::path& run_dir, uintmax_t from) {
  // The error line is among the trainer's last words; a long traceback-free log is read from its
  // tail only.
  constexpr uintmax_t kTail = 64 * 1024;
  constexpr size_t kMaxMessage = 1000;
  std::ifstream in(trainer_stderr_path(run_dir), std::ios::binary | std::ios::ate);
  if (!in) return "";
  const uintmax_t size = static_cast<uintmax_t>(in.tellg());
  uintmax_t start = std::max(from, size > kTail ? size - kTail : uintmax_t{0});
  if (start >= size) return "";
  in.seekg(static_cast<std::streamoff>(start));
  std::string line, message;
  // A line may carry a launcher's prefix (srun --label's "0: "): the marker is searched anywhere.
  for (bool first = true; std::getline(in, line); first = false) {
    if (first && start > from) continue;  // cut in the middle by the tail window
    for (const char* marker : {"precon-train: config error: ", "precon-train: error: "}) {
      const size_t at = line.find(marker);
      if (at == std::string::npos) continue;
      message = line.substr(at + std::char_traits<char>::length(marker));
      while (!message.empty() && (message.back() == '\r' || message.back() == ' ')) message.pop_back();
      break;
    }
  }
  if (message.size() > kMaxMessage) message = message.substr(0, kMaxMessage) + "...";
  return message;
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
      s.detail = "exit code 2: configuration error";
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
