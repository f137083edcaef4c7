#pragma once
// Atomic file replacement: readers see the old file or the complete new one, never a partial
// write, even if the process dies midway (write a temp file beside it, fsync, rename, fsync the
// folder).
#include <functional>
#include <string>
#include <string_view>

namespace tessera::io {

// Replaces path with the bytes written by write(fd), a file of permissions mode from its first
// byte (0600 keeps a secret private throughout); op names the caller in errors (RuntimeError
// with the system's message). The temp file is removed on failure.
void write_file_atomic(const std::string& path, const std::function<void(int fd)>& write,
                       std::string_view op, unsigned mode = 0644);
void write_file_atomic(const std::string& path, std::string_view data, std::string_view op,
                       unsigned mode = 0644);
// Writes all of data to fd, retrying short writes; RuntimeError naming op on failure.
void write_all(int fd, const void* data, size_t nbytes, std::string_view op);

}  // namespace tessera::io
