// Tensor-parallel regions against their definitions (forward and backward), slicing of master
// tensors, the sharded/replicated parameter split and the errors of bad arguments.
#include <functional>

#include "tensor_parallel_util.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/elementwise.h"
#include "testing/expect_error.h"

namespace tessera::dist::testing {
namespace {

using Region = std::function<Tensor(const Tensor&)>;

// Rank q's input and upstream gradient: the same bases shifted or scaled by q, so every rank
// knows every other rank's.
Tensor input_of(const Tensor& base, int64_t q) { return base + static_cast<double>(q); }
Tensor grad_of(const Tensor& base, int64_t q) { return base * static_cast<double>(q + 1); }

// What every rank's input or gradient would give: f applied to the list over ranks.
Tensor over_ranks(const Tensor& base, int64_t S, Tensor (*of)(const Tensor&, int64_t),
                  const std::function<Tensor(const TensorList&)>& f) {
  TensorList all;
  for (int64_t q = 0; q < S; ++q) all.push_back(of(base, q));
  return f(all);
}

Tensor sum_all(const TensorList& ts) {
  Tensor s = ts[0];
  for (size_t i = 1; i < ts.size(); ++i) s = s + ts[i];
  return s;
}

// Runs region on this rank's input and backpropagates this rank's upstream gradient; checks the
// output and the input's gradient against want_out and want_grad.
void check_region(const char* name, const GroupPtr& g, const Region& region, const Tensor& x_base,
                  const Tensor& g_base, const Tensor& want_out, const Tensor& want_grad) {
  const std::string what = std::string(name) + " on " + describe_group(g);
  Tensor x = input_of(x_base, g->rank()).requires_grad_();
  Tensor out = region(x);
  if (g->size() == 1) EXPECT_TRUE(out.is_same(x)) << what << ": a group of one returns x";
  expect_close(out, want_out, what + " forward");
  out.backward(grad_of(g_base, g->rank()));
  expect_close(x.grad(), want_grad, what + " backward");
}

// A [2, 3, 2] shape with dim d multiplied by k.
Shape scaled(int64_t d, int64_t k) {
  Shape s{2, 3, 2};
  s[d < 0 ? d + 3 : d] *= k;
  return s;
}

TEST(TensorParallelRegions, ForwardAndBackwardMatchTheirDefinitions) {
  for (const GroupPtr& g : tp_groups()) {
    const int64_t S = g->size(), r = g->rank();
    auto cat_dim = [](int64_t d) { return [d](const TensorList& ts) { return cat(ts, d); }; };
    Tensor b = master({2, 3, 2}, 1), gb = master({2, 3, 2}, 2);
    check_region(
        "copy_to_tensor_parallel_region", g,
        [&](const Tensor& x) { return copy_to_tensor_parallel_region(x, g); }, b, gb,
        input_of(b, r), over_ranks(gb, S, grad_of, sum_all));
    check_region(
        "reduce_from_tensor_parallel_region", g,
        [&](const Tensor& x) { return reduce_from_tensor_parallel_region(x, g); }, b, gb,
        over_ranks(b, S, input_of, sum_all), grad_of(gb, r));
    Tensor wide = master(scaled(-1, S), 3);
    check_region(
        "scatter_to_tensor_parallel_region", g,
        [&](const Tensor& x) { return scatter_to_tensor_parallel_region(x, g); }, wide, gb,
        part(input_of(wide, r), -1, r, S), over_ranks(gb, S, grad_of, cat_dim(-1)));
    Tensor gwide = master(scaled(-1, S), 4);
    check_region(
        "gather_from_tensor_parallel_region", g,
        [&](const Tensor& x) { return gather_from_tensor_parallel_region(x, g); }, b, gwide,
        over_ranks(b, S, input_of, cat_dim(-1)), part(grad_of(gwide, r), -1, r, S));
    for (int64_t d : {1, 0, -1}) {
      Tensor big = master(scaled(d, S), 5), gbig = master(scaled(d, S), 6);
      check_region(
          "scatter_to_sequence_parallel_region", g,
          [&](const Tensor& x) { return scatter_to_sequence_parallel_region(x, g, d); }, big, gb,
          part(input_of(big, r), d, r, S), over_ranks(gb, S, grad_of, cat_dim(d)));
      check_region(
          "gather_from_sequence_parallel_region", g,
          [&](const Tensor& x) { return gather_from_sequence_parallel_region(x, g, d); }, b, gbig,
          over_ranks(b, S, input_of, cat_dim(d)),
          over_ranks(gbig, S, grad_of, [&](const TensorList& ts) {
            TensorList parts;
            for (const Tensor& t : ts) parts.push_back(part(t, d, r, S));
            return sum_all(parts);
          }));
      check_region(
          "reduce_scatter_to_sequence_parallel_region", g,
          [&](const Tensor& x) { return reduce_scatter_to_sequence_parallel_region(x, g, d); }, big,
          gb, part(over_ranks(big, S, input_of, sum_all), d, r, S),
          over_ranks(gb, S, grad_of, cat_dim(d)));
    }
  }
}

TEST(TensorParallelRegions, EveryDtypeMovesExactly) {
  for (const GroupPtr& g : tp_groups()) {
    const int64_t S = g->size(), r = g->rank();
    for (DType dt : {kFloat32, kBFloat16, kFloat16, kInt64, kInt32}) {
      const std::string what = tessera::detail::str(dt, " on ", describe_group(g));
      // Small integers (dist_test_util's input): exact in every dtype, sums included.
      const Shape shape{2, 3 * S, 2 * S};
      Tensor mine = input(static_cast<int>(r), shape_numel(shape), dt).reshape(shape);
      TensorList all;
      for (int64_t q = 0; q < S; ++q)
        all.push_back(input(static_cast<int>(q), shape_numel(shape), kFloat64).reshape(shape));
      Tensor reduced = reduce_from_tensor_parallel_region(mine, g);
      EXPECT_EQ(reduced.dtype(), dt) << what;
      expect_close(reduced, sum_all(all), what + " reduce");
      expect_close(gather_from_sequence_parallel_region(mine, g), cat(all, 1), what + " gather");
      expect_close(reduce_scatter_to_sequence_parallel_region(mine, g), part(sum_all(all), 1, r, S),
                   what + " reduce_scatter");
      expect_close(scatter_to_tensor_parallel_region(mine, g), part(all[r], -1, r, S),
                   what + " scatter");
    }
  }
}

TEST(TensorParallelShard, SlicesOfMasterTensors) {
  Tensor m = arange(24).reshape({6, 4}).to(kFloat64);
  expect_close(shard_tensor(m, 0, 1, 3), m.narrow(0, 2, 2), "rows");
  expect_close(shard_tensor(m, -1, 1, 2), m.narrow(1, 2, 2), "columns");
  Tensor s = shard_tensor(m, 0, 0, 1);
  EXPECT_FALSE(s.is_same(m));
  EXPECT_NE(s.data_ptr(), m.data_ptr()) << "a copy, not a view";
  // Fused QKV: rank 1 of 2 holds the second half of each of q, k and v; GQA parts differ.
  Tensor qkv = arange(6 * 2).reshape({6, 2}).to(kFloat64);
  expect_close(shard_fused_rows(qkv, {2, 2, 2}, 1, 2),
               cat({qkv.narrow(0, 1, 1), qkv.narrow(0, 3, 1), qkv.narrow(0, 5, 1)}, 0), "qkv");
  Tensor gqa = arange(8).to(kFloat64);
  expect_close(shard_fused_rows(gqa, {4, 2, 2}, 0, 2),
               cat({gqa.narrow(0, 0, 2), gqa.narrow(0, 4, 1), gqa.narrow(0, 6, 1)}, 0), "gqa bias");
  expect_close(shard_fused_rows(gqa, {}, 1, 2), gqa.narrow(0, 4, 4), "no parts: one block");
  EXPECT_EQ(pad_to_multiple(10, 4), 12);
  EXPECT_EQ(pad_to_multiple(12, 4), 12);
  EXPECT_EQ(pad_to_multiple(0, 3), 0);
}

TEST(TensorParallelErrors, BadArgumentsThrowTypedErrors) {
  auto g = world();
  GroupPtr none;
  Tensor x = zeros({2, 3});
  EXPECT_TESSERA_ERROR(copy_to_tensor_parallel_region(x, none), ValueError,
                       "[copy_to_tensor_parallel_region] expected a process group");
  EXPECT_TESSERA_ERROR(reduce_from_tensor_parallel_region(Tensor(), g), ValueError,
                       "[reduce_from_tensor_parallel_region] expected");
  EXPECT_TESSERA_ERROR(scatter_to_sequence_parallel_region(x, g, 2), IndexError,
                       "[scatter_to_sequence_parallel_region] expected dim in [-2, 2)");
  EXPECT_TESSERA_ERROR(gather_from_sequence_parallel_region(zeros({}), g), ValueError,
                       "[gather_from_sequence_parallel_region] expected");
  if (g->size() > 1) {
    Tensor odd = zeros({2, g->size() + 1});
    EXPECT_TESSERA_ERROR(scatter_to_tensor_parallel_region(odd, g), ValueError,
                         "[scatter_to_tensor_parallel_region] expected dim 1");
    EXPECT_TESSERA_ERROR(reduce_scatter_to_sequence_parallel_region(odd, g), ValueError,
                         "[reduce_scatter_to_sequence_parallel_region] expected dim 1");
  }
  EXPECT_TESSERA_ERROR(shard_tensor(zeros({5, 2}), 0, 0, 2), ValueError,
                       "[shard_tensor] expected dim 0 of [5, 2] divisible by 2");
  EXPECT_TESSERA_ERROR(shard_tensor(zeros({4}), 0, 2, 2), ValueError, "[shard_tensor] expected");
  EXPECT_TESSERA_ERROR(shard_tensor(zeros({4}), 1, 0, 2), IndexError, "[shard_tensor] expected");
  EXPECT_TESSERA_ERROR(shard_fused_rows(zeros({6, 2}), {2, 2, 1}, 0, 2), ValueError,
                       "[shard_fused_rows] expected parts");
  EXPECT_TESSERA_ERROR(shard_fused_rows(zeros({6, 2}), {2, 2}, 0, 2), ValueError,
                       "[shard_fused_rows] expected parts [2, 2] to sum to dim 0");
  EXPECT_TESSERA_ERROR(pad_to_multiple(3, 0), ValueError, "[pad_to_multiple] expected");

  EXPECT_TESSERA_ERROR(ColumnParallelLinear(zeros({4}), Tensor(), g), ValueError,
                       "[ColumnParallelLinear] expected a 2-d master_weight");
  EXPECT_TESSERA_ERROR(ColumnParallelLinear(zeros({4, 2}), zeros({3}), g), ValueError,
                       "[ColumnParallelLinear] expected a master_bias [4]");
  EXPECT_TESSERA_ERROR(ColumnParallelLinear(zeros({4, 2}), Tensor(), none), ValueError,
                       "[ColumnParallelLinear] expected a process group");
  EXPECT_TESSERA_ERROR(RowParallelLinear(zeros({2, 4}), Tensor(), g, {true, false, true}),
                       ValueError, "[RowParallelLinear] expected reduce_output");
  VocabParallelEmbedding emb(zeros({5, 2}), g);
  EXPECT_TESSERA_ERROR(emb.forward(tensor(std::vector<int64_t>{0, 5})), IndexError,
                       "[VocabParallelEmbedding] expected token ids in [0, 5), got 5");
  EXPECT_TESSERA_ERROR(emb.forward(tensor(std::vector<int64_t>{-1, 2})), IndexError, "got -1");
  EXPECT_TESSERA_ERROR(emb.forward(zeros({2})), TypeError,
                       "[VocabParallelEmbedding] expected int64 token ids");
  EXPECT_TESSERA_ERROR(VocabParallelEmbedding(zeros({0, 2}), g), ValueError,
                       "[VocabParallelEmbedding] expected a non-empty 2-d master_weight");
}

// A module mixing parallel layers, a norm and a head tied to the embedding.
struct MixedModel : nn::Module {
  std::shared_ptr<VocabParallelEmbedding> wte;
  std::shared_ptr<ColumnParallelLinear> up;
  std::shared_ptr<RowParallelLinear> down;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> head;
  explicit MixedModel(const GroupPtr& g) {
    const int64_t S = g->size();
    wte = register_module("wte", std::make_shared<VocabParallelEmbedding>(master({7, 4}, 1), g));
    up = register_module(
        "up", std::make_shared<ColumnParallelLinear>(master({2 * S, 4}, 2), master({2 * S}, 3), g));
    down = register_module(
        "down", std::make_shared<RowParallelLinear>(master({4, 2 * S}, 4), master({4}, 5), g));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(4));
    head = register_module("head", std::make_shared<nn::Linear>(wte->weight, Tensor()));
  }
};

TEST(TensorParallelParams, ShardedAndReplicatedEachOnce) {
  auto g = world();
  auto m = std::make_shared<MixedModel>(g);
  TensorParallelParams p = tensor_parallel_params(*m);
  ASSERT_EQ(p.sharded.size(), 4u);
  EXPECT_TRUE(p.sharded[0].is_same(m->wte->weight));
  EXPECT_TRUE(p.sharded[1].is_same(m->up->weight));
  EXPECT_TRUE(p.sharded[2].is_same(m->up->bias));
  EXPECT_TRUE(p.sharded[3].is_same(m->down->weight));
  ASSERT_EQ(p.replicated.size(), 3u) << "the tied head weight is sharded, once";
  EXPECT_TRUE(p.replicated[0].is_same(m->down->bias));
  EXPECT_TRUE(p.replicated[1].is_same(m->norm->weight));
  EXPECT_TRUE(p.replicated[2].is_same(m->norm->bias));
}

}  // namespace
}  // namespace tessera::dist::testing
