#include "orchestrator/exec/wrapped_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "worker/common/file_io.h"

namespace precon::orch {
namespace fs = std::filesystem;

namespace {

// The wrapper ignores these so that a stop signal (or a terminal's) sent to the process group
// reaches the program but not the wrapper, which must outlive it to record its status. It
// catches them with a handler that does nothing rather than setting SIG_IGN, which would discard
// one already pending: a stop sent while the wrapper starts is passed on to the program.
constexpr int kWrapperIgnored[] = {SIGTERM, SIGINT,  SIGHUP,  SIGQUIT, SIGUSR1,
                                   SIGUSR2, SIGPIPE, SIGTTIN, SIGTTOU, SIGTSTP};
// Of those, the ones a stop or a terminal sends to the whole group: one that reached the group
// before the program existed is passed on to it.
constexpr int kForwardedStops[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Opens with O_CLOEXEC and moves the descriptor to >= 3, so that the wrapper's dup2 onto
// 0/1/2 can never clobber a descriptor it still has to copy.
// run_file: a log in the run directory, opened as worker::open_run_file does (no link, no FIFO).
int open_high(const std::string& path, int flags, mode_t mode = 0, bool run_file = false) {
  int fd = run_file ? worker::open_run_file(path, flags, mode) : ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) {
    throw ExecError("cannot open " + path + ": " + std::strerror(errno));
  }
  if (fd < 3) {
    int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int e = errno;
    ::close(fd);
    if (high < 0) throw ExecError("cannot duplicate descriptor for " + path + ": " + std::strerror(e));
    fd = high;
  }
  return fd;
}

// Everything the wrapper needs, prepared before fork: after it, only async-signal-safe calls.
struct ForkPlan {
  std::string exe;  // resolved program path
  std::vector<std::string> argv_storage, env_storage;
  std::vector<char*> argv, envp;
  std::string status_path, status_tmp;
  std::string identity_path;  // empty: none
  std::string exec_error;  // written to stderr.log when execve fails, followed by errno
  std::string workdir;     // empty: the controller's
  std::string chdir_error; // written to stderr.log when chdir fails, followed by errno
  int null_fd = -1, out_fd = -1, err_fd = -1;
  int max_fd = 1024;
};

size_t format_uint(char* buf, unsigned long v) {
  char rev[24];
  size_t n = 0;
  do {
    rev[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) buf[i] = rev[n - 1 - i];
  return n;
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// "exit N" or "signal N", then the program's pid and its peak resident memory (wait4's ru_maxrss,
// KiB), which tell an out-of-memory kill from another SIGKILL (oom.h).
void write_status_file(const ForkPlan& p, int status, pid_t pid, long maxrss_kib) {
  char buf[96];
  size_t n = 0;
  auto put = [&](const char* word, unsigned long value) {
    const size_t len = std::strlen(word);
    std::memcpy(buf + n, word, len);
    n += len;
    n += format_uint(buf + n, value);
    buf[n++] = '\n';
  };
  put(WIFSIGNALED(status) ? "signal " : "exit ",
      static_cast<unsigned long>(WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status)));
  if (pid > 0) {
    put("pid ", static_cast<unsigned long>(pid));
    put("maxrss_kib ", static_cast<unsigned long>(std::max(0L, maxrss_kib)));
  }
  int fd = ::open(p.status_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  write_all(fd, buf, n);
  ::fsync(fd);
  ::close(fd);
  ::rename(p.status_tmp.c_str(), p.status_path.c_str());
}

// Appends "wrapper=<pid>:<start ticks>\n" (field 22 of /proc/self/stat) to p.identity_path.
// Async-signal-safe: open/read/write/close on a stack buffer.
void write_identity(const ForkPlan& p) {
  if (p.identity_path.empty()) return;
  char stat[1024];
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = ::read(fd, stat, sizeof stat - 1);
  ::close(fd);
  if (n <= 0) return;
  size_t close_paren = 0;  // the command name may itself contain ')' or spaces
  for (size_t i = 0; i < static_cast<size_t>(n); ++i)
    if (stat[i] == ')') close_paren = i;
  if (close_paren == 0) return;
  unsigned long ticks = 0;
  int field = 2;
  bool digits = false;
  for (size_t i = close_paren + 1; i < static_cast<size_t>(n); ++i) {
    if (stat[i] == ' ') {
      if (field == 22) break;
      ++field;
    } else if (field == 22 && stat[i] >= '0' && stat[i] <= '9') {
      ticks = ticks * 10 + static_cast<unsigned long>(stat[i] - '0');
      digits = true;
    }
  }
  if (!digits) return;
  char line[64] = "wrapper=";
  size_t len = 8;
  len += format_uint(line + len, static_cast<unsigned long>(::getpid()));
  line[len++] = ':';
  len += format_uint(line + len, ticks);
  line[len++] = '\n';
  fd = ::open(p.identity_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  write_all(fd, line, len);
  ::close(fd);
}

extern "C" void ignore_signal(int) {}

// The forked child of the controller. Never returns; async-signal-safe calls only.
[[noreturn]] void run_wrapper(const ForkPlan& p) {
  ::setpgid(0, 0);
  // What the trainer writes in its run directory (checkpoints, metrics, logs, mpirun's files) is
  // the controller's user's alone, whatever mode each file is created with.
  ::umask(077);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &sa, nullptr);
  sa.sa_handler = ignore_signal;
  sa.sa_flags = SA_RESTART;
  for (int sig : kWrapperIgnored) ::sigaction(sig, &sa, nullptr);
  sa.sa_flags = 0;

  ::dup2(p.null_fd, 0);
  ::dup2(p.out_fd, 1);
  ::dup2(p.err_fd, 2);
  // The wrapper never execs, so close-on-exec does not apply: close everything else, or it
  // would keep the controller's sockets and database open after the controller is gone.
  if (::close_range(3, ~0U, 0) != 0) {
    for (int fd = 3; fd < p.max_fd; ++fd) ::close(fd);
  }
  // Until the program is forked, the signals the wrapper ignores stay blocked (pending, not
  // lost): the program's own copy of a stop sent after its fork is delivered when it unblocks
  // them with their default actions, and one sent before is passed on to it below.
  sigset_t none, held;
  sigemptyset(&none);
  sigemptyset(&held);
  for (int sig : kWrapperIgnored) sigaddset(&held, sig);
  ::sigprocmask(SIG_SETMASK, &held, nullptr);

  write_identity(p);
  int status = 0;
  struct rusage usage {};
  pid_t pid = ::fork();
  if (pid == 0) {
    sa.sa_handler = SIG_DFL;
    for (int sig : kWrapperIgnored) ::sigaction(sig, &sa, nullptr);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const bool entered = p.workdir.empty() || ::chdir(p.workdir.c_str()) == 0;
    if (entered) ::execve(p.exe.c_str(), p.argv.data(), p.envp.data());
    char num[24];
    size_t n = format_uint(num, static_cast<unsigned long>(errno));
    const std::string& what = entered ? p.exec_error : p.chdir_error;
    write_all(2, what.data(), what.size());
    write_all(2, num, n);
    write_all(2, "\n", 1);
    ::_exit(127);
  }
  if (pid < 0) {
    static constexpr char kMsg[] = "precon local executor: fork failed\n";
    write_all(2, kMsg, sizeof kMsg - 1);
    status = 127 << 8;
  } else {
    sigset_t pending;
    if (::sigpending(&pending) == 0)
      for (int sig : kForwardedStops)
        if (sigismember(&pending, sig)) ::kill(pid, sig);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the wrapper's own pending copies run its empty handler
    while (::wait4(pid, &status, 0, &usage) < 0) {
      if (errno != EINTR) {
        status = 127 << 8;
        break;
      }
    }
  }
  write_status_file(p, status, pid, usage.ru_maxrss);
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

pid_t spawn_wrapped(const WrappedCommand& cmd) {
  ForkPlan plan;
  plan.exe = cmd.exe;
  plan.argv_storage = cmd.argv;
  for (auto& s : plan.argv_storage) plan.argv.push_back(s.data());
  plan.argv.push_back(nullptr);
  plan.env_storage = cmd.env;
  for (auto& s : plan.env_storage) plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  plan.status_path = cmd.status_path.string();
  plan.status_tmp = plan.status_path + ".tmp";
  plan.identity_path = cmd.identity_path.string();
  plan.exec_error = "precon local executor: cannot execute " + plan.exe + ": errno ";
  plan.workdir = cmd.workdir.string();
  plan.chdir_error = "precon local executor: cannot enter the working directory " + plan.workdir + ": errno ";
  Fd null_fd(open_high("/dev/null", O_RDONLY));
  Fd out_fd(open_high(cmd.stdout_path.string(), O_WRONLY | O_CREAT | O_APPEND, 0600, true));
  Fd err_fd(open_high(cmd.stderr_path.string(), O_WRONLY | O_CREAT | O_APPEND, 0600, true));
  plan.null_fd = null_fd.get();
  plan.out_fd = out_fd.get();
  plan.err_fd = err_fd.get();
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    plan.max_fd = static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
  }

  // Signals stay blocked across fork so that no controller handler runs in the child before
  // the wrapper has reset the dispositions.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::fork();
  if (pid == 0) run_wrapper(plan);
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) throw ExecError("cannot start " + cmd.exe + ": fork: " + std::strerror(fork_errno));
  // Both sides set the group, so it exists whichever runs first (a stop right after launch
  // must reach it).
  ::setpgid(pid, pid);
  return pid;
}

// /proc/<pid>/stat: field 3 is the state, field 22 the start time in clock ticks since boot.
std::optional<ProcStat> read_proc_stat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  size_t close = line.rfind(')');  // the command name may itself contain ')' or spaces
  if (close == std::string::npos || close + 2 > line.size()) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  ProcStat info;
  std::string skip;
  rest >> info.state;
  for (int field = 4; field < 22; ++field) rest >> skip;
  rest >> info.start_ticks;
  if (!rest) return std::nullopt;
  return info;
}

std::optional<ExitStatus> read_exit_status_file(const fs::path& path, ExitRecord* record) {
  std::ifstream in(path);
  std::string word;
  long value = 0;
  if (!(in >> word >> value)) return std::nullopt;
  std::optional<ExitStatus> s;
  if (word == "exit") s = classify_exit(static_cast<int>((value & 0xff) << 8));
  if (word == "signal" && value > 0 && value < 0x7f) s = classify_exit(static_cast<int>(value));
  if (s && record) {
    for (std::string key; in >> key >> value;) {
      if (key == "pid") record->pid = static_cast<pid_t>(value);
      if (key == "maxrss_kib") record->peak_rss = static_cast<double>(value) * 1024;
    }
  }
  return s;
}

// execve does not search PATH; resolve a bare name the way a shell would, with the PATH the
// program will see.
std::optional<std::string> resolve_program(const std::string& name, const std::string& path_var) {
  if (name.find('/') != std::string::npos) {
    if (is_executable_file(name)) return name;
    return std::nullopt;
  }
  std::istringstream dirs(path_var);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  return std::nullopt;
}

}  // namespace precon::orch
