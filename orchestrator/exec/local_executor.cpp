#include "orchestrator/exec/local_executor.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "orchestrator/exec/oom.h"
#include "orchestrator/exec/wrapped_process.h"
#include "worker/common/file_io.h"

extern char** environ;

namespace precon::orch {
namespace fs = std::filesystem;

namespace {

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

fs::path launch_record_path(const fs::path& run_dir, int64_t attempt) {
  return run_dir / ("launch." + std::to_string(attempt));
}
std::map<std::string, std::string> controller_env() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    // The admin token stays with the controller: a trial authenticates with its own token only.
    if (kv.compare(0, eq, "PRECON_TOKEN") == 0) continue;
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
      hostname_(local_hostname()), cgroup_(own_memory_cgroup()) {}

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
  if (spec.ranks < 1) throw ExecError(who + ": ranks must be at least 1, got " + std::to_string(spec.ranks));
  if (spec.total_cpus() > cpu_slots_) {
    throw ExecError(who + " needs " + std::to_string(spec.total_cpus()) + " CPU slots (" + std::to_string(spec.ranks) +
                    " rank(s) × " + std::to_string(spec.cpus) + " thread(s)) but the local executor has " +
                    std::to_string(cpu_slots_) + "; lower train.threads or the layout, or give the executor more slots");
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
  if (spec.ranks > 1 && !resolve_program("mpirun", path_var)) {
    throw ExecError(who + " runs " + std::to_string(spec.ranks) +
                    " ranks, which this executor starts with mpirun, but mpirun is not on PATH (install openmpi-bin)");
  }
}

namespace {
// mpirun starts the trial's ranks on this machine. The controller's slot accounting decides what
// fits, so mpirun neither refuses more ranks than cores nor pins them (other trials share them).
std::vector<std::string> mpirun_argv(const LaunchSpec& spec) {
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(spec.ranks), "--oversubscribe", "--bind-to", "none"};
  argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
  return argv;
}
}  // namespace

bool LocalExecutor::has_capacity(const LaunchSpec& spec) const {
  std::lock_guard lock(mu_);
  return spec.total_cpus() <= cpu_slots_ - cpus_used_ &&
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

std::optional<Handle> LocalExecutor::earlier_launch(const LaunchSpec& spec) const {
  std::ifstream record(launch_record_path(spec.run_dir, spec.attempt));
  std::string line, id;
  while (std::getline(record, line)) {
    if (line.rfind("wrapper=", 0) == 0) id = line.substr(8);
  }
  pid_t pid = 0;
  unsigned long long ticks = 0;
  if (!parse_external_id(id, pid, ticks)) return std::nullopt;
  Handle h;
  h.executor = name();
  h.external_id = id;
  h.nodes = hostname_;
  h.trial_id = spec.trial_id;
  h.attempt = spec.attempt;
  h.run_dir = spec.run_dir;
  return h;
}

Handle LocalExecutor::launch(const LaunchSpec& spec) {
  validate(spec);
  std::lock_guard lock(mu_);
  if (std::optional<Handle> earlier = earlier_launch(spec)) {
    // Started by a controller that died before recording it: the same attempt, still running
    // or with its end in the status file. Starting it again would run the trainer twice.
    if (std::optional<ExitStatus> ended = adopt_locked(*earlier)) ended_unpolled_.emplace_back(*earlier, *ended);
    return *earlier;
  }
  int free_gpus = static_cast<int>(std::count(gpu_used_.begin(), gpu_used_.end(), false));
  if (spec.total_cpus() > cpu_slots_ - cpus_used_ || spec.gpus > free_gpus) {
    throw ExecError("no free slots for trial " + std::to_string(spec.trial_id) + ": needs " +
                    std::to_string(spec.total_cpus()) + " CPUs and " + std::to_string(spec.gpus) + " GPUs, free " +
                    std::to_string(cpu_slots_ - cpus_used_) + " CPUs and " + std::to_string(free_gpus) +
                    " GPUs (check has_capacity first)");
  }
  std::error_code ec;
  worker::create_private_directories(spec.run_dir, ec);
  if (ec) throw ExecError("cannot create run directory " + spec.run_dir.string() + ": " + ec.message());

  const fs::path status_path = exit_status_path(spec.run_dir, spec.attempt);
  // A status file left by an earlier launch of the same attempt number must not be taken for
  // this one's.
  fs::remove(status_path, ec);
  fs::remove(status_path.string() + ".tmp", ec);

  std::vector<int> gpus;
  for (size_t i = 0; i < gpu_ids_.size() && static_cast<int>(gpus.size()) < spec.gpus; ++i) {
    if (!gpu_used_[i]) gpus.push_back(gpu_ids_[i]);
  }
  auto env = controller_env();
  for (const auto& [key, value] : spec.env) env[key] = value;
  env["OMP_NUM_THREADS"] = std::to_string(spec.cpus);
  // With GPUs configured, a worker given none must see none rather than all of them.
  if (!gpu_ids_.empty()) env["CUDA_VISIBLE_DEVICES"] = join_ids(gpus);

  WrappedCommand cmd;
  cmd.argv = spec.ranks > 1 ? mpirun_argv(spec) : spec.argv;
  if (spec.ranks > 1 && ::geteuid() == 0) {
    // OpenMPI refuses root without these; a controller run as root means it.
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  }
  auto exe = resolve_program(cmd.argv[0], env.count("PATH") ? env["PATH"] : "/usr/bin:/bin");
  if (!exe) throw ExecError("program not found or not executable: " + cmd.argv[0]);
  cmd.exe = fs::absolute(*exe).string();  // found from here, run from the run directory
  if (spec.user_program) cmd.workdir = fs::absolute(spec.run_dir);
  for (const auto& [key, value] : env) cmd.env.push_back(key + "=" + value);
  cmd.stdout_path = spec.run_dir / "stdout.log";
  cmd.stderr_path = trainer_stderr_path(spec.run_dir);
  cmd.status_path = status_path;
  cmd.identity_path = launch_record_path(spec.run_dir, spec.attempt);
  try {
    worker::write_file_atomic(launch_record_path(spec.run_dir, spec.attempt),
                              "cpus=" + std::to_string(spec.total_cpus()) + "\ngpus=" + join_ids(gpus) + "\n");
  } catch (const std::exception& e) {
    throw ExecError(std::string("cannot write ") + e.what());
  }
  // The trial runs in this process's memory cgroup: its count of out-of-memory kills now, to
  // compare with the count when the attempt ends.
  const long long oom_kills_at_launch = cgroup_oom_kills(cgroup_);
  pid_t pid = spawn_wrapped(cmd);

  auto info = read_proc_stat(pid);  // the unreaped child cannot vanish from /proc
  if (!info) {
    ::killpg(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw ExecError("cannot read /proc/" + std::to_string(pid) + "/stat of the process just started");
  }
  Attempt a;
  a.pid = pid;
  a.oom_kills_before = oom_kills_at_launch;
  a.start_ticks = info->start_ticks;
  a.child = true;
  a.handle.executor = name();
  a.handle.external_id = std::to_string(pid) + ":" + std::to_string(info->start_ticks);
  a.handle.nodes = hostname_;
  a.handle.trial_id = spec.trial_id;
  a.handle.attempt = spec.attempt;
  a.handle.run_dir = spec.run_dir;
  reserve(a, spec.total_cpus(), gpus);
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
      ExitRecord record;
      if (auto s = read_exit_status_file(status_path, &record)) return judged(a, *s, record);
      return classify_exit(st);
    }
    if (errno != ECHILD) return std::nullopt;
    a.child = false;  // reaped by someone else: judge it from outside like an adopted one
  }
  auto info = read_proc_stat(a.pid);
  if (info && info->start_ticks == a.start_ticks && info->state != 'Z' && info->state != 'X') return std::nullopt;
  ExitRecord record;
  if (auto s = read_exit_status_file(status_path, &record)) return judged(a, *s, record);
  if (a.killed) return classify_exit(SIGKILL);
  return lost("process ended without writing " + status_path.string());
}

ExitStatus LocalExecutor::judged(const Attempt& a, const ExitStatus& s, const ExitRecord& record) const {
  OomEvidence e;
  e.status = s;
  if (s.kind != ExitKind::killed && s.kind != ExitKind::failed) return s;
  e.oom_kills_before = a.oom_kills_before;
  e.oom_kills_after = cgroup_oom_kills(cgroup_);
  if (record.pid > 0) e.kernel_record = kernel_oom_record(record.pid);
  e.peak_rss = record.peak_rss;
  const double machine = memory_total_bytes();
  if (cgroup_.limit > 0 && (machine < 0 || cgroup_.limit < machine)) {
    e.limit = cgroup_.limit;
    e.limit_source = "cgroup " + std::string(cgroup_.v2 ? "memory.max" : "memory.limit_in_bytes");
  } else {
    e.limit = machine;
    e.limit_source = "the machine's memory";
  }
  return judge_oom(e);
}

std::vector<std::pair<Handle, ExitStatus>> LocalExecutor::poll() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<Handle, ExitStatus>> ended = std::move(ended_unpolled_);
  ended_unpolled_.clear();
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
    auto info = read_proc_stat(it->pid);
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
  return adopt_locked(h);
}

std::optional<ExitStatus> LocalExecutor::adopt_locked(const Handle& h) {
  for (const auto& a : attempts_) {
    if (a.handle.external_id == h.external_id) return std::nullopt;
  }
  const fs::path status_path = exit_status_path(h.run_dir, h.attempt);
  Attempt a;
  a.handle = h;
  if (!parse_external_id(h.external_id, a.pid, a.start_ticks)) {
    if (auto s = read_exit_status_file(status_path)) return s;
    return lost("external id '" + h.external_id + "' is not <pid>:<start time>");
  }
  if (h.nodes != hostname_) {
    if (auto s = read_exit_status_file(status_path)) return s;
    return lost("launched on host " + h.nodes + "; this controller runs on " + hostname_ + " and cannot see it");
  }
  // A controller restarted within the same process (tests) is still the wrapper's parent.
  siginfo_t si;
  std::memset(&si, 0, sizeof si);
  if (::waitid(P_PID, static_cast<id_t>(a.pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0) {
    auto info = read_proc_stat(a.pid);
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
