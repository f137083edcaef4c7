#pragma once
// How ProcessGroupMPI's tensors travel through MPI calls: element types and reduce ops, chunks of
// at most max_chunk_elements(), derived datatypes, and the division that makes a sum an average.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/mpi/mpi_check.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist::detail {

// 16-bit floats travel as raw uint16 (MPI has no such type) and are reduced in a float32
// staging copy: one rounding at the end instead of one per reduction step. Bools are 0/1 bytes,
// so max is a logical or and min a logical and.
bool reduces_in_float32(DType t);
MPI_Datatype mpi_type(DType t);
MPI_Op mpi_op(ReduceOp op, DType t);

// A piece [offset, offset + count) of a buffer. MPI counts are int, so a larger tensor travels in
// several calls of at most max_chunk_elements() each, all in one PendingOp.
struct Chunk {
  int64_t offset;
  int count;
};

// The chunks that cover n elements; one empty chunk when n is 0, so that every rank still takes
// part in the collective. Every rank must use the same limit.
std::vector<Chunk> chunks(int64_t n);

// The address of element `offset` of a contiguous buffer.
void* at(const Tensor& buf, int64_t offset);

// A committed derived datatype, freed at scope exit (MPI keeps it alive for the calls that
// were posted with it). Constructed and destroyed under mpi_lock().
struct OwnedType {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  ~OwnedType() {
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
  }
};

// `count` elements of `base` as one element whose extent is `extent` elements: chunk c of every
// rank's block of an all_gather lands `extent` elements (one block) apart.
void spaced_type(OwnedType& out, MPI_Datatype base, int count, int64_t extent, size_t itemsize);

// Sum -> mean, in place on a contiguous floating buffer.
void divide(const Tensor& buf, int n);

}  // namespace tessera::dist::detail
