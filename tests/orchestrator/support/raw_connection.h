// A raw client socket for the HTTP tests: what a well-behaved client cannot do (stall, send
// garbage, hold a connection, reuse one by hand).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <string>

namespace precon::orch::testing {

// A blocking POSIX connection with receive/send timeouts, for what a well-behaved client
// cannot do: stall, send garbage, reuse one connection by hand.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawConnection() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool send(const std::string& data) {
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  // One whole response (headers and Content-Length body); "" on EOF or timeout.
  std::string read_response() {
    for (;;) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::string head = buffer_.substr(0, end);
        for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const size_t at = head.find("content-length:");
        const size_t length = at == std::string::npos ? 0 : std::stoul(head.substr(at + 15));
        if (buffer_.size() >= end + 4 + length) {
          std::string response = buffer_.substr(0, end + 4 + length);
          buffer_.erase(0, end + 4 + length);
          return response;
        }
      }
      if (!receive()) return "";
    }
  }
  // A response's header only ("" on EOF or timeout); what follows stays buffered.
  std::string read_head() {
    for (;;) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::string head = buffer_.substr(0, end + 4);
        buffer_.erase(0, end + 4);
        return head;
      }
      if (!receive()) return "";
    }
  }
  // Everything the server sends until it closes the connection; false in *closed on a timeout.
  std::string read_until_closed(bool* closed) {
    std::string all = std::move(buffer_);
    buffer_.clear();
    for (;;) {
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n > 0) {
        all.append(chunk, static_cast<size_t>(n));
        continue;
      }
      *closed = n == 0 || errno == ECONNRESET;
      return all;
    }
  }
  // True when the server closes the connection (EOF or reset) before the receive timeout.
  bool closed_by_peer() {
    for (;;) {
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

 private:
  bool receive() {
    char chunk[4096];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

inline int status_of(const std::string& response) { return response.size() > 12 ? std::stoi(response.substr(9, 3)) : 0; }
inline std::string body_of(const std::string& response) { return response.substr(response.find("\r\n\r\n") + 4); }

}  // namespace precon::orch::testing
