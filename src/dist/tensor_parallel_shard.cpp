// Slicing of master tensors: every TP layer keeps its rank's slice of the full tensor a single
// process would hold, so a TP run starts exactly where the single-process run starts.
#include "dist/tensor_parallel_internal.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/shape.h"

namespace tessera::dist {

namespace {

void check_slices(std::string_view op, const Tensor& master, int rank, int size) {
  TESSERA_CHECK(master.defined(), ValueError, "[", op, "] expected a master tensor, got undefined");
  TESSERA_CHECK(size >= 1 && rank >= 0 && rank < size, ValueError, "[", op,
                "] expected 0 <= rank < size, got rank ", rank, " of size ", size);
}

}  // namespace

Tensor shard_tensor(const Tensor& master, int64_t dim, int rank, int size) {
  constexpr const char* op = "shard_tensor";
  check_slices(op, master, rank, size);
  TESSERA_CHECK(master.dim() >= 1, ValueError, "[", op, "] expected a master with at least 1 dim",
                ", got ", master.sizes());
  const int64_t d = detail::normalize_dim(op, dim, master.dim());
  TESSERA_CHECK(master.size(d) % size == 0, ValueError, "[", op, "] expected dim ", d, " of ",
                master.sizes(), " divisible by ", size, " slices, got ", master.size(d));
  autograd::NoGradGuard ng;
  const int64_t n = master.size(d) / size;
  return master.detach().narrow(d, rank * n, n).clone();
}

Tensor shard_fused_rows(const Tensor& master, const std::vector<int64_t>& parts, int rank,
                        int size) {
  constexpr const char* op = "shard_fused_rows";
  check_slices(op, master, rank, size);
  TESSERA_CHECK(master.dim() >= 1, ValueError, "[", op, "] expected a master with at least 1 dim",
                ", got ", master.sizes());
  if (parts.empty()) return shard_tensor(master, 0, rank, size);
  int64_t total = 0;
  for (int64_t p : parts) {
    TESSERA_CHECK(p >= 0 && p % size == 0, ValueError, "[", op, "] expected parts ", parts,
                  " each divisible by ", size, " slices, got ", p);
    total += p;
  }
  TESSERA_CHECK(total == master.size(0), ValueError, "[", op, "] expected parts ", parts,
                " to sum to dim 0 of ", master.sizes(), ", got ", total);
  autograd::NoGradGuard ng;
  TensorList slices;
  int64_t offset = 0;
  for (int64_t p : parts) {
    const int64_t n = p / size;
    slices.push_back(master.detach().narrow(0, offset + rank * n, n));
    offset += p;
  }
  return cat(slices, 0);
}

int64_t pad_to_multiple(int64_t n, int64_t multiple) {
  TESSERA_CHECK(n >= 0 && multiple >= 1, ValueError,
                "[pad_to_multiple] expected n >= 0 and multiple >= 1, got n ", n, " and multiple ",
                multiple);
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace tessera::dist
