// How ProcessGroupMPI's tensors travel through MPI calls (see wire_mpi.h), and the chunk limit
// that tests lower to cover chunking with small tensors.
#include "dist/mpi/wire_mpi.h"

#include <algorithm>
#include <atomic>
#include <climits>

#include "tessera/dist/process_group_mpi.h"

namespace tessera::dist::detail {

bool reduces_in_float32(DType t) { return is_16bit_float(t); }

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
      return MPI_UINT8_T;
    case DType::Int8:
      return MPI_INT8_T;
    case DType::Int16:
      return MPI_INT16_T;
    case DType::Int32:
      return MPI_INT32_T;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::Float16:
    case DType::BFloat16:
      return MPI_UINT16_T;
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return t == kBool ? MPI_MAX : MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

std::vector<Chunk> chunks(int64_t n) {
  const int64_t limit = detail::max_chunk_elements();
  std::vector<Chunk> out;
  int64_t offset = 0;
  do {
    const int64_t count = std::min(limit, n - offset);
    out.push_back({offset, static_cast<int>(count)});
    offset += count;
  } while (offset < n);
  return out;
}

void* at(const Tensor& buf, int64_t offset) {
  return static_cast<char*>(buf.data_ptr()) + offset * static_cast<int64_t>(buf.element_size());
}

void spaced_type(OwnedType& out, MPI_Datatype base, int count, int64_t extent, size_t itemsize) {
  OwnedType piece;
  TESSERA_MPI_CHECK(MPI_Type_contiguous(count, base, &piece.type));
  TESSERA_MPI_CHECK(
      MPI_Type_create_resized(piece.type, 0, static_cast<MPI_Aint>(extent * itemsize), &out.type));
  TESSERA_MPI_CHECK(MPI_Type_commit(&out.type));
}

void divide(const Tensor& buf, int n) {
  const int64_t count = buf.numel();
  if (buf.dtype() == kFloat64) {
    double* p = static_cast<double*>(buf.data_ptr());
    for (int64_t i = 0; i < count; ++i) p[i] /= n;
  } else {
    TESSERA_ASSERT(buf.dtype() == kFloat32, "avg on ", buf.dtype());
    float* p = static_cast<float*>(buf.data_ptr());
    for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
  }
}

// ---- chunk limit ----

namespace {
std::atomic<int64_t> g_max_chunk_elements{INT_MAX};
}  // namespace

int64_t max_chunk_elements() { return g_max_chunk_elements.load(); }

int64_t set_max_chunk_elements(int64_t limit) {
  TESSERA_CHECK(limit >= 1 && limit <= INT_MAX, ValueError,
                "[set_max_chunk_elements] expected a limit in [1, ", INT_MAX, "], got ", limit);
  return g_max_chunk_elements.exchange(limit);
}

}  // namespace tessera::dist::detail
