#include "tessera/dist/process_group_mpi.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "dist/mpi/wire_mpi.h"
#include "dist/mpi/work_mpi.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"

namespace tessera::dist {

struct ProcessGroupMPI::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::shared_ptr<detail::GroupHealth> health = std::make_shared<detail::GroupHealth>();
};

namespace {

bool g_we_initialized = false;
std::mutex g_world_mutex;
std::shared_ptr<ProcessGroupMPI> g_world;

using detail::at;
using detail::Chunk;
using detail::chunks;
using detail::divide;
using detail::mpi_op;
using detail::mpi_type;
using detail::OwnedType;
using detail::reduces_in_float32;
using detail::spaced_type;

// An operation about to be posted on a group that has not failed. Its handle exists before the
// first MPI call, so that when a later chunk fails to post, the requests already posted keep
// their buffers: the handle's destructor hands them to the orphans.
struct Launch {
  std::shared_ptr<detail::PendingOp> op = std::make_shared<detail::PendingOp>();
  std::shared_ptr<detail::WorkMPI> work;

  Launch(std::string name, std::vector<Tensor> keep, const ProcessGroupMPI::Impl& group,
         std::string where, std::chrono::milliseconds timeout) {
    group.health->check(name, where);
    op->op = std::move(name);
    op->keep_alive = std::move(keep);
    work = std::make_shared<detail::WorkMPI>(op, group.health, std::move(where), timeout);
  }
  MPI_Request* request() { return &op->requests.emplace_back(); }
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

MPI_Comm make_comm(MPI_Comm parent, int color, int key) {
  auto lock = detail::mpi_lock();  // held through the split, a blocking collective
  MPI_Comm comm = MPI_COMM_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_split(parent, color, key, &comm));
  if (comm != MPI_COMM_NULL) TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  return comm;
}

std::shared_ptr<ProcessGroupMPI> wrap(MPI_Comm comm, std::string name) {
  if (comm == MPI_COMM_NULL) return nullptr;
  int rank = 0, size = 0;
  {
    auto lock = detail::mpi_lock();
    TESSERA_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    TESSERA_MPI_CHECK(MPI_Comm_size(comm, &size));
  }
  auto impl = std::make_unique<ProcessGroupMPI::Impl>();
  impl->comm = comm;
  return std::make_shared<ProcessGroupMPI>(std::move(impl), rank, size, std::move(name));
}

}  // namespace

// ---- setup ----

Environment init() {
  int rank = 0, size = 0;
  {
    auto lock = detail::mpi_lock();
    int initialized = 0;
    TESSERA_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
#ifdef OPEN_MPI
      // OpenMPI's libnbc runs every in-place MPI_Iallreduce, and every one on fewer than 4 ranks,
      // as a binomial reduce + broadcast. Reduce-scatter + all-gather (Rabenseifner) was 1.3-2.4x
      // faster on 2 ranks from 64 KB and 1.1-1.4x on 4 from 1 MB, slower on 4 below that
      // (BENCHMARKS.md). A user's own setting of the variable wins.
      setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
#endif
      // Serialized: DDP polls from a communication thread, and mpi_lock() keeps the calls of
      // the two threads apart.
      int granted = 0;
      TESSERA_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &granted));
      g_we_initialized = true;
    }
    // Also when the host initialised MPI itself (mpi4py, say): below serialized, DDP's progress
    // thread would call MPI where MPI does not allow it.
    int provided = 0;
    TESSERA_MPI_CHECK(MPI_Query_thread(&provided));
    TESSERA_CHECK(provided >= MPI_THREAD_SERIALIZED, DistributedError,
                  "[dist.init] expected MPI_THREAD_SERIALIZED support from MPI, got level ",
                  provided,
                  initialized ? " (MPI was initialised before dist.init: ask for "
                                "MPI_THREAD_SERIALIZED or above there)"
                              : "");
    TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    TESSERA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    TESSERA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  }
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
  auto lock = detail::mpi_lock();
  int finalized = 0;
  TESSERA_MPI_CHECK(MPI_Finalized(&finalized));
  if (g_we_initialized && !finalized) TESSERA_MPI_CHECK(MPI_Finalize());
}

// Not under mpi_lock(): the job must go down even while another thread is inside an MPI call.
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
    {
      auto mpi = detail::mpi_lock();
      TESSERA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
      TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    }
    g_world = wrap(comm, "world");
  }
  return g_world;
}

ProcessGroupMPI::ProcessGroupMPI(std::unique_ptr<Impl> impl, int rank, int size, std::string name)
    : ProcessGroup(rank, size, std::move(name)), impl_(std::move(impl)) {}

ProcessGroupMPI::~ProcessGroupMPI() {
  auto lock = detail::mpi_lock();
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
  // Every rank's `count` elements of `mine` into `all`, waited for under the group's deadline.
  auto exchange = [&](const Tensor& mine, const Tensor& all, int count, MPI_Datatype type) {
    Launch l(detail::str(op, " (debug fingerprint exchange)"), {mine, all}, *impl_, where(),
             timeout());
    {
      auto lock = detail::mpi_lock();
      TESSERA_MPI_CHECK(MPI_Iallgather(mine.data_ptr(), count, type, all.data_ptr(), count, type,
                                       impl_->comm, l.request()));
    }
    l.work->wait();
  };
  // The hashes first (8 bytes a rank); the descriptions only when they differ.
  Tensor hashes = empty({size()}, TensorOptions(kInt64));
  Tensor mine = empty({1}, TensorOptions(kInt64));
  const uint64_t h = fnv1a(fingerprint);
  std::memcpy(mine.data_ptr(), &h, sizeof h);
  exchange(mine, hashes, 1, MPI_INT64_T);
  const int64_t* all = static_cast<const int64_t*>(hashes.data_ptr());
  bool same = true;
  for (int r = 0; r < size(); ++r) same = same && all[r] == all[0];
  if (same) return;

  constexpr int kLen = 256;
  Tensor texts = zeros({size(), kLen}, TensorOptions(kUInt8));
  Tensor text = zeros({kLen}, TensorOptions(kUInt8));
  std::memcpy(text.data_ptr(), fingerprint.data(), std::min<size_t>(fingerprint.size(), kLen - 1));
  exchange(text, texts, kLen, MPI_UINT8_T);
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

WorkHandle ProcessGroupMPI::all_reduce(const Tensor& t, ReduceOp op) {
  detail::check_tensor("all_reduce", t, "input");
  detail::check_reduce_dtype("all_reduce", t.dtype(), op);
  if (debug())
    check_same_call("all_reduce",
                    detail::str("all_reduce(", reduce_op_name(op), ", ", detail::describe(t), ")"));
  detail::poll_orphans();
  const DType wire = reduces_in_float32(t.dtype()) ? kFloat32 : t.dtype();
  Tensor buf = detail::staging(t, wire, /*copy_in=*/true);
  Launch l("all_reduce", {buf, t}, *impl_, where(), timeout());
  {
    auto lock = detail::mpi_lock();
    for (const Chunk& c : chunks(buf.numel()))
      TESSERA_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, at(buf, c.offset), c.count, mpi_type(wire),
                                       mpi_op(op, wire), impl_->comm, l.request()));
  }
  const int n = size();
  l.op->finish = [t, buf, op, n] {
    if (op == ReduceOp::Avg) divide(buf, n);
    detail::copy_back(t, buf);
  };
  return l.work;
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
  Tensor in = detail::staging(input, input.dtype(), true);
  Tensor out = detail::staging(output, output.dtype(), false);
  Launch l("all_gather", {in, out, output}, *impl_, where(), timeout());
  const MPI_Datatype type = mpi_type(input.dtype());
  const int64_t n = input.numel();
  {
    auto lock = detail::mpi_lock();
    const std::vector<Chunk> pieces = chunks(n);
    if (pieces.size() == 1) {
      TESSERA_MPI_CHECK(MPI_Iallgather(in.data_ptr(), pieces[0].count, type, out.data_ptr(),
                                       pieces[0].count, type, impl_->comm, l.request()));
    } else {
      // Chunk c of each rank's block is one element of a type one block wide, so that the
      // blocks stay rank-major in out (chunking the flat output would interleave them).
      for (const Chunk& c : pieces) {
        OwnedType spaced;
        spaced_type(spaced, type, c.count, n, input.element_size());
        TESSERA_MPI_CHECK(MPI_Iallgather(at(in, c.offset), c.count, type, at(out, c.offset), 1,
                                         spaced.type, impl_->comm, l.request()));
      }
    }
  }
  l.op->finish = [output, out] { detail::copy_back(output, out); };
  return l.work;
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
  Tensor in = detail::staging(input, wire, true);
  Tensor out = detail::staging(output, wire, false);
  Launch l("reduce_scatter", {in, out, output}, *impl_, where(), timeout());
  const MPI_Datatype type = mpi_type(wire);
  const int64_t n = output.numel();
  {
    auto lock = detail::mpi_lock();
    const std::vector<Chunk> pieces = chunks(n);
    if (pieces.size() == 1) {
      TESSERA_MPI_CHECK(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), pieces[0].count,
                                                  type, mpi_op(op, wire), impl_->comm,
                                                  l.request()));
    } else {
      // Block r reduced onto rank r, chunk by chunk: reductions on derived datatypes (the
      // all_gather way) are not portable, and staging the blocks chunk-major would double the
      // memory of an input this large.
      for (int r = 0; r < size(); ++r) {
        for (const Chunk& c : pieces)
          TESSERA_MPI_CHECK(MPI_Ireduce(at(in, r * n + c.offset), at(out, c.offset), c.count, type,
                                        mpi_op(op, wire), r, impl_->comm, l.request()));
      }
    }
  }
  const int world = size();
  l.op->finish = [output, out, op, world] {
    if (op == ReduceOp::Avg) divide(out, world);
    detail::copy_back(output, out);
  };
  return l.work;
}

WorkHandle ProcessGroupMPI::broadcast(const Tensor& t, int root) {
  detail::check_tensor("broadcast", t, "input");
  detail::check_peer("broadcast", *this, root, "root");
  if (debug())
    check_same_call("broadcast",
                    detail::str("broadcast(root ", root, ", ", detail::describe(t), ")"));
  detail::poll_orphans();
  Tensor buf = detail::staging(t, t.dtype(), /*copy_in=*/rank() == root);
  Launch l("broadcast", {buf, t}, *impl_, where(), timeout());
  {
    auto lock = detail::mpi_lock();
    for (const Chunk& c : chunks(buf.numel()))
      TESSERA_MPI_CHECK(MPI_Ibcast(at(buf, c.offset), c.count, mpi_type(t.dtype()), root,
                                   impl_->comm, l.request()));
  }
  l.op->finish = [t, buf] { detail::copy_back(t, buf); };
  return l.work;
}

// Chunks of one transfer share the tag; MPI delivers messages between two ranks with the same
// tag in order, so chunk i meets chunk i.
WorkHandle ProcessGroupMPI::send(const Tensor& t, int dst, int tag) {
  detail::check_tensor("send", t, "input");
  detail::check_peer("send", *this, dst, "dst");
  TESSERA_CHECK(tag >= 0, ValueError, "[send] expected a tag >= 0, got ", tag);
  detail::poll_orphans();
  Tensor buf = detail::staging(t, t.dtype(), true);
  Launch l(detail::str("send to rank ", dst), {buf}, *impl_, where(), timeout());
  {
    auto lock = detail::mpi_lock();
    for (const Chunk& c : chunks(buf.numel()))
      TESSERA_MPI_CHECK(MPI_Isend(at(buf, c.offset), c.count, mpi_type(t.dtype()), dst, tag,
                                  impl_->comm, l.request()));
  }
  return l.work;
}

WorkHandle ProcessGroupMPI::recv(const Tensor& t, int src, int tag) {
  detail::check_tensor("recv", t, "output");
  detail::check_peer("recv", *this, src, "src");
  TESSERA_CHECK(tag >= 0, ValueError, "[recv] expected a tag >= 0, got ", tag);
  detail::poll_orphans();
  Tensor buf = detail::staging(t, t.dtype(), false);
  Launch l(detail::str("recv from rank ", src), {buf, t}, *impl_, where(), timeout());
  l.op->recv_type = mpi_type(t.dtype());
  {
    auto lock = detail::mpi_lock();
    for (const Chunk& c : chunks(buf.numel())) {
      l.op->recv_counts.push_back(c.count);
      TESSERA_MPI_CHECK(MPI_Irecv(at(buf, c.offset), c.count, l.op->recv_type, src, tag,
                                  impl_->comm, l.request()));
    }
  }
  l.op->finish = [t, buf] { detail::copy_back(t, buf); };
  return l.work;
}

WorkHandle ProcessGroupMPI::barrier() {
  if (debug()) check_same_call("barrier", "barrier()");
  detail::poll_orphans();
  Launch l("barrier", {}, *impl_, where(), timeout());
  {
    auto lock = detail::mpi_lock();
    TESSERA_MPI_CHECK(MPI_Ibarrier(impl_->comm, l.request()));
  }
  return l.work;
}

}  // namespace tessera::dist
