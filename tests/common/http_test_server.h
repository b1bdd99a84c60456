// HTTP servers for the tests of clients (the worker's HTTP client and reporter, the controller's
// client): a small Boost.Beast server on 127.0.0.1 in the test's process, which answers every
// request through a handler and can go down and come back on its port, and a listener that never
// accepts. Header-only: only the tests that use it pull Beast in.
// Thread-safety: the handler runs on the server's one io thread; the methods may be called from
// any other thread.
#pragma once

// GCC 12 in C++20 mode needs <utility> ahead of Boost.Asio's headers.
#include <utility>

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace precon::test {

using TestRequest = boost::beast::http::request<boost::beast::http::string_body>;
using TestResponse = boost::beast::http::response<boost::beast::http::string_body>;

// Answers each request with handler(request, response) on an ephemeral port of 127.0.0.1; the
// response starts as 200 with the request's HTTP version, and keeps the connection alive when the
// request asks to.
class TestHttpServer {
 public:
  using Handler = std::function<void(const TestRequest&, TestResponse&)>;

  explicit TestHttpServer(Handler handler) : handler_(std::move(handler)) {
    listen(0);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TestHttpServer() {
    work_.reset();
    io_.stop();
    thread_.join();
  }
  TestHttpServer(const TestHttpServer&) = delete;
  TestHttpServer& operator=(const TestHttpServer&) = delete;

  uint16_t port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_; }  // connections accepted so far

  // Stops listening and closes open connections: connections are refused until come_up().
  void go_down() {
    on_io([this] {
      boost::beast::error_code ignored;
      acceptor_.close(ignored);
      close_sessions();
    });
  }
  // Listens again, on the same port.
  void come_up() {
    on_io([this] { listen(port_); });
  }
  // Closes kept-alive connections, as a server does with idle ones, but keeps listening.
  void drop_connections() {
    on_io([this] { close_sessions(); });
  }

 private:
  using tcp = boost::asio::ip::tcp;

  struct Session : std::enable_shared_from_this<Session> {
    Session(tcp::socket s, const Handler& h) : socket(std::move(s)), handler(h) {}
    void read() {
      request = {};
      boost::beast::http::async_read(socket, buffer, request,
                                     [self = shared_from_this()](boost::beast::error_code ec, size_t) {
                                       if (!ec) self->reply();
                                     });
    }
    void reply() {
      response = {};
      response.version(request.version());
      response.result(200);
      handler(request, response);
      response.keep_alive(request.keep_alive());
      response.prepare_payload();
      boost::beast::http::async_write(socket, response, [self = shared_from_this()](boost::beast::error_code ec, size_t) {
        if (!ec && self->response.keep_alive()) self->read();
      });
    }
    tcp::socket socket;
    const Handler& handler;
    boost::beast::flat_buffer buffer;
    TestRequest request;
    TestResponse response;
  };

  // Runs f on the io thread and waits for it.
  void on_io(const std::function<void()>& f) {
    std::promise<void> done;
    boost::asio::post(io_, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
  void listen(uint16_t port) {
    acceptor_.open(tcp::v4());
    acceptor_.set_option(boost::asio::socket_base::reuse_address(true));
    acceptor_.bind({boost::asio::ip::make_address("127.0.0.1"), port});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept();
  }
  void accept() {
    acceptor_.async_accept([this](boost::beast::error_code ec, tcp::socket socket) {
      if (ec) return;
      ++accepted_;
      auto session = std::make_shared<Session>(std::move(socket), handler_);
      sessions_.push_back(session);
      session->read();
      accept();
    });
  }
  void close_sessions() {
    for (auto& weak : sessions_) {
      if (auto s = weak.lock()) {
        boost::beast::error_code ignored;
        s->socket.shutdown(tcp::socket::shutdown_both, ignored);
        s->socket.close(ignored);
      }
    }
    sessions_.clear();
  }

  Handler handler_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ = boost::asio::make_work_guard(io_);
  tcp::acceptor acceptor_{io_};
  uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::vector<std::weak_ptr<Session>> sessions_;  // io thread only
  std::thread thread_;
};

// Listening on an ephemeral port of 127.0.0.1 but never accepting: connecting succeeds (the
// kernel's backlog) and no answer comes. Once it is gone, connections to its port are refused.
class SilentListener {
 public:
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port()); }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_{io_, {boost::asio::ip::make_address("127.0.0.1"), 0}};
};

}  // namespace precon::test
