// ClientFrom: a client connection from a chosen loopback source address, for the HTTP tests that
// are several clients at once.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "tests/orchestrator/support/raw_connection.h"

namespace precon::orch::testing {

// A connection from a chosen loopback source address (127.0.0.0/8 is all loopback on Linux), so
// that one test can be several clients. Blocking, with 5 s timeouts.
class ClientFrom {
 public:
  ClientFrom(const char* source, uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0 &&
                 ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
  }
  ~ClientFrom() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool send(const std::string& data) {
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  // Everything until the server closes the connection or 5 s pass; *closed (when given) says which.
  std::string read_all(bool* closed = nullptr) {
    std::string all;
    char chunk[4096];
    ssize_t n;
    while ((n = ::recv(fd_, chunk, sizeof chunk, 0)) > 0) all.append(chunk, static_cast<size_t>(n));
    if (closed) *closed = n == 0 || errno == ECONNRESET;
    return all;
  }
  // One GET on this connection (kept alive); the status, 0 when nothing came back.
  int get(const std::string& target) {
    if (!send("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")) return 0;
    std::string got;
    char chunk[4096];
    while (got.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return 0;
      got.append(chunk, static_cast<size_t>(n));
    }
    return status_of(got);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace precon::orch::testing
