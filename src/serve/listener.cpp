#include "tessera/serve/listener.h"

#include <httplib.h>
#include <sys/socket.h>

#include "tessera/core/error.h"

namespace tessera::serve {

Listener::Listener(httplib::Server& http, std::string who) : http_(http), who_(std::move(who)) {
  http_.set_socket_options([this](socket_t sock) {
    // SO_REUSEADDR for a quick restart over connections in TIME_WAIT, but not httplib's default
    // SO_REUSEPORT, with which a second server bound the same port and took half the clients.
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_ = sock;
  });
}

int Listener::bind(const std::string& host, int port) {
  if (port_ > 0) return port_;
  const int got =
      port == 0 ? http_.bind_to_any_port(host) : (http_.bind_to_port(host, port) ? port : -1);
  TESSERA_CHECK(got > 0, RuntimeError, who_, " expected to listen on ", host, ":", port,
                ", got a port in use or not allowed");
  // httplib listens with a backlog of 5: a burst of clients (32 streams at once) overflows it
  // and the kernel drops their handshakes. Listening again on Linux just resizes the queue.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  port_ = got;
  // A stop() that came before the socket existed had nothing to shut down.
  if (stop_requested_ && listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  return port_;
}

void Listener::run(const std::string& host, int port) {
  if (stop_requested_) return;
  bind(host, port);
  if (!stop_requested_) http_.listen_after_bind();
}

void Listener::stop() {
  if (stop_requested_.exchange(true)) return;
  if (http_.is_running())
    http_.stop();
  else if (listen_fd_ >= 0)
    // Before the accept loop: a shut-down socket ends that loop at its first accept.
    ::shutdown(listen_fd_, SHUT_RDWR);
}

}  // namespace tessera::serve
