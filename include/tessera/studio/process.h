#pragma once
// Child processes for the studio's services: `tessera serve` started in its own session (so a
// Ctrl-C to the studio does not reach it, and it outlives a studio restart, which adopts it again
// by pid), its stdout and stderr appended to a log file.
#include <chrono>
#include <string>
#include <vector>

namespace tessera::studio {

// Starts argv[0] with argv, output appended to log_path; returns the pid. RuntimeError when
// the program cannot be started (the log then says why).
int spawn_process(const std::vector<std::string>& argv, const std::string& log_path);
// Whether pid is a live process (reaps it when it is our exited child).
bool process_alive(int pid);
// The process's command line, arguments joined by spaces ("" when it is gone).
std::string process_command_line(int pid);
// SIGTERM, then SIGKILL after grace; returns once the process is gone (or grace * 2 passed).
void stop_process(int pid, std::chrono::milliseconds grace);
// A TCP port free on 127.0.0.1 now (the kernel's choice).
int free_port();
// What GET http://127.0.0.1:port/health answers within timeout: "ok" (200), "shutting_down"
// (503: the server is draining) or "unresponsive" (no answer, or another status).
std::string probe_health(int port, std::chrono::milliseconds timeout);
// Probes /health until "ok" or timeout; false on timeout or when pid exits first.
bool wait_healthy(int port, int pid, std::chrono::milliseconds timeout);
// The last max_bytes of a file ("" when it does not exist).
std::string tail_file(const std::string& path, size_t max_bytes);

}  // namespace tessera::studio
