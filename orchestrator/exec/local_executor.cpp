#include "orchestrator/exec/local_executor.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

extern char** environ;

namespace precon::orch {
namespace fs = std::filesystem;

namespace {

// The wrapper ignores these so that a stop signal (or a terminal's) sent to the process group
// reaches the program but not the wrapper, which must outlive it to record its status.
constexpr int kWrapperIgnored[] = {SIGTERM, SIGINT,  SIGHUP,  SIGQUIT, SIGUSR1,
                                   SIGUSR2, SIGPIPE, SIGTTIN, SIGTTOU, SIGTSTP};

std::string errno_text(int e) { return std::strerror(e); }

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
int open_high(const std::string& path, int flags, mode_t mode = 0) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) {
    throw ExecError("cannot open " + path + ": " + errno_text(errno));
  }
  if (fd < 3) {
    int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int e = errno;
    ::close(fd);
    if (high < 0) throw ExecError("cannot duplicate descriptor for " + path + ": " + errno_text(e));
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
  std::string exec_error;  // written to stderr.log when execve fails, followed by errno
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

void write_status_file(const ForkPlan& p, int status) {
  char buf[32];
  size_t n = 0;
  const char* word = WIFSIGNALED(status) ? "signal " : "exit ";
  size_t word_len = std::strlen(word);
  std::memcpy(buf, word, word_len);
  n = word_len;
  n += format_uint(buf + n, WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  buf[n++] = '\n';
  int fd = ::open(p.status_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  write_all(fd, buf, n);
  ::fsync(fd);
  ::close(fd);
  ::rename(p.status_tmp.c_str(), p.status_path.c_str());
}

// The forked child of the controller. Never returns; async-signal-safe calls only.
[[noreturn]] void run_wrapper(const ForkPlan& p) {
  ::setpgid(0, 0);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &sa, nullptr);
  sa.sa_handler = SIG_IGN;
  for (int sig : kWrapperIgnored) ::sigaction(sig, &sa, nullptr);

  ::dup2(p.null_fd, 0);
  ::dup2(p.out_fd, 1);
  ::dup2(p.err_fd, 2);
  // The wrapper never execs, so close-on-exec does not apply: close everything else, or it
  // would keep the controller's sockets and database open after the controller is gone.
  if (::close_range(3, ~0U, 0) != 0) {
    for (int fd = 3; fd < p.max_fd; ++fd) ::close(fd);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  int status = 0;
  pid_t pid = ::fork();
  if (pid == 0) {
    sa.sa_handler = SIG_DFL;
    for (int sig : kWrapperIgnored) ::sigaction(sig, &sa, nullptr);
    ::execve(p.exe.c_str(), p.argv.data(), p.envp.data());
    char num[24];
    size_t n = format_uint(num, static_cast<unsigned long>(errno));
    write_all(2, p.exec_error.data(), p.exec_error.size());
    write_all(2, num, n);
    write_all(2, "\n", 1);
    ::_exit(127);
  }
  if (pid < 0) {
    static constexpr char kMsg[] = "precon local executor: fork failed\n";
    write_all(2, kMsg, sizeof kMsg - 1);
    status = 127 << 8;
  } else {
    while (::waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) {
        status = 127 << 8;
        break;
      }
    }
  }
  write_status_file(p, status);
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

struct ProcInfo {
  char state = '?';
  unsigned long long start_ticks = 0;
};

// /proc/<pid>/stat: field 3 is the state, field 22 the start time in clock ticks since boot.
std::optional<ProcInfo> read_proc(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  size_t close = line.rfind(')');  // the command name may itself contain ')' or spaces
  if (close == std::string::npos || close + 2 > line.size()) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  ProcInfo info;
  std::string skip;
  rest >> info.state;
  for (int field = 4; field < 22; ++field) rest >> skip;
  rest >> info.start_ticks;
  if (!rest) return std::nullopt;
  return info;
}

bool parse_external_id(const std::string& id, pid_t& pid, unsigned long long& ticks) {
  size_t colon = id.find(':');
  if (colon == std::string::npos) return false;
  try {
    size_t used = 0;
    long long p = std::stoll(id.substr(0, colon), &used);
    if (used != colon || p <= 1 || p > INT_MAX) return false;
    std::string rest = id.substr(colon + 1);
    ticks = std::stoull(rest, &used);
    if (used != rest.size()) return false;
    pid = static_cast<pid_t>(p);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::optional<ExitStatus> read_status_file(const fs::path& path) {
  std::ifstream in(path);
  std::string word;
  long value = 0;
  if (!(in >> word >> value)) return std::nullopt;
  if (word == "exit") return classify_exit(static_cast<int>((value & 0xff) << 8));
  if (word == "signal" && value > 0 && value < 0x7f) return classify_exit(static_cast<int>(value));
  return std::nullopt;
}

ExitStatus lost(std::string detail) {
  ExitStatus s;
  s.kind = ExitKind::lost;
  s.detail = std::move(detail);
  return s;
}

fs::path launch_record_path(const fs::path& run_dir, int64_t attempt) {
  return run_dir / ("launch." + std::to_string(attempt));
}

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
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

std::map<std::string, std::string> controller_env() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

std::string join_ids(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

int available_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 && n < INT_MAX ? static_cast<int>(n) : 1;
}

std::string local_hostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

LocalExecutor::LocalExecutor(LocalExecutorOptions options)
    : cpu_slots_(options.cpu_slots > 0 ? options.cpu_slots : available_cpus()),
      gpu_ids_(std::move(options.gpu_ids)),
      gpu_used_(gpu_ids_.size(), false),
      hostname_(local_hostname()) {}

LocalExecutor::~LocalExecutor() = default;

fs::path LocalExecutor::exit_status_path(const fs::path& run_dir, int64_t attempt) {
  return run_dir / ("exit_status." + std::to_string(attempt));
}

void LocalExecutor::validate(const LaunchSpec& spec) const {
  const std::string who = "trial " + std::to_string(spec.trial_id) + " attempt " + std::to_string(spec.attempt);
  if (spec.argv.empty() || spec.argv[0].empty()) throw ExecError(who + ": nothing to run (argv is empty)");
  if (spec.run_dir.empty()) throw ExecError(who + ": no run directory given");
  if (spec.cpus < 1) throw ExecError(who + ": cpus must be at least 1, got " + std::to_string(spec.cpus));
  if (spec.gpus < 0) throw ExecError(who + ": gpus must be 0 or more, got " + std::to_string(spec.gpus));
  if (spec.cpus > cpu_slots_) {
    throw ExecError(who + " needs " + std::to_string(spec.cpus) + " CPU slots but the local executor has " +
                    std::to_string(cpu_slots_) + "; lower the recipe's cpus or give the executor more slots");
  }
  if (static_cast<size_t>(spec.gpus) > gpu_ids_.size()) {
    throw ExecError(who + " needs " + std::to_string(spec.gpus) + " GPUs but the local executor has " +
                    std::to_string(gpu_ids_.size()) +
                    (gpu_ids_.empty() ? " (no GPU ids configured)" : " (ids " + join_ids(gpu_ids_) + ")") +
                    "; lower the recipe's gpus or configure the executor's GPU ids");
  }
  for (const auto& [key, value] : spec.env) {
    if (key.empty() || key.find('=') != std::string::npos || key.find('\0') != std::string::npos ||
        value.find('\0') != std::string::npos) {
      throw ExecError(who + ": invalid environment variable name or value: '" + key + "'");
    }
  }
  auto path_it = spec.env.find("PATH");
  const char* path_env = std::getenv("PATH");
  std::string path_var = path_it != spec.env.end() ? path_it->second : (path_env ? path_env : "/usr/bin:/bin");
  if (!resolve_program(spec.argv[0], path_var)) {
    throw ExecError(who + ": program not found or not executable: " + spec.argv[0]);
  }
}

bool LocalExecutor::has_capacity(const LaunchSpec& spec) const {
  std::lock_guard lock(mu_);
  return spec.cpus <= cpu_slots_ - cpus_used_ &&
         spec.gpus <= static_cast<int>(std::count(gpu_used_.begin(), gpu_used_.end(), false));
}

int LocalExecutor::free_cpu_slots() const {
  std::lock_guard lock(mu_);
  return std::max(0, cpu_slots_ - cpus_used_);
}

int LocalExecutor::free_gpu_slots() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(std::count(gpu_used_.begin(), gpu_used_.end(), false));
}

size_t LocalExecutor::running() const {
  std::lock_guard lock(mu_);
  return attempts_.size();
}

void LocalExecutor::reserve(Attempt& a, int cpus, const std::vector<int>& gpus) {
  a.cpus = cpus;
  cpus_used_ += cpus;
  for (int id : gpus) {
    auto it = std::find(gpu_ids_.begin(), gpu_ids_.end(), id);
    if (it == gpu_ids_.end()) continue;  // not ours (the configuration changed across a restart)
    gpu_used_[static_cast<size_t>(it - gpu_ids_.begin())] = true;
    a.gpus.push_back(id);
  }
}

void LocalExecutor::release(const Attempt& a) {
  cpus_used_ -= a.cpus;
  for (int id : a.gpus) {
    auto it = std::find(gpu_ids_.begin(), gpu_ids_.end(), id);
    if (it != gpu_ids_.end()) gpu_used_[static_cast<size_t>(it - gpu_ids_.begin())] = false;
  }
}

Handle LocalExecutor::launch(const LaunchSpec& spec) {
  validate(spec);
  std::lock_guard lock(mu_);
  int free_gpus = static_cast<int>(std::count(gpu_used_.begin(), gpu_used_.end(), false));
  if (spec.cpus > cpu_slots_ - cpus_used_ || spec.gpus > free_gpus) {
    throw ExecError("no free slots for trial " + std::to_string(spec.trial_id) + ": needs " +
                    std::to_string(spec.cpus) + " CPUs and " + std::to_string(spec.gpus) + " GPUs, free " +
                    std::to_string(cpu_slots_ - cpus_used_) + " CPUs and " + std::to_string(free_gpus) +
                    " GPUs (check has_capacity first)");
  }
  std::error_code ec;
  fs::create_directories(spec.run_dir, ec);
  if (ec) throw ExecError("cannot create run directory " + spec.run_dir.string() + ": " + ec.message());

  ForkPlan plan;
  plan.status_path = exit_status_path(spec.run_dir, spec.attempt).string();
  plan.status_tmp = plan.status_path + ".tmp";
  // A status file left by an earlier launch of the same attempt number must not be taken for
  // this one's.
  fs::remove(plan.status_path, ec);
  fs::remove(plan.status_tmp, ec);

  std::vector<int> gpus;
  for (size_t i = 0; i < gpu_ids_.size() && static_cast<int>(gpus.size()) < spec.gpus; ++i) {
    if (!gpu_used_[i]) gpus.push_back(gpu_ids_[i]);
  }

  auto env = controller_env();
  for (const auto& [key, value] : spec.env) env[key] = value;
  env["OMP_NUM_THREADS"] = std::to_string(spec.cpus);
  // With GPUs configured, a worker given none must see none rather than all of them.
  if (!gpu_ids_.empty()) env["CUDA_VISIBLE_DEVICES"] = join_ids(gpus);
  auto exe = resolve_program(spec.argv[0], env.count("PATH") ? env["PATH"] : "/usr/bin:/bin");
  if (!exe) throw ExecError("program not found or not executable: " + spec.argv[0]);
  plan.exe = *exe;
  plan.argv_storage = spec.argv;
  for (auto& s : plan.argv_storage) plan.argv.push_back(s.data());
  plan.argv.push_back(nullptr);
  for (const auto& [key, value] : env) plan.env_storage.push_back(key + "=" + value);
  for (auto& s : plan.env_storage) plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  plan.exec_error = "precon local executor: cannot execute " + plan.exe + ": errno ";

  {
    std::ofstream record(launch_record_path(spec.run_dir, spec.attempt), std::ios::trunc);
    record << "cpus=" << spec.cpus << "\ngpus=" << join_ids(gpus) << "\n";
    if (!record) throw ExecError("cannot write " + launch_record_path(spec.run_dir, spec.attempt).string());
  }
  Fd null_fd(open_high("/dev/null", O_RDONLY));
  Fd out_fd(open_high((spec.run_dir / "stdout.log").string(), O_WRONLY | O_CREAT | O_APPEND, 0644));
  Fd err_fd(open_high((spec.run_dir / "stderr.log").string(), O_WRONLY | O_CREAT | O_APPEND, 0644));
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
  if (pid < 0) throw ExecError("cannot start trial " + std::to_string(spec.trial_id) + ": fork: " + errno_text(fork_errno));
  // Both sides set the group, so it exists whichever runs first (a stop right after launch
  // must reach it).
  ::setpgid(pid, pid);

  auto info = read_proc(pid);  // the unreaped child cannot vanish from /proc
  if (!info) {
    ::killpg(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw ExecError("cannot read /proc/" + std::to_string(pid) + "/stat of the process just started");
  }
  Attempt a;
  a.pid = pid;
  a.start_ticks = info->start_ticks;
  a.child = true;
  a.handle.executor = name();
  a.handle.external_id = std::to_string(pid) + ":" + std::to_string(info->start_ticks);
  a.handle.nodes = hostname_;
  a.handle.trial_id = spec.trial_id;
  a.handle.attempt = spec.attempt;
  a.handle.run_dir = spec.run_dir;
  reserve(a, spec.cpus, gpus);
  attempts_.push_back(a);
  return a.handle;
}

std::optional<ExitStatus> LocalExecutor::check_ended(Attempt& a) {
  const fs::path status_path = exit_status_path(a.handle.run_dir, a.handle.attempt);
  if (a.child) {
    siginfo_t si;
    std::memset(&si, 0, sizeof si);
    if (::waitid(P_PID, static_cast<id_t>(a.pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0) {
      if (si.si_pid == 0) return std::nullopt;
      // The unreaped wrapper still holds the group id, so this reaches only what the attempt
      // left behind.
      ::killpg(a.pid, SIGKILL);
      int st = 0;
      while (::waitpid(a.pid, &st, 0) < 0 && errno == EINTR) {
      }
      if (auto s = read_status_file(status_path)) return s;
      return classify_exit(st);
    }
    if (errno != ECHILD) return std::nullopt;
    a.child = false;  // reaped by someone else: judge it from outside like an adopted one
  }
  auto info = read_proc(a.pid);
  if (info && info->start_ticks == a.start_ticks && info->state != 'Z' && info->state != 'X') return std::nullopt;
  if (auto s = read_status_file(status_path)) return s;
  if (a.killed) return classify_exit(SIGKILL);
  return lost("process ended without writing " + status_path.string());
}

std::vector<std::pair<Handle, ExitStatus>> LocalExecutor::poll() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<Handle, ExitStatus>> ended;
  for (auto it = attempts_.begin(); it != attempts_.end();) {
    if (auto s = check_ended(*it)) {
      release(*it);
      ended.emplace_back(it->handle, std::move(*s));
      it = attempts_.erase(it);
    } else {
      ++it;
    }
  }
  return ended;
}

void LocalExecutor::send(const Handle& h, int sig, bool mark_killed) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(attempts_.begin(), attempts_.end(),
                         [&](const Attempt& a) { return a.handle.external_id == h.external_id; });
  if (it == attempts_.end()) return;
  if (!it->child) {
    // Not ours to wait for, so its pid could have been reused since: check it is still the
    // same process.
    auto info = read_proc(it->pid);
    if (!info || info->start_ticks != it->start_ticks) return;
  }
  ::killpg(it->pid, sig);
  if (mark_killed) it->killed = true;
}

void LocalExecutor::signal_stop(const Handle& h) { send(h, SIGTERM, false); }

void LocalExecutor::kill(const Handle& h) { send(h, SIGKILL, true); }

std::optional<ExitStatus> LocalExecutor::adopt(const Handle& h) {
  if (h.executor != name()) {
    throw ExecError("the local executor cannot adopt an attempt of executor '" + h.executor + "'");
  }
  std::lock_guard lock(mu_);
  for (const auto& a : attempts_) {
    if (a.handle.external_id == h.external_id) return std::nullopt;
  }
  const fs::path status_path = exit_status_path(h.run_dir, h.attempt);
  Attempt a;
  a.handle = h;
  if (!parse_external_id(h.external_id, a.pid, a.start_ticks)) {
    if (auto s = read_status_file(status_path)) return s;
    return lost("external id '" + h.external_id + "' is not <pid>:<start time>");
  }
  if (h.nodes != hostname_) {
    if (auto s = read_status_file(status_path)) return s;
    return lost("launched on host " + h.nodes + "; this controller runs on " + hostname_ + " and cannot see it");
  }
  // A controller restarted within the same process (tests) is still the wrapper's parent.
  siginfo_t si;
  std::memset(&si, 0, sizeof si);
  if (::waitid(P_PID, static_cast<id_t>(a.pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0) {
    auto info = read_proc(a.pid);
    a.child = info && info->start_ticks == a.start_ticks;
  }
  if (auto s = check_ended(a)) {
    if (s->kind == ExitKind::lost) s->detail = "process vanished while the controller was down and left no exit status";
    return s;
  }
  int cpus = 1;
  std::vector<int> gpus;
  std::ifstream record(launch_record_path(h.run_dir, h.attempt));
  std::string line;
  while (std::getline(record, line)) {
    if (line.rfind("cpus=", 0) == 0) {
      cpus = std::max(0, std::atoi(line.c_str() + 5));
    } else if (line.rfind("gpus=", 0) == 0) {
      std::istringstream ids(line.substr(5));
      std::string id;
      while (std::getline(ids, id, ',')) {
        if (!id.empty()) gpus.push_back(std::atoi(id.c_str()));
      }
    }
  }
  reserve(a, cpus, gpus);
  attempts_.push_back(a);
  return std::nullopt;
}

}  // namespace precon::orch
