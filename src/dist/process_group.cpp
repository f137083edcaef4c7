#include "tessera/dist/process_group.h"

#include <cstdlib>
#include <string>

namespace tessera::dist {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

std::chrono::milliseconds default_timeout() {
  if (const char* s = std::getenv("TESSERA_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(s, &end);
    TESSERA_CHECK(end != s && *end == '\0' && seconds > 0, ValueError,
                  "[dist] expected TESSERA_DIST_TIMEOUT to be a positive number of seconds, got '",
                  s, "'");
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  return std::chrono::minutes(10);
}

bool default_debug() {
  const char* s = std::getenv("TESSERA_DIST_DEBUG");
  return s != nullptr && std::string_view(s) != "" && std::string_view(s) != "0";
}

ProcessGroup::ProcessGroup(int rank, int size, std::string name)
    : rank_(rank),
      size_(size),
      name_(std::move(name)),
      timeout_(default_timeout()),
      debug_(default_debug()) {}

std::string ProcessGroup::where() const {
  return detail::str("group '", name_, "' (rank ", rank_, " of ", size_, ")");
}

namespace detail {

void check_tensor(std::string_view op, const Tensor& t, const char* what) {
  TESSERA_CHECK(t.defined(), ValueError, "[", op, "] expected a defined ", what,
                " tensor, got an undefined handle");
  TESSERA_CHECK(t.device().is_cpu(), ValueError, "[", op, "] expected a CPU ", what,
                " tensor (the MPI backend), got one on ", t.device());
}

void check_reduce_dtype(std::string_view op, DType dtype, ReduceOp reduce) {
  TESSERA_CHECK(reduce != ReduceOp::Avg || is_floating(dtype), TypeError, "[", op,
                "] expected a floating dtype for ReduceOp avg, got ", dtype);
}

void check_peer(std::string_view op, const ProcessGroup& pg, int peer, const char* what) {
  TESSERA_CHECK(peer >= 0 && peer < pg.size(), IndexError, "[", op, "] expected ", what, " in [0, ",
                pg.size(), ") for group '", pg.name(), "', got ", peer);
}

std::string describe(const Tensor& t) { return str(t.dtype(), t.sizes()); }

}  // namespace detail
}  // namespace tessera::dist
