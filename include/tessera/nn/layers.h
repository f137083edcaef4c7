#pragma once
// Standard layers (torch.nn equivalents) and containers. Parameters are public members aliasing
// the registered tensors; shapes and initialisation follow PyTorch so state dicts interchange.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

// module as M; TypeError naming key and the actual module type when it is something else.
template <class M>
std::shared_ptr<M> checked_cast(const std::shared_ptr<Module>& module, const std::string& key) {
  auto cast = std::dynamic_pointer_cast<M>(module);
  TESSERA_CHECK(cast != nullptr, TypeError, "[at] expected the requested module type for '", key,
                "', got ", module->type_name());
  return cast;
}

// y = x @ weight^T + bias; weight [out, in] ~ kaiming_uniform(a = sqrt(5)), i.e.
// U(-1/sqrt(in), 1/sqrt(in)), bias ~ U(-1/sqrt(in), 1/sqrt(in)), as torch.nn.Linear.
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  // Wraps given tensors as the parameters (no initialisation): weight [out, in], bias [out] or
  // undefined. Parallel layers build their slices this way.
  Linear(Tensor weight, Tensor bias);
  Tensor forward(const Tensor& x) override;
  // gelu(forward(x), approximate) as one linear_gelu call (a GEMM epilogue on CUDA). Skips
  // forward hooks; subclasses whose forward does more override it too.
  virtual Tensor forward_gelu(const Tensor& x, std::string_view approximate);
  // Re-draws weight and bias as at construction.
  void reset_parameters(Generator* gen = nullptr);
  std::string extra_repr() const override;

  // Adds a LoRA branch (Hu et al. 2021, laid out as PEFT's): forward then returns
  // linear(x) + scaling * lora_B(lora_A(dropout(x))), lora_A [rank, in] ~ kaiming_uniform
  // (a = sqrt(5)) and lora_B [out, rank] = 0, so the layer starts unchanged. The branch's
  // children are named as in PEFT's adapter files (<layer>.lora_A.weight). ValueError for a
  // rank < 1, a dropout outside [0, 1), or a layer that has a branch already.
  void add_lora(int64_t rank, double scaling, double dropout = 0.0, Generator* gen = nullptr);
  bool has_lora() const { return lora_A != nullptr; }

  int64_t in_features, out_features;
  Tensor weight;  // [out, in]
  Tensor bias;    // [out]; undefined when built without bias
  std::shared_ptr<Linear> lora_A, lora_B;     // null without a LoRA branch
  std::shared_ptr<UnaryModule> lora_dropout;  // null at dropout 0
  double lora_scaling = 0.0;
};

// Rows of weight [num_embeddings, embedding_dim] ~ N(0, 1) picked by integer indices; the
// padding_idx row (negative counts from the end) starts at zero and gets no gradient.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt);
  // Wraps a given [num_embeddings, embedding_dim] tensor as the weight (no initialisation).
  explicit Embedding(Tensor weight);
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // normalised to [0, num_embeddings)
  Tensor weight;
};

// Normalises over the trailing normalized_shape dims; weight = 1, bias = 0 when affine.
class LayerNorm : public UnaryModule {
 public:
  LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
            bool bias = true);
  LayerNorm(int64_t dim, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Shape{dim}, eps, elementwise_affine, bias) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Shape normalized_shape;
  double eps;
  Tensor weight;  // undefined without elementwise_affine
  Tensor bias;    // undefined without elementwise_affine or bias
};

// x / sqrt(mean(x^2, last dim) + eps) * weight (weight = 1 at start).
class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t dim;
  double eps;
  Tensor weight;  // undefined without elementwise_affine
};

// Zeroes elements with probability p and scales the rest by 1/(1-p) in training; identity in
// eval.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  double p;
};

// gelu with approximate "none" (erf) or "tanh".
class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::string approximate;
};

class SiLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
};

class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
};

// Chains unary layers, registered as "0", "1", ...; each runs through its operator() so its
// hooks fire.
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> layers);
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> layer) {
    append(layer);
    return layer;
  }
  Tensor forward(const Tensor& x) override;
  const std::shared_ptr<UnaryModule>& operator[](size_t i) const;
  size_t size() const { return layers_.size(); }
  auto begin() const { return layers_.begin(); }
  auto end() const { return layers_.end(); }

 protected:
  void swap_child(const std::string& name, std::shared_ptr<Module> module) override;

 private:
  void append(std::shared_ptr<UnaryModule> layer);
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

// Modules of any kind, registered as "0", "1", ... (transformer blocks: "h.0.attn...").
class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    append(module);
    return module;
  }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // Module i as M; TypeError when it is something else.
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    return checked_cast<M>((*this)[i], std::to_string(i));
  }
  size_t size() const { return modules_.size(); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 protected:
  void swap_child(const std::string& name, std::shared_ptr<Module> module) override;

 private:
  void append(std::shared_ptr<Module> module);
  std::vector<std::shared_ptr<Module>> modules_;
};

// Named modules in insertion order.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);
  template <class M>
  std::shared_ptr<M> insert(std::string name, std::shared_ptr<M> module) {
    return register_module(std::move(name), std::move(module));
  }
  const std::shared_ptr<Module>& operator[](const std::string& name) const;
  template <class M>
  std::shared_ptr<M> at(const std::string& name) const {
    return checked_cast<M>((*this)[name], name);
  }
  bool contains(const std::string& name) const { return named_children().contains(name); }
  size_t size() const { return named_children().size(); }
  std::vector<std::string> keys() const { return named_children().keys(); }
  auto begin() const { return named_children().begin(); }
  auto end() const { return named_children().end(); }
};

}  // namespace tessera::nn
