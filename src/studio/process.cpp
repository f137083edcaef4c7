#include "tessera/studio/process.h"

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "tessera/core/error.h"

namespace tessera::studio {

int spawn_process(const std::vector<std::string>& argv, const std::string& log_path) {
  if (argv.empty()) throw ValueError("[studio.services] expected a program to run, got none");
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0)
    throw RuntimeError("[studio.services] expected to open the log '" + log_path + "', got " +
                       std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    throw RuntimeError(std::string("[studio.services] expected fork to succeed, got ") +
                       std::strerror(errno));
  }
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    ::setsid();
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the studio may block signals; serve must not
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execv(args[0], args.data());
    const char msg[] = "studio: exec failed\n";
    (void)!::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  ::close(log);
  return pid;
}

bool process_alive(int pid) {
  if (pid <= 0) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == pid) return false;  // our child, exited and now reaped
  if (::kill(pid, 0) != 0) return false;
  // A process adopted after a studio restart is not our child: a zombie still answers kill().
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string field;
  for (int i = 0; i < 3 && stat >> field; ++i) {
  }
  return field != "Z";
}

std::string process_command_line(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

void stop_process(int pid, std::chrono::milliseconds grace) {
  if (!process_alive(pid)) return;
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (process_alive(pid)) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      for (int i = 0; i < 100 && process_alive(pid); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  if (port == 0) throw RuntimeError("[studio.services] expected a free port, got none");
  return port;
}

std::string probe_health(int port, std::chrono::milliseconds timeout) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(timeout);
  c.set_read_timeout(timeout);
  const auto res = c.Get("/health");
  if (!res) return "unresponsive";
  return res->status == 200 ? "ok" : res->status == 503 ? "shutting_down" : "unresponsive";
}

bool wait_healthy(int port, int pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!process_alive(pid)) return false;
    if (probe_health(port, std::chrono::seconds(2)) == "ok") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string tail_file(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > static_cast<std::streamoff>(max_bytes)
                                   ? size - static_cast<std::streamoff>(max_bytes)
                                   : 0;
  in.seekg(start);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tessera::studio
