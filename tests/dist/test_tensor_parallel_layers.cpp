// ColumnParallelLinear, RowParallelLinear and VocabParallelEmbedding at every TP size against the
// plain nn::Linear / nn::Embedding on the full master tensors, computed on every rank in float64:
// outputs, input gradients and each rank's weight-gradient slice, with and without sequence
// parallelism (slices along dim 1).
#include "tensor_parallel_util.h"
#include "tessera/autograd/engine.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/index.h"
#include "tessera/ops/reduce.h"

namespace tessera::dist::testing {
namespace {

constexpr int64_t B = 2, T = 12, In = 5, Out = 12;  // 12: divisible by every TP size 1 to 4

// The single-process result: y = layer(x) and the gradients of sum(y * G).
struct Reference {
  Tensor y, dx, dw, db;
};

Reference plain_linear(const Tensor& w, const Tensor& b, const Tensor& x, const Tensor& G) {
  nn::Linear lin(w.clone(), b.defined() ? b.clone() : Tensor());
  Tensor xr = x.clone().requires_grad_();
  Tensor y = lin(xr);
  sum(y * G).backward();
  return {y.detach(), xr.grad(), lin.weight.grad(), b.defined() ? lin.bias.grad() : Tensor()};
}

// The group's sum of t (for partial results and gradients).
Tensor group_sum(const Tensor& t, const GroupPtr& g) {
  Tensor s = t.clone();
  g->all_reduce(s)->wait();
  return s;
}

TEST(TensorParallelLayers, ColumnParallelLinearMatchesLinear) {
  Tensor w = master({Out, In}, 11), b = master({Out}, 12), x = master({B, T, In}, 13);
  Tensor G = master({B, T, Out}, 14);
  const Reference ref = plain_linear(w, b, x, G);
  for (const GroupPtr& g : tp_groups()) {
    const int64_t S = g->size(), r = g->rank();
    for (ColumnInput input :
         {ColumnInput::Replicated, ColumnInput::SequenceParallel, ColumnInput::InRegion}) {
      for (bool gather : {false, true}) {
        const std::string what = tessera::detail::str("input ", static_cast<int>(input), " gather ",
                                                      gather, " on ", describe_group(g));
        ColumnParallelLinear layer(w, b, g, {input, gather, {}});
        ASSERT_EQ(layer.weight.sizes(), (Shape{Out / S, In})) << what;
        const bool sp = input == ColumnInput::SequenceParallel;
        Tensor xr = (sp ? part(x, 1, r, S) : x.clone()).requires_grad_();
        Tensor y = layer(xr);
        expect_close(y, gather ? ref.y : part(ref.y, -1, r, S), what + " y");
        sum(y * (gather ? G : part(G, -1, r, S))).backward();
        // InRegion leaves the sum of the ranks' input gradients to the caller's region.
        Tensor dx = input == ColumnInput::InRegion ? group_sum(xr.grad(), g) : xr.grad();
        expect_close(dx, sp ? part(ref.dx, 1, r, S) : ref.dx, what + " dx");
        expect_close(layer.weight.grad(), part(ref.dw, 0, r, S), what + " dW");
        expect_close(layer.bias.grad(), part(ref.db, 0, r, S), what + " db");
      }
    }
  }
}

TEST(TensorParallelLayers, FusedQkvKeepsWholeHeadsOfEachPart) {
  for (const std::vector<int64_t>& parts :
       {std::vector<int64_t>{Out, Out, Out}, std::vector<int64_t>{2 * Out, Out, Out}}) {
    int64_t rows = 0;
    for (int64_t p : parts) rows += p;
    Tensor w = master({rows, In}, 21), b = master({rows}, 22), x = master({B, T, In}, 23);
    Tensor G = master({B, T, rows}, 24);
    const Reference ref = plain_linear(w, b, x, G);
    for (const GroupPtr& g : tp_groups()) {
      const int64_t S = g->size(), r = g->rank();
      // This rank's slice of each part, in the master's part order.
      auto local = [&](const Tensor& t, int64_t dim) {
        TensorList slices;
        int64_t offset = 0;
        for (int64_t p : parts) {
          slices.push_back(part(t.narrow(dim, offset, p), dim, r, S));
          offset += p;
        }
        return cat(slices, dim);
      };
      for (bool gather : {false, true}) {
        const std::string what =
            tessera::detail::str("parts ", parts, " gather ", gather, " on ", describe_group(g));
        ColumnParallelLinear layer(w, b, g, {ColumnInput::Replicated, gather, parts});
        expect_close(layer.weight, local(w, 0), what + " weight");
        expect_close(layer.bias, local(b, 0), what + " bias");
        Tensor xr = x.clone().requires_grad_();
        Tensor y = layer(xr);
        expect_close(y, gather ? ref.y : local(ref.y, 2), what + " y");
        sum(y * (gather ? G : local(G, 2))).backward();
        expect_close(xr.grad(), ref.dx, what + " dx");
        expect_close(layer.weight.grad(), local(ref.dw, 0), what + " dW");
        expect_close(layer.bias.grad(), local(ref.db, 0), what + " db");
      }
    }
  }
}

TEST(TensorParallelLayers, RowParallelLinearMatchesLinear) {
  // Row-parallel: the input features (12) are split; 7 outputs.
  Tensor w = master({7, Out}, 31), b = master({7}, 32), x = master({B, T, Out}, 33);
  Tensor G = master({B, T, 7}, 34);
  const Reference ref = plain_linear(w, b, x, G);
  for (const GroupPtr& g : tp_groups()) {
    const int64_t S = g->size(), r = g->rank();
    for (bool parallel_in : {true, false}) {
      for (bool sp : {false, true}) {
        const std::string what = tessera::detail::str("input_is_parallel ", parallel_in, " sp ", sp,
                                                      " on ", describe_group(g));
        RowParallelLinear layer(w, b, g, {parallel_in, true, sp});
        ASSERT_EQ(layer.weight.sizes(), (Shape{7, Out / S})) << what;
        Tensor xr = (parallel_in ? part(x, -1, r, S) : x.clone()).requires_grad_();
        Tensor y = layer(xr);
        expect_close(y, sp ? part(ref.y, 1, r, S) : ref.y, what + " y");
        sum(y * (sp ? part(G, 1, r, S) : G)).backward();
        expect_close(xr.grad(), parallel_in ? part(ref.dx, -1, r, S) : ref.dx, what + " dx");
        expect_close(layer.weight.grad(), part(ref.dw, 1, r, S), what + " dW");
        // Under SP each rank's replicated bias sees only its part of the sequence.
        expect_close(sp ? group_sum(layer.bias.grad(), g) : layer.bias.grad(), ref.db,
                     what + " db");
      }
    }
    // Without the reduction each rank returns its partial sum and adds no bias.
    RowParallelLinear partial(w, b, g, {true, false, false});
    Tensor y = partial(part(x, -1, r, S));
    expect_close(group_sum(y, g) + b, ref.y, "partial sums on " + describe_group(g));
  }
}

TEST(TensorParallelLayers, VocabParallelEmbeddingMatchesEmbedding) {
  constexpr int64_t V = 10, C = 4;  // 10: padded at TP 3 and 4
  Tensor w = master({V, C}, 41), G = master({B, T, C}, 42);
  Tensor ids = token_ids(B, T, V);
  nn::Embedding plain(w.clone());
  Tensor y = plain(ids);
  sum(y * G).backward();
  const Tensor dw = plain.weight.grad();
  for (const GroupPtr& g : tp_groups()) {
    const int64_t S = g->size(), r = g->rank();
    const int64_t Vp = pad_to_multiple(V, S);
    Tensor dw_padded = cat({dw, zeros({Vp - V, C}, kFloat64)}, 0);
    for (bool sp : {false, true}) {
      const std::string what = tessera::detail::str("sp ", sp, " on ", describe_group(g));
      VocabParallelEmbedding layer(w, g, sp);
      EXPECT_EQ(layer.vocab_size, V) << what;
      EXPECT_EQ(layer.vocab_start, r * (Vp / S)) << what;
      EXPECT_EQ(layer.vocab_end, (r + 1) * (Vp / S)) << what;
      expect_close(layer.weight, part(cat({w, zeros({Vp - V, C}, kFloat64)}, 0), 0, r, S),
                   what + " weight (zero padding rows)");
      Tensor out = layer(ids);
      expect_close(out, sp ? part(y.detach(), 1, r, S) : y.detach(), what + " y");
      sum(out * (sp ? part(G, 1, r, S) : G)).backward();
      expect_close(layer.weight.grad(), part(dw_padded, 0, r, S), what + " dW");
    }
  }
}

}  // namespace
}  // namespace tessera::dist::testing
