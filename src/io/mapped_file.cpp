#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

#include "tessera/core/error.h"

namespace tessera::io::detail {

MappedFile map_file(const std::string& path, std::string_view op) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TESSERA_CHECK(fd >= 0, RuntimeError, "[", op, "] expected a readable file '", path, "', got ",
                std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    throw RuntimeError(
        tessera::detail::str("[", op, "] expected a regular file '", path, "', got ",
                             S_ISDIR(st.st_mode) ? "a directory" : std::strerror(err)));
  }
  const size_t nbytes = static_cast<size_t>(st.st_size);
  if (nbytes == 0) {
    ::close(fd);
    return {std::make_shared<StorageImpl>(nullptr, 0, kCPU, [](void*) {})};
  }
  void* addr = ::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file referenced
  TESSERA_CHECK(addr != MAP_FAILED, RuntimeError, "[", op, "] expected to map '", path, "', got ",
                std::strerror(err));
  return {std::make_shared<StorageImpl>(addr, nbytes, kCPU,
                                        [nbytes](void* p) { ::munmap(p, nbytes); })};
}

Tensor TensorReader::next(const Shape& shape) {
  const size_t size = static_cast<size_t>(shape_numel(shape)) * itemsize(dtype_);
  TESSERA_CHECK(offset_ + size <= file_.size(), ValueError, "[", op_, "] expected ", size,
                " more bytes for a ", dtype_, " tensor of shape ", shape, " at byte ", offset_,
                ", got a file of ", file_.size(), " bytes (truncated?)");
  TESSERA_ASSERT(offset_ % itemsize(dtype_) == 0, "importer tensors are aligned");
  Tensor t(std::make_shared<TensorImpl>(file_.storage, shape, contiguous_strides(shape),
                                        static_cast<int64_t>(offset_ / itemsize(dtype_)), dtype_));
  offset_ += size;
  return t;
}

namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

// tables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;
const Tables& crc_tables() {
  static const Tables tables = [] {
    Tables t{};
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPolyReflected : 0u);
      t[0][b] = c;
    }
    for (size_t k = 1; k < 8; ++k)
      for (size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
    return t;
  }();
  return tables;
}

}  // namespace

uint32_t crc32c_portable(const void* data, size_t nbytes, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  const Tables& t = crc_tables();
  uint32_t c = ~crc;
  for (; nbytes >= 8; p += 8, nbytes -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian: byte 0 is the low byte
    word ^= c;
    c = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^
        t[4][(word >> 24) & 0xFF] ^ t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^
        t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
  }
  for (; nbytes > 0; ++p, --nbytes) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFF];
  return ~c;
}

uint32_t crc32c(const void* data, size_t nbytes, uint32_t crc) {
#if defined(__SSE4_2__)
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  for (; nbytes >= 8; p += 8, nbytes -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; nbytes > 0; ++p, --nbytes) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
#else
  return crc32c_portable(data, nbytes, crc);
#endif
}

uint32_t crc32c_file(const std::string& path, std::string_view op) {
  MappedFile file = map_file(path, op);
  return crc32c(file.data(), file.size());
}

}  // namespace tessera::io::detail
