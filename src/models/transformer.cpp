#include "tessera/models/transformer.h"

#include <cmath>

#include "tessera/autograd/checkpoint.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/dist/tensor_parallel.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/shape.h"

namespace tessera::models {

Tensor split_heads(const Tensor& x, int64_t n_heads) {
  TESSERA_CHECK(x.dim() == 3 && x.size(2) % n_heads == 0, ValueError,
                "[split_heads] expected [B, T, H * D] with H = ", n_heads, ", got ", x.shape_str());
  return x.view({x.size(0), x.size(1), n_heads, x.size(2) / n_heads}).transpose(1, 2);
}

Tensor merge_heads(const Tensor& x) {
  TESSERA_CHECK(x.dim() == 4, ValueError, "[merge_heads] expected [B, H, T, D], got ",
                x.shape_str());
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p,
                        bool training) {
  if (!training || dropout_p == 0.0)
    return scaled_dot_product_attention(q, k, v, std::nullopt, /*is_causal=*/true);
  // Composite path: sdpa has no dropout. KV heads are repeated for GQA (query head h reads KV
  // head h / (Hq / Hkv), as sdpa does).
  TESSERA_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(1) % k.size(1) == 0,
                ValueError, "[causal_attention] expected q [B, Hq, T, D], k/v [B, Hkv, T, D], got ",
                q.shape_str(), ", ", k.shape_str(), ", ", v.shape_str());
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), Hkv = k.size(1);
  auto repeat_kv = [&](const Tensor& t) {
    if (Hq == Hkv) return t;
    return t.unsqueeze(2)
        .expand({B, Hkv, Hq / Hkv, t.size(2), t.size(3)})
        .reshape({B, Hq, t.size(2), t.size(3)});
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  Tensor att = matmul(q, repeat_kv(k).transpose(-2, -1)) * scale;
  Tensor pos = arange(T).to(q.device());
  Tensor future = pos.unsqueeze(0) > pos.unsqueeze(1);  // [T, T]: key j after query i
  att = softmax(att.masked_fill(future, -INFINITY), -1);
  att = dropout(att, dropout_p, /*training=*/true);
  return matmul(att, repeat_kv(v));
}

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, int64_t max_seq_len, double theta,
                                 const std::optional<RopeScaling>& scaling)
    : head_dim(head_dim), max_seq_len(max_seq_len) {
  const std::vector<double> inv = rope_inv_freq(head_dim, theta, scaling);
  const double attention_factor = rope_attention_factor(scaling);
  const int64_t half = head_dim / 2;
  Tensor c = empty({max_seq_len, half}), s = empty({max_seq_len, half});
  float* cp = c.data_ptr<float>();
  float* sp = s.data_ptr<float>();
  // Angles in double, rounded once (as rope_tables).
  for (int64_t t = 0; t < max_seq_len; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * inv[i];
      cp[t * half + i] = static_cast<float>(attention_factor * std::cos(angle));
      sp[t * half + i] = static_cast<float>(attention_factor * std::sin(angle));
    }
  }
  cos = register_buffer("cos", c, /*persistent=*/false);
  sin = register_buffer("sin", s, /*persistent=*/false);
}

std::tuple<Tensor, Tensor> RotaryEmbedding::tables(int64_t start, int64_t length) const {
  TESSERA_CHECK(start >= 0 && length >= 0 && start + length <= max_seq_len, IndexError,
                "[RotaryEmbedding] expected positions within max_seq_len ", max_seq_len, ", got [",
                start, ", ", start + length, ")");
  return {cos.narrow(0, start, length), sin.narrow(0, start, length)};
}

std::string RotaryEmbedding::extra_repr() const {
  return tessera::detail::str("head_dim=", head_dim, ", max_seq_len=", max_seq_len);
}

Tensor CausalLM::forward(const Tensor& idx, bool last_only) {
  Tensor x = layers(embed(idx), 0, n_layers());
  // Under sequence parallelism the last position lives on one rank: narrow the logits instead.
  if (last_only && !sequence_parallel_) x = x.narrow(1, x.size(1) - 1, 1);
  Tensor logits = head(x);
  if (last_only && sequence_parallel_) logits = logits.narrow(1, logits.size(1) - 1, 1);
  return logits;
}

Tensor CausalLM::loss(const Tensor& idx, const Tensor& targets) {
  TESSERA_CHECK(
      targets.defined() && targets.dtype() == kInt64 && targets.sizes() == idx.sizes(), ValueError,
      "[", type_name(), ".loss] expected int64 targets shaped like idx ", idx.shape_str(), ", got ",
      targets.defined() ? targets.shape_str() + " " + std::string(dtype_name(targets.dtype()))
                        : std::string("an undefined tensor"));
  Tensor loss = loss_from_logits(forward(idx), targets);
  const Tensor aux = auxiliary_loss();
  return aux.defined() ? loss + aux : loss;
}

Tensor CausalLM::loss_from_logits(const Tensor& logits, const Tensor& targets) const {
  if (tp_group_)
    return dist::vocab_parallel_cross_entropy(logits, targets, tp_group_, vocab_size(),
                                              /*ignore_index=*/-1);
  const int64_t V = logits.size(-1);
  return cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}), /*ignore_index=*/-1);
}

void CausalLM::shard_tensor_parallel(std::shared_ptr<dist::ProcessGroup> group,
                                     bool sequence_parallel) {
  TESSERA_CHECK(group != nullptr, ValueError, "[", type_name(),
                ".shard_tensor_parallel] expected a process group, got null");
  TESSERA_CHECK(!tp_group_, ValueError, "[", type_name(),
                ".shard_tensor_parallel] expected a whole model, got one sharded already");
  if (group->size() == 1) return;  // one rank holds everything: the model stays as it is
  autograd::NoGradGuard no_grad;   // the slices are new leaves, not functions of the full weights
  shard_layers(group, sequence_parallel);
  tp_group_ = std::move(group);
  sequence_parallel_ = sequence_parallel;
}

int64_t CausalLM::sequence_length(const Tensor& x) const {
  return sequence_parallel_ ? x.size(1) * tp_group_->size() : x.size(1);
}

int64_t CausalLM::sequence_offset(int64_t T) const {
  if (!sequence_parallel_) return 0;
  const int n = tp_group_->size();
  TESSERA_CHECK(T % n == 0, ValueError, "[", type_name(),
                "] expected a sequence length divisible by the tensor-parallel size ", n,
                " under sequence parallelism, got ", T);
  return T / n * tp_group_->rank();
}

void CausalLM::check_whole(std::string_view op) const {
  TESSERA_CHECK(!tp_group_, ValueError, "[", type_name(), ".", op,
                "] expected a whole model, got one sharded for tensor parallelism");
}

Tensor CausalLM::run_block(const std::function<Tensor(const Tensor&)>& block,
                           const Tensor& x) const {
  if (!activation_checkpointing_ || !is_training()) return block(x);
  // The backward pass runs block again, long after this call: it is captured by value.
  return autograd::checkpoint([block](const TensorList& in) { return TensorList{block(in[0])}; },
                              {x})[0];
}

void CausalLM::check_input(const Tensor& idx, std::string_view op) const {
  TESSERA_CHECK(idx.defined() && idx.dim() == 2 && idx.dtype() == kInt64, ValueError, "[", op,
                "] expected idx of shape [B, T] and dtype int64, got ",
                idx.defined() ? idx.shape_str() + " " + std::string(dtype_name(idx.dtype()))
                              : std::string("an undefined tensor"));
  TESSERA_CHECK(idx.size(1) >= 1 && idx.size(1) <= max_seq_len(), ValueError, "[", op,
                "] expected a sequence length in [1, ", max_seq_len(), "], got ", idx.size(1));
}

}  // namespace tessera::models
