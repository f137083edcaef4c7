#include "tessera/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::io {
namespace {

[[noreturn]] void fail(std::string_view op, std::string_view what, const std::string& path,
                       int err) {
  throw RuntimeError(
      detail::str("[", op, "] expected to ", what, " '", path, "', got ", std::strerror(err)));
}

// The file behind fd, for error messages ("a file" when /proc cannot tell).
std::string fd_path(int fd) {
  std::error_code ec;
  const std::filesystem::path p =
      std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  return ec ? std::string("a file") : "'" + p.string() + "'";
}

}  // namespace

void write_all(int fd, const void* data, size_t nbytes, std::string_view op) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::write(fd, p, nbytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      throw RuntimeError(
          detail::str("[", op, "] expected to write ", fd_path(fd), ", got ", std::strerror(err)));
    }
    p += n;
    nbytes -= static_cast<size_t>(n);
  }
}

void write_file_atomic(const std::string& path, const std::function<void(int fd)>& write,
                       std::string_view op, unsigned mode) {
  std::string tmp_name = path + ".tmp.XXXXXX";
  std::vector<char> tmp(tmp_name.begin(), tmp_name.end());
  tmp.push_back('\0');
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) fail(op, "create a temp file beside", path, errno);
  tmp_name = tmp.data();
  bool closed = false;
  try {
    write(fd);
    if (::fsync(fd) != 0) fail(op, "fsync", tmp_name, errno);
    // mkstemp creates 0600; readers such as data loaders in other accounts expect 0644.
    ::fchmod(fd, static_cast<mode_t>(mode));
    closed = true;
    if (::close(fd) != 0) fail(op, "close", tmp_name, errno);
  } catch (...) {
    if (!closed) ::close(fd);
    ::unlink(tmp_name.c_str());
    throw;
  }
  if (::rename(tmp_name.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_name.c_str());
    fail(op, "rename a temp file to", path, err);
  }
  // Persist the rename itself.
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view data, std::string_view op,
                       unsigned mode) {
  write_file_atomic(
      path, [&](int fd) { write_all(fd, data.data(), data.size(), op); }, op, mode);
}

}  // namespace tessera::io
