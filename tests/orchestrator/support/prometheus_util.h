// Test helpers for /metrics: a reader of the text exposition format (samples with labels, and
// the families' TYPE lines), a child process that is always killed (a Prometheus server), and
// running a command for its exit status and output (promtool).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace precon::orch::testing {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family name -> counter | gauge | histogram | ...

  // The value of the one sample with this name whose labels include `labels`; nullopt when none.
  // Fails the test when more than one matches.
  std::optional<double> value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    std::optional<double> found;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) match &= s.labels.count(k) && s.labels.at(k) == v;
      if (!match) continue;
      EXPECT_FALSE(found.has_value()) << "more than one sample " << name << " matches";
      found = s.value;
    }
    return found;
  }
  // Samples carrying label `key` = `value`.
  size_t count_with_label(const std::string& key, const std::string& value) const {
    size_t n = 0;
    for (const Sample& s : samples) n += s.labels.count(key) && s.labels.at(key) == value;
    return n;
  }
};

// Parses the text format 0.0.4; fails the test (and skips the line) for a malformed line.
inline Exposition parse_exposition(const std::string& text) {
  Exposition out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream f(line);
      std::string hash, kind, name, type;
      f >> hash >> kind >> name >> type;
      if (kind == "TYPE") out.types[name] = type;
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') s.name += line[i++];
    bool ok = !s.name.empty();
    if (ok && line[i] == '{') {
      ++i;
      while (ok && i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        ok = eq != std::string::npos && eq + 1 < line.size() && line[eq + 1] == '"';
        if (!ok) break;
        const std::string key = line.substr(i, eq - i);
        std::string value;
        for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        ok = i < line.size();
        ++i;  // the closing quote
        s.labels[key] = value;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ok = ok && i < line.size() && line[i] == '}';
      ++i;
    }
    if (ok) {
      const std::string rest = i < line.size() ? line.substr(i) : "";
      std::istringstream v(rest);
      std::string number;
      v >> number;
      char* end = nullptr;
      s.value = std::strtod(number.c_str(), &end);
      ok = !number.empty() && end && *end == '\0';
    }
    EXPECT_TRUE(ok) << "malformed exposition line: " << line;
    if (ok) out.samples.push_back(std::move(s));
  }
  return out;
}

struct CommandResult {
  int status = -1;  // exit status, or -1 when it did not exit normally
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell with stdin from input_file (when given).
inline CommandResult run_command(const std::string& command, const std::filesystem::path& input_file = {}) {
  const std::filesystem::path out_file =
      std::filesystem::temp_directory_path() / ("precon_cmd_" + std::to_string(::getpid()) + ".out");
  std::string line = command + (input_file.empty() ? " </dev/null" : " <'" + input_file.string() + "'") + " >'" +
                     out_file.string() + "' 2>&1";
  const int rc = std::system(line.c_str());
  CommandResult r;
  r.status = (rc != -1 && WIFEXITED(rc)) ? WEXITSTATUS(rc) : -1;
  std::ifstream f(out_file);
  std::stringstream ss;
  ss << f.rdbuf();
  r.output = ss.str();
  std::filesystem::remove(out_file);
  return r;
}

// A child process (stdout and stderr to log) that is stopped when this object goes away,
// whatever way the test leaves, and killed with it if the test process dies first.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::filesystem::path& log) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const std::string log_path = log.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec (the test process has threads).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
      }
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
  }
  ~ChildProcess() { stop(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  // False once it has exited (reaps it).
  bool running() {
    if (pid_ <= 0) return false;
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
    return pid_ > 0;
  }
  // SIGTERM, up to 5 s to exit, then SIGKILL; always reaps.
  void stop() {
    if (!running()) return;
    ::kill(pid_, SIGTERM);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < end) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace precon::orch::testing
