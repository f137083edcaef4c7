#pragma once
// Binds, serves and stops an httplib::Server so that stop() works at every point of startup.
// httplib's own stop() does nothing before its accept loop runs, so a SIGTERM while a server was
// still loading its model (or between bind and listen) was lost and the process served on. Used
// by `tessera serve` (serve::Server) and `tessera studio` (studio::Studio).
#include <atomic>
#include <string>

namespace httplib {
class Server;
}

namespace tessera::serve {

class Listener {
 public:
  // who names the owner in errors ("[Server]"); the listener configures http's sockets.
  Listener(httplib::Server& http, std::string who);
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Binds host:port (0: any free port) once and returns the port; RuntimeError when it cannot.
  int bind(const std::string& host, int port);
  // Serves until stop(), binding first if needed; returns at once if stop() came first.
  void run(const std::string& host, int port);
  // From any thread, before, during or after run(): run() returns (or never starts serving).
  void stop();
  bool stop_requested() const { return stop_requested_; }

 private:
  httplib::Server& http_;
  std::string who_;
  int port_ = 0;
  std::atomic<bool> stop_requested_{false};
  std::atomic<int> listen_fd_{-1};  // the last socket httplib configured: the listening one
};

}  // namespace tessera::serve
