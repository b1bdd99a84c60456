#include "orchestrator/exec/executor.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <regex>
#include <vector>

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

namespace {

// The lines of the trainer's stderr log from byte `from` on, within its last 64 KiB: the error
// lines are among the last words, and a long log is read from its tail only.
std::vector<std::string> last_log_lines(const std::filesystem::path& run_dir, uintmax_t from) {
  constexpr uintmax_t kTail = 64 * 1024;
  std::vector<std::string> lines;
  std::ifstream in(trainer_stderr_path(run_dir), std::ios::binary | std::ios::ate);
  if (!in) return lines;
  const uintmax_t size = static_cast<uintmax_t>(in.tellg());
  const uintmax_t start = std::max(from, size > kTail ? size - kTail : uintmax_t{0});
  if (start >= size) return lines;
  in.seekg(static_cast<std::streamoff>(start));
  std::string line;
  for (bool first = true; std::getline(in, line); first = false) {
    if (first && start > from) continue;  // cut in the middle by the tail window
    lines.push_back(std::move(line));
  }
  return lines;
}

// "SIGKILL (signal 9)" for a signal number.
std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? "SIG" + std::string(abbrev) + " (signal " + std::to_string(sig) + ")" : "signal " + std::to_string(sig);
}

// srun names the signal by its description ("Killed", "Segmentation fault"): its number, or 0.
int signal_described(const std::string& text) {
  for (int sig = 1; sig < NSIG; ++sig)
    if (const char* d = sigdescr_np(sig); d != nullptr && text == d) return sig;
  return 0;
}

}  // namespace

std::string trainer_error_message(const std::filesystem::path& run_dir, uintmax_t from) {
  constexpr size_t kMaxMessage = 1000;
  std::string message;
  // A line may carry a launcher's prefix (srun --label's "0: "): the marker is searched anywhere.
  for (const std::string& line : last_log_lines(run_dir, from)) {
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

std::string program_last_words(const std::filesystem::path& run_dir, uintmax_t from) {
  constexpr size_t kMaxWords = 300;
  std::string words;
  for (std::string line : last_log_lines(run_dir, from)) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    line.erase(0, start);
    // Launchers' reports of the ranks' ends say less than the program's own last line.
    if (line.rfind("srun: ", 0) == 0 || line.rfind("slurmstepd: ", 0) == 0 || line.rfind("mpirun ", 0) == 0 ||
        line.rfind("prterun ", 0) == 0 || line.find_first_not_of("-=*") == std::string::npos)
      continue;
    words = std::move(line);
  }
  if (words.size() > kMaxWords) words = words.substr(0, kMaxWords) + "...";
  return words;
}

std::string launcher_rank_deaths(const std::filesystem::path& run_dir, uintmax_t from) {
  // mpirun (OpenMPI 4; prterun in 5): "mpirun noticed that process rank 1 with PID 4242 on node
  // n1 exited on signal 9 (Killed)."; srun: "srun: error: n1: task 1: Killed", "tasks 0-3: ...".
  static const std::regex mpirun(R"(process rank ([0-9]+) with PID [0-9]+ on node ([^ ]+) exited on signal ([0-9]{1,3}))");
  static const std::regex srun(R"(srun: error: ([^:]+): (tasks?) ([0-9,-]+): (.+))");
  std::vector<std::string> deaths;
  const auto add = [&](const std::string& death) {
    if (std::find(deaths.begin(), deaths.end(), death) == deaths.end()) deaths.push_back(death);
  };
  for (const std::string& line : last_log_lines(run_dir, from)) {
    std::smatch m;
    if (std::regex_search(line, m, mpirun)) {
      add("rank " + m[1].str() + " (on " + m[2].str() + ") killed by " + signal_text(std::stoi(m[3].str())));
    } else if (std::regex_search(line, m, srun)) {
      std::string what = m[4].str();
      while (!what.empty() && (what.back() == '\r' || what.back() == ' ')) what.pop_back();
      if (const int sig = signal_described(what); sig != 0)
        add(std::string(m[2] == "tasks" ? "ranks " : "rank ") + m[3].str() + " (on " + m[1].str() + ") killed by " + signal_text(sig));
    }
  }
  // A launcher that lost every rank says so for each: a handful is what a person reads.
  constexpr size_t kMaxDeaths = 4;
  std::string out;
  for (size_t i = 0; i < deaths.size() && i < kMaxDeaths; ++i) {
    if (i) out += "; ";
    out += deaths[i];
  }
  if (deaths.size() > kMaxDeaths) out += "; and " + std::to_string(deaths.size() - kMaxDeaths) + " more";
  return out;
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
