// Which Host header values the server answers. A page on another site can point its own name at
// 127.0.0.1 (DNS rebinding) and then read the API as same-origin; the browser still sends that
// name as Host, so only names the operator knows are answered. Thread-safety: const after
// construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace precon::orch {

class HostCheck {
 public:
  // names: "name" (matched with the server's own port) or "name:port" (a URL the clients were
  // given, e.g. an advertise URL behind a forwarded port); IPv6 in brackets. Case-insensitive.
  // any_ip: also any IP literal at the server's port (a wildcard bind answers on every address,
  // and an address typed in the browser is no rebinding).
  HostCheck(std::vector<std::string> names, bool any_ip);

  // Whether a request with this Host header (nullopt: none) reaches the server listening on
  // `port`. A request without Host is answered only for HTTP/1.0, which had none.
  bool allows(std::optional<std::string_view> host, unsigned http_version, uint16_t port) const;

 private:
  std::vector<std::string> names_;
  bool any_ip_;
};

// "http://name:port/…" -> "name:port" (port 80 when absent), lowercased; "" when not http://.
std::string url_authority(const std::string& url);

}  // namespace precon::orch
