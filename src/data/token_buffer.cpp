#include "tessera/data/token_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "tessera/io/atomic_file.h"
#include "tessera/core/error.h"
#include "tessera/ops/creation.h"

namespace tessera::data {
namespace {

int64_t token_bytes(TokenFormat f) { return f == TokenFormat::UInt16 ? 2 : 4; }

// Closes a descriptor on every path out of read_token_file.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

TokenBuffer TokenBuffer::from_ids(std::span<const int32_t> ids) {
  Tensor t = empty({static_cast<int64_t>(ids.size())}, TensorOptions(kInt32));
  int32_t* dst = t.data_ptr<int32_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    TESSERA_CHECK(ids[i] >= 0, ValueError, "[TokenBuffer.from_ids] expected token ids >= 0, got ",
                  ids[i], " at position ", i);
    dst[i] = ids[i];
  }
  return TokenBuffer(t.impl()->storage(), 0, static_cast<int64_t>(ids.size()), TokenFormat::UInt32);
}

const uint8_t* TokenBuffer::base() const {
  return static_cast<const uint8_t*>(storage_->data()) + byte_offset_;
}

int64_t TokenBuffer::at(int64_t i) const {
  TESSERA_CHECK(i >= 0 && i < size_, IndexError, "[TokenBuffer.at] expected an index in [0, ",
                size_, "), got ", i);
  if (format_ == TokenFormat::UInt16) {
    uint16_t v;
    std::memcpy(&v, base() + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, base() + 4 * i, 4);
  return v;
}

TokenBuffer TokenBuffer::slice(int64_t start, int64_t end) const {
  TESSERA_CHECK(0 <= start && start <= end && end <= size_, IndexError,
                "[TokenBuffer.slice] expected 0 <= start <= end <= ", size_, ", got start ", start,
                " and end ", end);
  return TokenBuffer(storage_, byte_offset_ + start * token_bytes(format_), end - start, format_);
}

std::pair<TokenBuffer, TokenBuffer> TokenBuffer::split(double val_fraction) const {
  TESSERA_CHECK(val_fraction >= 0.0 && val_fraction <= 1.0, ValueError,
                "[TokenBuffer.split] expected val_fraction in [0, 1], got ", val_fraction);
  const auto n_train = static_cast<int64_t>(static_cast<double>(size_) * (1.0 - val_fraction));
  return {slice(0, n_train), slice(n_train, size_)};
}

void TokenBuffer::copy_to(int64_t start, int64_t n, int64_t* out) const {
  TESSERA_CHECK(start >= 0 && n >= 0 && start + n <= size_, IndexError,
                "[TokenBuffer.window] expected a range inside [0, ", size_, "), got start ", start,
                " and length ", n);
  if (n == 0) return;  // also covers the storage-less empty buffer
  // Token data need not be aligned (slices of uint16 files start anywhere), hence memcpy.
  const uint8_t* p = base() + start * token_bytes(format_);
  if (format_ == TokenFormat::UInt16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = v;
    }
  }
}

Tensor TokenBuffer::window(int64_t start, int64_t n) const {
  TESSERA_CHECK(n >= 0, ValueError, "[TokenBuffer.window] expected a length >= 0, got ", n);
  Tensor t = empty({n}, TensorOptions(kInt64));
  copy_to(start, n, t.data_ptr<int64_t>());
  return t;
}

Tensor TokenBuffer::as_tensor() const {
  TESSERA_CHECK(format_ == TokenFormat::UInt32, TypeError,
                "[TokenBuffer.as_tensor] expected uint32 tokens for a zero-copy int32 view, got ",
                "uint16 tokens (use window() to copy them into int64)");
  if (!storage_) return empty({0}, TensorOptions(kInt32));
  TESSERA_ASSERT(byte_offset_ % 4 == 0);
  return Tensor(
      std::make_shared<TensorImpl>(storage_, Shape{size_}, Shape{1}, byte_offset_ / 4, kInt32));
}

std::vector<int32_t> TokenBuffer::to_vector() const {
  std::vector<int64_t> wide(size_);
  copy_to(0, size_, wide.data());
  return std::vector<int32_t>(wide.begin(), wide.end());
}

TokenBuffer read_token_file(const std::string& path) {
  constexpr std::string_view op = "read_token_file";
  FdCloser fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  TESSERA_CHECK(fd.fd >= 0, RuntimeError, "[", op, "] expected a readable file, got '", path, "' (",
                std::strerror(errno), ")");
  struct stat st {};
  TESSERA_CHECK(::fstat(fd.fd, &st) == 0, RuntimeError, "[", op, "] expected to stat '", path,
                "', got ", std::strerror(errno));
  const auto file_bytes = static_cast<int64_t>(st.st_size);
  TESSERA_CHECK(file_bytes >= kTokenFileHeaderBytes, ValueError, "[", op,
                "] expected a file of at least ", kTokenFileHeaderBytes,
                " bytes (the llm.c header), got ", file_bytes, " bytes in '", path, "'");
  std::array<int32_t, 256> header{};
  TESSERA_CHECK(::pread(fd.fd, header.data(), sizeof(header), 0) == sizeof(header), RuntimeError,
                "[", op, "] expected to read the header of '", path, "', got ",
                std::strerror(errno));
  TokenFormat format;
  if (header[0] == kTokenFileMagicUInt16) {
    format = TokenFormat::UInt16;
    TESSERA_CHECK(header[1] == kTokenFileVersionUInt16, ValueError, "[", op, "] expected version ",
                  kTokenFileVersionUInt16, " for magic ", header[0], " in '", path, "', got ",
                  header[1]);
  } else if (header[0] == kTokenFileMagicUInt32) {
    format = TokenFormat::UInt32;
    TESSERA_CHECK(header[1] == kTokenFileVersionUInt32, ValueError, "[", op, "] expected version ",
                  kTokenFileVersionUInt32, " for magic ", header[0], " in '", path, "', got ",
                  header[1]);
  } else {
    throw ValueError(detail::str("[", op, "] expected magic ", kTokenFileMagicUInt16, " (uint16) ",
                                 "or ", kTokenFileMagicUInt32, " (uint32) in '", path, "', got ",
                                 header[0]));
  }
  const int64_t count = header[2];
  const int64_t expected = kTokenFileHeaderBytes + count * token_bytes(format);
  TESSERA_CHECK(count >= 0 && file_bytes == expected, ValueError, "[", op, "] expected ", expected,
                " bytes for the ", count, " tokens the header of '", path, "' declares, got ",
                file_bytes, " bytes");
  // MAP_PRIVATE + PROT_WRITE: tensor views may be written (copy-on-write) without touching the
  // file or faulting on read-only pages.
  void* addr = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE,
                      fd.fd, 0);
  TESSERA_CHECK(addr != MAP_FAILED, RuntimeError, "[", op, "] expected to map '", path, "', got ",
                std::strerror(errno));
  auto storage = std::make_shared<StorageImpl>(
      addr, static_cast<size_t>(file_bytes), kCPU,
      [file_bytes](void* p) { ::munmap(p, static_cast<size_t>(file_bytes)); });
  return TokenBuffer(std::move(storage), kTokenFileHeaderBytes, count, format);
}

void write_token_file(const std::string& path, std::span<const int32_t> tokens,
                      TokenFormat format) {
  constexpr std::string_view op = "write_token_file";
  const int64_t limit = format == TokenFormat::UInt16 ? (int64_t{1} << 16) : (int64_t{1} << 31);
  for (size_t i = 0; i < tokens.size(); ++i) {
    TESSERA_CHECK(tokens[i] >= 0 && tokens[i] < limit, ValueError, "[", op,
                  "] expected tokens in [0, ", limit, ") for ",
                  format == TokenFormat::UInt16 ? "uint16" : "uint32", " files, got ", tokens[i],
                  " at position ", i);
  }
  TESSERA_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX), ValueError, "[", op,
                "] expected at most ", INT32_MAX, " tokens (the header's int32 count), got ",
                tokens.size());
  std::array<int32_t, 256> header{};
  const bool u16 = format == TokenFormat::UInt16;
  header[0] = u16 ? kTokenFileMagicUInt16 : kTokenFileMagicUInt32;
  header[1] = u16 ? kTokenFileVersionUInt16 : kTokenFileVersionUInt32;
  header[2] = static_cast<int32_t>(tokens.size());
  io::write_file_atomic(
      path,
      [&](int fd) {
        io::write_all(fd, header.data(), sizeof(header), op);
        if (!u16) {
          io::write_all(fd, tokens.data(), tokens.size_bytes(), op);
          return;
        }
        std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
        io::write_all(fd, narrow.data(), narrow.size() * 2, op);
      },
      op);
}

TokenBuffer tokenize_text(std::string_view text, const tokenizers::Tokenizer& tokenizer) {
  return TokenBuffer::from_ids(tokenizer.encode(text));
}

}  // namespace tessera::data
