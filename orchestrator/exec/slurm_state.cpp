#include "orchestrator/exec/slurm_state.h"

#include <signal.h>

#include <optional>
#include <set>
#include <sstream>
#include <vector>

namespace precon::orch {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool parse_int(const std::string& s, int& v) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  v = std::stoi(s);
  return true;
}

// Splits at commas outside brackets; nullopt when the brackets do not pair.
std::optional<std::vector<std::string>> split_hosts(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return std::nullopt;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) return std::nullopt;
  out.push_back(cur);
  return out;
}

// Appends the hosts of one term ("n[1-2]x[3,5]" or "n1"); false when it is not a host-list term.
bool expand_term(const std::string& term, std::vector<std::string>& out, size_t limit) {
  const size_t open = term.find('[');
  if (open == std::string::npos) {
    if (term.empty() || term.find(']') != std::string::npos) return false;
    out.push_back(term);
    return out.size() <= limit;
  }
  const size_t close = term.find(']', open);
  if (close == std::string::npos) return false;
  const std::string prefix = term.substr(0, open), rest = term.substr(close + 1);
  for (const std::string& range : split(term.substr(open + 1, close - open - 1), ',')) {
    const size_t dash = range.find('-');
    const std::string lo_text = range.substr(0, dash), hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
    int lo = 0, hi = 0;
    if (!parse_int(lo_text, lo) || !parse_int(hi_text, hi) || hi < lo || hi - lo > static_cast<int>(limit)) return false;
    for (int n = lo; n <= hi; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
      if (!expand_term(prefix + digits + rest, out, limit)) return false;
    }
  }
  return true;
}

}  // namespace

std::string expand_hostlist(const std::string& list) {
  constexpr size_t kLimit = 10000;
  const auto terms = split_hosts(list);
  if (list.empty() || !terms) return list;
  std::vector<std::string> hosts;
  for (const std::string& t : *terms)
    if (!expand_term(t, hosts, kLimit)) return list;
  std::string out;
  for (const std::string& h : hosts) out += (out.empty() ? "" : ",") + h;
  return out;
}

std::map<std::string, SqueueRow> parse_squeue(const std::string& text) {
  std::map<std::string, SqueueRow> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto f = split(line, '|');
    if (f.size() != 4 || f[0].empty() || f[1].empty()) continue;
    SqueueRow r;
    r.state = base_state(f[1]);
    r.reason = f[2];
    r.nodes = expand_hostlist(f[3]);
    rows[f[0]] = r;
  }
  return rows;
}

std::map<std::string, std::string> parse_scontrol_record(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::string line = text.substr(0, text.find('\n'));
  std::istringstream in(line);
  std::string token, last;
  while (in >> token) {
    size_t eq = token.find('=');
    // A token without '=' (or starting with it) continues the previous value: "Reason=a b".
    if (eq == std::string::npos || eq == 0) {
      if (!last.empty()) kv[last] += " " + token;
      continue;
    }
    last = token.substr(0, eq);
    kv[last] = token.substr(eq + 1);
  }
  return kv;
}

std::optional<SacctRow> parse_sacct(const std::string& text, const std::string& job_id) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto f = split(line, '|');
    if (f.size() < 3 || f[0] != job_id) continue;
    SacctRow r;
    r.state = base_state(f[1]);
    r.exit_code = f[2];
    int n = 0;
    if (f.size() > 3 && parse_int(f[3], n)) r.restarts = n;
    return r;
  }
  return std::nullopt;
}

std::string base_state(const std::string& state) {
  std::string s = state.substr(0, state.find(' '));
  if (!s.empty() && s.back() == '+') s.pop_back();  // sacct marks truncated names with '+'
  return s;
}

bool slurm_state_active(const std::string& state) {
  static const std::set<std::string> kActive = {
      "PENDING",      "RUNNING",   "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED",     "REQUEUE_FED",
      "REQUEUE_HOLD", "RESIZING",  "SIGNALING", "STAGE_OUT",  "STOPPED",     "SPECIAL_EXIT", "RESV_DEL_HOLD",
      "POWER_UP_NODE", "UPDATE_DB"};
  return kActive.count(base_state(state)) > 0;
}

bool slurm_state_waiting(const std::string& state) {
  static const std::set<std::string> kWaiting = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                                                 "SPECIAL_EXIT", "RESV_DEL_HOLD"};
  return kWaiting.count(base_state(state)) > 0;
}

ExitStatus slurm_exit_status(const std::string& state_in, const std::string& exit_code, const std::string& reason) {
  const std::string state = base_state(state_in);
  int rc = 0, sig = 0;
  {
    auto parts = split(exit_code, ':');
    if (!parts.empty()) parse_int(parts[0], rc);
    if (parts.size() > 1) parse_int(parts[1], sig);
  }
  const std::string why = reason.empty() || reason == "None" ? "" : " (" + reason + ")";
  ExitStatus s;
  if (state == "COMPLETED" || state == "FAILED") {
    if (sig > 0 && sig < 0x7f) {
      s = classify_exit(sig);
    } else {
      s = classify_exit((rc & 0xff) << 8);
      if (state == "FAILED" && rc == 0) {  // failed before the script ran (bad output path, ...)
        s.kind = ExitKind::failed;
        s.code = -1;
      }
    }
    s.detail = "Slurm " + state + ": " + s.detail + why;
  } else if (state == "CANCELLED") {
    s.kind = ExitKind::killed;
    s.signal = SIGTERM;
    s.detail = "cancelled in Slurm (scancel)" + why;
  } else if (state == "TIMEOUT") {
    s.kind = ExitKind::failed;
    s.detail = "Slurm TIMEOUT: time limit reached before the trainer wrote a checkpoint on the way out";
  } else if (state == "NODE_FAIL" || state == "BOOT_FAIL") {
    s.kind = ExitKind::lost;
    s.detail = "Slurm " + state + ": a node of the job failed" + why;
  } else if (state == "OUT_OF_MEMORY") {
    s.kind = ExitKind::out_of_memory;
    s.detail = "killed by the out-of-memory killer (Slurm OUT_OF_MEMORY: a step went past the job's memory limit, "
               "resources.mem); not retried: the same run needs the same memory: raise resources.mem or shrink "
               "the model, train.micro_batch_size or model.seq_len";
  } else if (state == "PREEMPTED") {
    s.kind = ExitKind::requeue;
    s.detail = "Slurm PREEMPTED: resumes from its last checkpoint";
  } else if (state == "DEADLINE") {
    s.kind = ExitKind::failed;
    s.detail = "Slurm DEADLINE: the job's deadline passed";
  } else {
    s.kind = ExitKind::lost;
    s.detail = "Slurm state " + (state.empty() ? std::string("unknown") : state) + why;
  }
  return s;
}

std::optional<int64_t> slurm_time_seconds(const std::string& text) {
  if (text.empty() || text == "INFINITE" || text == "UNLIMITED") return 0;
  int64_t days = 0;
  std::string rest = text;
  const size_t dash = rest.find('-');
  const bool has_days = dash != std::string::npos;
  std::vector<int64_t> parts;
  const auto number = [](const std::string& s) -> std::optional<int64_t> {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    return std::stoll(s);
  };
  if (has_days) {
    auto d = number(rest.substr(0, dash));
    if (!d) return std::nullopt;
    days = *d;
    rest = rest.substr(dash + 1);
  }
  std::istringstream in(rest);
  for (std::string field; std::getline(in, field, ':');) {
    auto v = number(field);
    if (!v) return std::nullopt;
    parts.push_back(*v);
  }
  if (parts.empty() || parts.size() > 3 || (!rest.empty() && rest.back() == ':')) return std::nullopt;
  int64_t h = 0, m = 0, sec = 0;
  if (has_days) {  // D-H, D-H:M, D-H:M:S
    h = parts[0];
    if (parts.size() > 1) m = parts[1];
    if (parts.size() > 2) sec = parts[2];
  } else if (parts.size() == 1) {  // M
    m = parts[0];
  } else if (parts.size() == 2) {  // M:S
    m = parts[0];
    sec = parts[1];
  } else {  // H:M:S
    h = parts[0];
    m = parts[1];
    sec = parts[2];
  }
  return ((days * 24 + h) * 60 + m) * 60 + sec;
}

}  // namespace precon::orch
