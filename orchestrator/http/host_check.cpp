#include "orchestrator/http/host_check.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <utility>

namespace precon::orch {

namespace {

std::string lowered(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// "name:port" / "[v6]:port" / "name" -> (name, port); port 80 when absent, -1 when malformed.
std::pair<std::string, long> split_host(std::string_view host) {
  size_t colon = std::string_view::npos;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return {"", -1};
    if (close + 1 < host.size()) {
      if (host[close + 1] != ':') return {"", -1};
      colon = close + 1;
    }
  } else {
    colon = host.rfind(':');
  }
  if (colon == std::string_view::npos) return {lowered(host), 80};
  const std::string_view digits = host.substr(colon + 1);
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (digits.empty() || digits.size() > 5 || !std::all_of(digits.begin(), digits.end(), digit)) return {"", -1};
  return {lowered(host.substr(0, colon)), std::stol(std::string(digits))};
}

bool ip_literal(const std::string& name) {
  unsigned char buf[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, name.c_str(), buf) == 1) return true;
  return name.size() > 2 && name.front() == '[' && name.back() == ']' &&
         ::inet_pton(AF_INET6, name.substr(1, name.size() - 2).c_str(), buf) == 1;
}

}  // namespace

HostCheck::HostCheck(std::vector<std::string> names, bool any_ip) : any_ip_(any_ip) {
  for (const std::string& n : names) names_.push_back(lowered(n));
}

bool HostCheck::allows(std::optional<std::string_view> host, unsigned http_version, uint16_t port) const {
  if (!host) return http_version == 10;
  const auto [name, host_port] = split_host(*host);
  if (host_port < 0 || name.empty()) return false;
  const std::string exact = name + ":" + std::to_string(host_port);
  for (const std::string& allowed : names_) {
    if (allowed == exact) return true;
    if (allowed == name && host_port == port) return true;
  }
  return any_ip_ && host_port == port && ip_literal(name);
}

std::string url_authority(const std::string& url) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) return "";
  const std::string rest = url.substr(scheme.size());
  const std::string authority = rest.substr(0, rest.find_first_of("/?#"));
  const auto [name, port] = split_host(authority);
  return port < 0 || name.empty() ? "" : name + ":" + std::to_string(port);
}

}  // namespace precon::orch
