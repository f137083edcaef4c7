#pragma once
// Read-only views of files for the io readers: a whole file memory-mapped into a Storage (so
// tensors can view it without copying), plus a CRC-32C over files for checkpoint verification.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "tessera/core/storage.h"
#include "tessera/core/tensor.h"

namespace tessera::io::detail {

// The bytes of a file, mapped copy-on-write (MAP_PRIVATE, PROT_READ | PROT_WRITE): tensor views
// may be written without touching the file. The mapping lives as long as the storage.
// RuntimeError naming op when the file cannot be opened or mapped; an empty file maps to a
// storage of size 0.
struct MappedFile {
  Storage storage;
  const uint8_t* data() const { return static_cast<const uint8_t*>(storage->data()); }
  size_t size() const { return storage->nbytes(); }
};
MappedFile map_file(const std::string& path, std::string_view op);

// Hands out consecutive tensors of one dtype viewing a mapped file, from byte `offset` on (the
// importers' raw parameter blobs). ValueError naming op when a tensor would pass the file's end.
class TensorReader {
 public:
  TensorReader(MappedFile file, size_t offset, DType dtype, std::string_view op)
      : file_(std::move(file)), offset_(offset), dtype_(dtype), op_(op) {}
  Tensor next(const Shape& shape);
  size_t offset() const { return offset_; }

 private:
  MappedFile file_;
  size_t offset_;
  DType dtype_;
  std::string op_;
};

// CRC-32C (Castagnoli, as iSCSI/ext4), continuing from crc (0 to start). Uses the SSE4.2
// instruction when compiled for it, else slicing-by-8 tables; both give the same value.
uint32_t crc32c(const void* data, size_t nbytes, uint32_t crc = 0);
// The table version alone (what crc32c uses without SSE4.2), kept testable on every build.
uint32_t crc32c_portable(const void* data, size_t nbytes, uint32_t crc = 0);
// CRC-32C of a whole file (RuntimeError naming op if it cannot be read).
uint32_t crc32c_file(const std::string& path, std::string_view op);

}  // namespace tessera::io::detail
