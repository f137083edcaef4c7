#include "collective_checks.h"

#include <algorithm>

namespace tessera::dist::testing {
namespace {

Tensor input_on(Device device, int r, int64_t n, DType dtype, int64_t offset = 0) {
  return input(r, n, dtype, offset).to(device);
}

// The host copy is queued on the current stream, which wait() ordered after the operation.
void expect_on_host(const Tensor& got, const std::vector<double>& want, DType dtype,
                    const std::string& what) {
  expect_values(got.to(kCPU), want, dtype, what);
}

std::vector<double> gathered(int world, int64_t n, DType dtype) {
  std::vector<double> want;
  for (int r = 0; r < world; ++r) {
    auto v = values(input(r, n, dtype));
    want.insert(want.end(), v.begin(), v.end());
  }
  return want;
}

}  // namespace

std::vector<ReduceOp> reduce_ops(DType dtype) {
  if (is_floating(dtype)) return {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
  return {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};
}

std::vector<double> reference(int world, int64_t n, DType dtype, ReduceOp op, int64_t offset) {
  std::vector<std::vector<double>> per_rank;
  for (int r = 0; r < world; ++r) per_rank.push_back(values(input(r, n, dtype, offset)));
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0, lo = per_rank[0][i], hi = per_rank[0][i];
    for (const auto& v : per_rank) {
      sum += v[i];
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    out[i] = op == ReduceOp::Max ? hi : op == ReduceOp::Min ? lo : sum;
    if (op == ReduceOp::Avg) out[i] /= world;
  }
  return n ? values(tensor(out).to(dtype)) : out;
}

void check_all_reduce(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns) {
  for (DType dtype : all_dtypes()) {
    for (ReduceOp op : reduce_ops(dtype)) {
      for (int64_t n : ns) {
        Tensor t = input_on(device, pg.rank(), n, dtype);
        pg.all_reduce(t, op)->wait();
        expect_on_host(t, reference(pg.size(), n, dtype, op), dtype,
                       detail::str("all_reduce ", reduce_op_name(op), " ", dtype, "[", n, "]"));
      }
    }
  }
}

void check_all_gather(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns) {
  for (DType dtype : all_dtypes()) {
    for (int64_t n : ns) {
      Tensor out = zeros({pg.size(), n}, TensorOptions(dtype).with_device(device));
      pg.all_gather(out, input_on(device, pg.rank(), n, dtype))->wait();
      expect_on_host(out, gathered(pg.size(), n, dtype), dtype,
                     detail::str("all_gather ", dtype, "[", n, "]"));
    }
  }
}

void check_reduce_scatter(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns) {
  for (DType dtype : all_dtypes()) {
    for (ReduceOp op : reduce_ops(dtype)) {
      for (int64_t n : ns) {
        Tensor out = zeros({n}, TensorOptions(dtype).with_device(device));
        pg.reduce_scatter(out, input_on(device, pg.rank(), n * pg.size(), dtype), op)->wait();
        expect_on_host(out, reference(pg.size(), n, dtype, op, n * pg.rank()), dtype,
                       detail::str("reduce_scatter ", reduce_op_name(op), " ", dtype, "[", n, "]"));
      }
    }
  }
}

void check_broadcast(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns) {
  for (DType dtype : all_dtypes()) {
    for (int root = 0; root < pg.size(); ++root) {
      for (int64_t n : ns) {
        Tensor t = input_on(device, pg.rank(), n, dtype);
        pg.broadcast(t, root)->wait();
        expect_on_host(t, values(input(root, n, dtype)), dtype,
                       detail::str("broadcast root ", root, " ", dtype, "[", n, "]"));
      }
    }
  }
}

void check_send_recv_ring(ProcessGroup& pg, Device device, const std::vector<int64_t>& ns) {
  const int next = (pg.rank() + 1) % pg.size();
  const int prev = (pg.rank() + pg.size() - 1) % pg.size();
  for (DType dtype : all_dtypes()) {
    for (int64_t n : ns) {
      Tensor got = zeros({n}, TensorOptions(dtype).with_device(device));
      WorkHandle r = pg.recv(got, prev, /*tag=*/3);
      WorkHandle s = pg.send(input_on(device, pg.rank(), n, dtype), next, /*tag=*/3);
      s->wait();
      r->wait();
      expect_on_host(got, values(input(prev, n, dtype)), dtype,
                     detail::str("recv ", dtype, "[", n, "]"));
    }
  }
}

void check_non_contiguous(ProcessGroup& pg, Device device) {
  for (DType dtype : {kFloat32, kBFloat16, kInt32, kInt16}) {
    // A transposed 3 x 5 view: results must land in its strided elements.
    Tensor t = input_on(device, pg.rank(), 15, dtype).reshape({5, 3}).t();
    ASSERT_FALSE(t.is_contiguous());
    const auto flat = reference(pg.size(), 15, dtype, ReduceOp::Sum);
    pg.all_reduce(t, ReduceOp::Sum)->wait();
    expect_on_host(t, values(tensor(flat).to(dtype).reshape({5, 3}).t()), dtype,
                   detail::str("all_reduce of a transposed ", dtype));

    Tensor out = zeros({3, 2 * pg.size()}, TensorOptions(dtype).with_device(device)).t();
    ASSERT_FALSE(out.is_contiguous());
    pg.all_gather(out, input_on(device, pg.rank(), 6, dtype))->wait();
    expect_on_host(out, gathered(pg.size(), 6, dtype), dtype,
                   detail::str("all_gather into a transposed ", dtype));
  }
}

void expect_error_naming(const std::function<void()>& call,
                         std::initializer_list<std::string> parts) {
  try {
    call();
    ADD_FAILURE() << "expected a DistributedError naming " << parts.begin()[0] << ", got none";
  } catch (const DistributedError& e) {
    const std::string msg = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' missing from: " << msg;
  }
}

void expect_deadline_error(ProcessGroup& group, const Tensor& t) {
  const auto start = std::chrono::steady_clock::now();
  expect_error_naming([&] { group.all_reduce(t)->wait(); },
                      {"[all_reduce]", group.name(), detail::str("rank ", group.rank(), " of ")});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, group.timeout());
  EXPECT_LT(took, group.timeout() + std::chrono::seconds(5));
}

void expect_shape_mismatch_named(ProcessGroup& group, Device device) {
  Tensor t = zeros({group.rank() == 0 ? 4 : 5}, TensorOptions(kFloat32).with_device(device));
  expect_error_naming([&] { group.all_reduce(t)->wait(); },
                      {"[all_reduce] expected every rank", "ranks [0]: all_reduce(sum, float32[4])",
                       "all_reduce(sum, float32[5])"});
  group.barrier()->wait();  // nothing was left in flight
}

}  // namespace tessera::dist::testing
