#include "tessera/dist/process_group_mpi.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "dist/mpi/work_mpi.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"

namespace tessera::dist {

struct ProcessGroupMPI::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
};

namespace {

bool g_we_initialized = false;
std::mutex g_world_mutex;
std::shared_ptr<ProcessGroupMPI> g_world;

// 16-bit floats travel as raw uint16 (MPI has no such type) and are reduced in a float32
// staging copy: one rounding at the end instead of one per reduction step. Bools are 0/1 bytes,
// so max is a logical or and min a logical and.
bool reduces_in_float32(DType t) { return t == kFloat16 || t == kBFloat16; }

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

int count_of(std::string_view op, int64_t numel) {
  TESSERA_CHECK(numel <= INT_MAX, ValueError, "[", op, "] expected at most ", INT_MAX,
                " elements per call (MPI counts are int), got ", numel);
  return static_cast<int>(numel);
}

// A contiguous buffer of dtype `wire` for t: t itself when it already is one, else a new tensor,
// holding t's values when copy_in.
Tensor staging(const Tensor& t, DType wire, bool copy_in) {
  if (t.dtype() == wire && t.is_contiguous()) return t;
  Tensor buf = empty(t.sizes(), TensorOptions(wire));
  if (copy_in) {
    autograd::NoGradGuard no_grad;
    buf.copy_(t);
  }
  return buf;
}

// Writes a staging buffer back into the caller's tensor (casting float32 back to 16 bits).
void copy_back(const Tensor& dst, const Tensor& buf) {
  if (buf.is_same(dst)) return;
  autograd::NoGradGuard no_grad;
  Tensor d = dst;
  d.copy_(buf);
}

// Sum -> mean, in place on a contiguous floating buffer.
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

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

MPI_Comm make_comm(MPI_Comm parent, int color, int key) {
  MPI_Comm comm = MPI_COMM_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_split(parent, color, key, &comm));
  if (comm != MPI_COMM_NULL) TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  return comm;
}

std::shared_ptr<ProcessGroupMPI> wrap(MPI_Comm comm, std::string name) {
  if (comm == MPI_COMM_NULL) return nullptr;
  int rank = 0, size = 0;
  TESSERA_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  TESSERA_MPI_CHECK(MPI_Comm_size(comm, &size));
  auto impl = std::make_unique<ProcessGroupMPI::Impl>();
  impl->comm = comm;
  return std::make_shared<ProcessGroupMPI>(std::move(impl), rank, size, std::move(name));
}

}  // namespace

// ---- setup ----

Environment init() {
  int initialized = 0;
  TESSERA_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    // Serialized: DDP may poll from a communication thread, never two threads at once.
    int provided = 0;
    TESSERA_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    g_we_initialized = true;
  }
  TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  int rank = 0, size = 0;
  TESSERA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  TESSERA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  Environment env = environment_from_env();
  if (env.launcher == "none") return Environment{rank, size, 0, "mpi"};
  TESSERA_CHECK(env.rank == rank && env.world_size == size, DistributedError,
                "[dist.init] expected MPI's rank ", rank, " of ", size, " to match the ",
                env.launcher, " launcher's environment, got rank ", env.rank, " of ",
                env.world_size);
  return env;
}

void finalize() {
  {
    std::lock_guard<std::mutex> lock(g_world_mutex);
    g_world.reset();
  }
  detail::poll_orphans();
  int finalized = 0;
  TESSERA_MPI_CHECK(MPI_Finalized(&finalized));
  if (g_we_initialized && !finalized) TESSERA_MPI_CHECK(MPI_Finalize());
}

void abort(int error_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, error_code);
  std::_Exit(error_code);
}

std::shared_ptr<ProcessGroupMPI> ProcessGroupMPI::world() {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  if (!g_world) {
    init();
    MPI_Comm comm = MPI_COMM_NULL;
    TESSERA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    g_world = wrap(comm, "world");
  }
  return g_world;
}

ProcessGroupMPI::ProcessGroupMPI(std::unique_ptr<Impl> impl, int rank, int size, std::string name)
    : ProcessGroup(rank, size, std::move(name)), impl_(std::move(impl)) {}

ProcessGroupMPI::~ProcessGroupMPI() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

std::shared_ptr<ProcessGroupMPI> ProcessGroupMPI::new_group(const std::vector<int>& ranks,
                                                            std::string name) {
  TESSERA_CHECK(!ranks.empty(), ValueError, "[new_group] expected at least one rank, got none");
  int key = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    detail::check_peer("new_group", *this, ranks[i], "ranks");
    TESSERA_CHECK(i == 0 || ranks[i] > ranks[i - 1], ValueError,
                  "[new_group] expected ascending ranks without repeats, got ", ranks);
    if (ranks[i] == rank()) key = static_cast<int>(i);
  }
  if (name.empty()) name = detail::str(this->name(), ranks);
  MPI_Comm comm = make_comm(impl_->comm, key >= 0 ? 0 : MPI_UNDEFINED, std::max(key, 0));
  auto group = wrap(comm, std::move(name));
  if (group) {
    group->set_timeout(timeout());
    group->set_debug(debug());
  }
  return group;
}

std::shared_ptr<ProcessGroupMPI> ProcessGroupMPI::split(int color, int key, std::string name) {
  TESSERA_CHECK(color >= 0, ValueError, "[split] expected a color >= 0, got ", color);
  auto group = wrap(make_comm(impl_->comm, color, key), std::move(name));
  group->set_timeout(timeout());
  group->set_debug(debug());
  return group;
}

// ---- debug mode ----

void ProcessGroupMPI::check_same_call(std::string_view op, const std::string& fingerprint) {
  auto wait = [&](MPI_Request req, std::vector<Tensor> keep) {
    auto pending = std::make_shared<detail::PendingOp>();
    pending->requests = {req};
    pending->keep_alive = std::move(keep);
    pending->op = detail::str(op, " (debug fingerprint exchange)");
    detail::WorkMPI(pending, where(), timeout()).wait();
  };
  // The hashes first (8 bytes a rank); the descriptions only when they differ.
  Tensor hashes = empty({size()}, TensorOptions(kInt64));
  Tensor mine = empty({1}, TensorOptions(kInt64));
  const uint64_t h = fnv1a(fingerprint);
  std::memcpy(mine.data_ptr(), &h, sizeof h);
  MPI_Request req;
  TESSERA_MPI_CHECK(MPI_Iallgather(mine.data_ptr(), 1, MPI_INT64_T, hashes.data_ptr(), 1,
                                   MPI_INT64_T, impl_->comm, &req));
  wait(req, {mine, hashes});
  const int64_t* all = static_cast<const int64_t*>(hashes.data_ptr());
  bool same = true;
  for (int r = 0; r < size(); ++r) same = same && all[r] == all[0];
  if (same) return;

  constexpr int kLen = 256;
  Tensor texts = zeros({size(), kLen}, TensorOptions(kUInt8));
  Tensor text = zeros({kLen}, TensorOptions(kUInt8));
  std::memcpy(text.data_ptr(), fingerprint.data(), std::min<size_t>(fingerprint.size(), kLen - 1));
  TESSERA_MPI_CHECK(MPI_Iallgather(text.data_ptr(), kLen, MPI_UINT8_T, texts.data_ptr(), kLen,
                                   MPI_UINT8_T, impl_->comm, &req));
  wait(req, {text, texts});
  // Ranks grouped by the call they made: "rank 0, 2: all_reduce(sum, float32[4])".
  std::map<std::string, std::vector<int>> calls;
  const char* base = static_cast<const char*>(texts.data_ptr());
  for (int r = 0; r < size(); ++r) calls[std::string(base + r * kLen)].push_back(r);
  std::string got;
  for (const auto& [call, ranks] : calls)
    got += detail::str(got.empty() ? "" : "; ", "ranks ", ranks, ": ", call);
  throw DistributedError(detail::str("[", op, "] expected every rank of ", where(),
                                     " to make the same call, got ", got));
}

// ---- operations ----

namespace {

struct Launch {
  std::shared_ptr<detail::PendingOp> op = std::make_shared<detail::PendingOp>();
  MPI_Request* request() { return &op->requests.emplace_back(); }
};

}  // namespace

WorkHandle ProcessGroupMPI::all_reduce(const Tensor& t, ReduceOp op) {
  detail::check_tensor("all_reduce", t, "input");
  detail::check_reduce_dtype("all_reduce", t.dtype(), op);
  if (debug())
    check_same_call("all_reduce",
                    detail::str("all_reduce(", reduce_op_name(op), ", ", detail::describe(t), ")"));
  detail::poll_orphans();
  const DType wire = reduces_in_float32(t.dtype()) ? kFloat32 : t.dtype();
  Tensor buf = staging(t, wire, /*copy_in=*/true);
  Launch l;
  l.op->op = "all_reduce";
  TESSERA_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), count_of("all_reduce", t.numel()),
                                   mpi_type(wire), mpi_op(op, wire), impl_->comm, l.request()));
  l.op->keep_alive = {buf, t};
  const int n = size();
  l.op->finish = [t, buf, op, n] {
    if (op == ReduceOp::Avg) divide(buf, n);
    copy_back(t, buf);
  };
  return std::make_shared<detail::WorkMPI>(l.op, where(), timeout());
}

WorkHandle ProcessGroupMPI::all_gather(const Tensor& output, const Tensor& input) {
  detail::check_tensor("all_gather", input, "input");
  detail::check_tensor("all_gather", output, "output");
  TESSERA_CHECK(output.dtype() == input.dtype(), TypeError,
                "[all_gather] expected an output of the input's dtype ", input.dtype(), ", got ",
                output.dtype());
  TESSERA_CHECK(output.numel() == size() * input.numel(), ValueError,
                "[all_gather] expected an output of ", size(), " x ", input.numel(),
                " elements, got ", output.numel());
  if (debug())
    check_same_call("all_gather", detail::str("all_gather(", detail::describe(input), " -> ",
                                              output.numel(), ")"));
  detail::poll_orphans();
  Tensor in = staging(input, input.dtype(), true);
  Tensor out = staging(output, output.dtype(), false);
  const int count = count_of("all_gather", output.numel()) / std::max(size(), 1);
  Launch l;
  l.op->op = "all_gather";
  const MPI_Datatype type = mpi_type(input.dtype());
  TESSERA_MPI_CHECK(MPI_Iallgather(in.data_ptr(), count, type, out.data_ptr(), count, type,
                                   impl_->comm, l.request()));
  l.op->keep_alive = {in, out, output};
  l.op->finish = [output, out] { copy_back(output, out); };
  return std::make_shared<detail::WorkMPI>(l.op, where(), timeout());
}

WorkHandle ProcessGroupMPI::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  detail::check_tensor("reduce_scatter", input, "input");
  detail::check_tensor("reduce_scatter", output, "output");
  detail::check_reduce_dtype("reduce_scatter", input.dtype(), op);
  TESSERA_CHECK(output.dtype() == input.dtype(), TypeError,
                "[reduce_scatter] expected an output of the input's dtype ", input.dtype(),
                ", got ", output.dtype());
  TESSERA_CHECK(input.numel() == size() * output.numel(), ValueError,
                "[reduce_scatter] expected an input of ", size(), " x ", output.numel(),
                " elements, got ", input.numel());
  if (debug())
    check_same_call("reduce_scatter",
                    detail::str("reduce_scatter(", reduce_op_name(op), ", ",
                                detail::describe(input), " -> ", output.numel(), ")"));
  detail::poll_orphans();
  const DType wire = reduces_in_float32(input.dtype()) ? kFloat32 : input.dtype();
  Tensor in = staging(input, wire, true);
  Tensor out = staging(output, wire, false);
  count_of("reduce_scatter", input.numel());
  Launch l;
  l.op->op = "reduce_scatter";
  TESSERA_MPI_CHECK(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(),
                                              static_cast<int>(output.numel()), mpi_type(wire),
                                              mpi_op(op, wire), impl_->comm, l.request()));
  l.op->keep_alive = {in, out, output};
  const int n = size();
  l.op->finish = [output, out, op, n] {
    if (op == ReduceOp::Avg) divide(out, n);
    copy_back(output, out);
  };
  return std::make_shared<detail::WorkMPI>(l.op, where(), timeout());
}

WorkHandle ProcessGroupMPI::broadcast(const Tensor& t, int root) {
  detail::check_tensor("broadcast", t, "input");
  detail::check_peer("broadcast", *this, root, "root");
  if (debug())
    check_same_call("broadcast",
                    detail::str("broadcast(root ", root, ", ", detail::describe(t), ")"));
  detail::poll_orphans();
  Tensor buf = staging(t, t.dtype(), /*copy_in=*/rank() == root);
  Launch l;
  l.op->op = "broadcast";
  TESSERA_MPI_CHECK(MPI_Ibcast(buf.data_ptr(), count_of("broadcast", t.numel()),
                               mpi_type(t.dtype()), root, impl_->comm, l.request()));
  l.op->keep_alive = {buf, t};
  l.op->finish = [t, buf] { copy_back(t, buf); };
  return std::make_shared<detail::WorkMPI>(l.op, where(), timeout());
}

WorkHandle ProcessGroupMPI::send(const Tensor& t, int dst, int tag) {
  detail::check_tensor("send", t, "input");
  detail::check_peer("send", *this, dst, "dst");
  TESSERA_CHECK(tag >= 0, ValueError, "[send] expected a tag >= 0, got ", tag);
  detail::poll_orphans();
  Tensor buf = staging(t, t.dtype(), true);
  Launch l;
  l.op->op = detail::str("send to rank ", dst);
  TESSERA_MPI_CHECK(MPI_Isend(buf.data_ptr(), count_of("send", t.numel()), mpi_type(t.dtype()), dst,
                              tag, impl_->comm, l.request()));
  l.op->keep_alive = {buf};
  return std::make_shared<detail::WorkMPI>(l.op, where(), timeout());
}

WorkHandle ProcessGroupMPI::recv(const Tensor& t, int src, int tag) {
  detail::check_tensor("recv", t, "output");
  detail::check_peer("recv", *this, src, "src");
  TESSERA_CHECK(tag >= 0, ValueError, "[recv] expected a tag >= 0, got ", tag);
  detail::poll_orphans();
  Tensor buf = staging(t, t.dtype(), false);
  Launch l;
  l.op->op = detail::str("recv from rank ", src);
  l.op->recv_type = mpi_type(t.dtype());
  l.op->recv_count = count_of("recv", t.numel());
  TESSERA_MPI_CHECK(MPI_Irecv(buf.data_ptr(), l.op->recv_count, l.op->recv_type, src, tag,
                              impl_->comm, l.request()));
  l.op->keep_alive = {buf, t};
  l.op->finish = [t, buf] { copy_back(t, buf); };
  return std::make_shared<detail::WorkMPI>(l.op, where(), timeout());
}

WorkHandle ProcessGroupMPI::barrier() {
  if (debug()) check_same_call("barrier", "barrier()");
  detail::poll_orphans();
  Launch l;
  l.op->op = "barrier";
  TESSERA_MPI_CHECK(MPI_Ibarrier(impl_->comm, l.request()));
  return std::make_shared<detail::WorkMPI>(l.op, where(), timeout());
}

}  // namespace tessera::dist
