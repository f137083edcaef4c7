#include "tessera/nn/layers.h"

#include <cmath>
#include <sstream>

#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/init.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/index.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/nn.h"

namespace tessera::nn {

namespace {

void check_positive(int64_t n, std::string_view op, std::string_view what) {
  TESSERA_CHECK(n > 0, ValueError, "[", op, "] expected ", what, " > 0, got ", n);
}

const char* bool_str(bool b) { return b ? "True" : "False"; }

}  // namespace

// ---- Linear ----

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_features(in_features), out_features(out_features) {
  TESSERA_CHECK(in_features >= 0 && out_features >= 0, ValueError,
                "[Linear] expected non-negative in_features and out_features, got ", in_features,
                " and ", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (bias) this->bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

Linear::Linear(Tensor weight, Tensor bias) {
  TESSERA_CHECK(weight.defined() && weight.dim() == 2, ValueError,
                "[Linear] expected a 2-d weight [out, in], got ",
                weight.defined() ? weight.shape_str() : std::string("none"));
  out_features = weight.size(0);
  in_features = weight.size(1);
  if (bias.defined())
    TESSERA_CHECK(bias.dim() == 1 && bias.size(0) == out_features, ValueError,
                  "[Linear] expected a bias [", out_features, "], got ", bias.shape_str());
  this->weight = register_parameter("weight", std::move(weight));
  if (bias.defined()) this->bias = register_parameter("bias", std::move(bias));
}

void Linear::reset_parameters(Generator* gen) {
  // kaiming_uniform(a = sqrt(5)) has bound sqrt(6 / (1 + 5)) * sqrt(3 / fan_in) / sqrt(3)
  // = 1 / sqrt(fan_in): torch's historical default, kept so checkpoints and runs compare.
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::FanIn,
                         init::Nonlinearity::LeakyReLU, gen);
  if (bias.defined()) {
    double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  Tensor y = linear(x, weight, if_defined(bias));
  if (!lora_A) return y;
  const Tensor in = lora_dropout ? (*lora_dropout)(x) : x;
  return y + (*lora_B)((*lora_A)(in)) * lora_scaling;
}

Tensor Linear::forward_gelu(const Tensor& x, std::string_view approximate) {
  if (lora_A) return gelu(forward(x), approximate);  // the branch adds before the activation
  return linear_gelu(x, weight, if_defined(bias), approximate);
}

void Linear::add_lora(int64_t rank, double scaling, double dropout, Generator* gen) {
  TESSERA_CHECK(!lora_A, ValueError, "[Linear.add_lora] expected a layer without a LoRA branch, ",
                "got one that has a rank ", lora_A ? lora_A->out_features : 0, " branch");
  check_positive(rank, "Linear.add_lora", "rank");
  TESSERA_CHECK(dropout >= 0.0 && dropout < 1.0, ValueError,
                "[Linear.add_lora] expected dropout in [0, 1), got ", dropout);
  const TensorOptions like = TensorOptions(weight.dtype()).with_device(weight.device());
  lora_A = register_module("lora_A",
                           std::make_shared<Linear>(empty({rank, in_features}, like), Tensor()));
  lora_B = register_module("lora_B",
                           std::make_shared<Linear>(zeros({out_features, rank}, like), Tensor()));
  init::kaiming_uniform_(lora_A->weight, std::sqrt(5.0), init::FanMode::FanIn,
                         init::Nonlinearity::LeakyReLU, gen);
  if (dropout > 0.0)
    lora_dropout = register_module("lora_dropout", std::make_shared<Dropout>(dropout));
  lora_scaling = scaling;
}

std::string Linear::extra_repr() const {
  return tessera::detail::str("in_features=", in_features, ", out_features=", out_features,
                              ", bias=", bool_str(bias.defined()));
}

// ---- Embedding ----

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim,
                     std::optional<int64_t> padding_idx)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  check_positive(num_embeddings, "Embedding", "num_embeddings");
  check_positive(embedding_dim, "Embedding", "embedding_dim");
  if (padding_idx) {
    int64_t p = *padding_idx;
    TESSERA_CHECK(p >= -num_embeddings && p < num_embeddings, ValueError,
                  "[Embedding] expected padding_idx in [", -num_embeddings, ", ",
                  num_embeddings - 1, "], got ", p);
    this->padding_idx = p < 0 ? p + num_embeddings : p;
  }
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight);
  if (this->padding_idx) {
    autograd::NoGradGuard no_grad;
    weight.select(0, *this->padding_idx).zero_();
  }
}

Embedding::Embedding(Tensor weight) {
  TESSERA_CHECK(weight.defined() && weight.dim() == 2 && weight.size(0) > 0 && weight.size(1) > 0,
                ValueError, "[Embedding] expected a non-empty 2-d weight, got ",
                weight.defined() ? weight.shape_str() : std::string("none"));
  num_embeddings = weight.size(0);
  embedding_dim = weight.size(1);
  this->weight = register_parameter("weight", std::move(weight));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices, padding_idx); }

std::string Embedding::extra_repr() const {
  std::string s = tessera::detail::str(num_embeddings, ", ", embedding_dim);
  if (padding_idx) s += tessera::detail::str(", padding_idx=", *padding_idx);
  return s;
}

// ---- LayerNorm ----

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool bias)
    : normalized_shape(std::move(normalized_shape)), eps(eps) {
  TESSERA_CHECK(!this->normalized_shape.empty(), ValueError,
                "[LayerNorm] expected a non-empty normalized_shape, got []");
  for (int64_t d : this->normalized_shape) check_positive(d, "LayerNorm", "normalized_shape dims");
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(this->normalized_shape));
    if (bias) this->bias = register_parameter("bias", zeros(this->normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape, if_defined(weight), if_defined(bias), eps);
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i) os << (i ? ", " : "") << normalized_shape[i];
  os << (normalized_shape.size() == 1 ? ",)" : ")") << ", eps=" << eps
     << ", elementwise_affine=" << bool_str(weight.defined());
  return os.str();
}

// ---- RMSNorm ----

RMSNorm::RMSNorm(int64_t dim, double eps, bool elementwise_affine) : dim(dim), eps(eps) {
  check_positive(dim, "RMSNorm", "dim");
  if (elementwise_affine) weight = register_parameter("weight", ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, if_defined(weight), eps); }

std::string RMSNorm::extra_repr() const {
  return tessera::detail::str("(", dim, ",), eps=", eps,
                              ", elementwise_affine=", bool_str(weight.defined()));
}

// ---- Dropout and activations ----

Dropout::Dropout(double p) : p(p) {
  TESSERA_CHECK(p >= 0.0 && p <= 1.0, ValueError, "[Dropout] expected p in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

std::string Dropout::extra_repr() const { return tessera::detail::str("p=", p); }

GELU::GELU(std::string approximate) : approximate(std::move(approximate)) {
  TESSERA_CHECK(this->approximate == "none" || this->approximate == "tanh", ValueError,
                "[GELU] expected approximate \"none\" or \"tanh\", got \"", this->approximate,
                "\"");
}

Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }

std::string GELU::extra_repr() const {
  return approximate == "none" ? "" : "approximate='" + approximate + "'";
}

Tensor SiLU::forward(const Tensor& x) { return silu(x); }

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

// ---- containers ----

Sequential::Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> layers) {
  for (const auto& layer : layers) append(layer);
}

void Sequential::append(std::shared_ptr<UnaryModule> layer) {
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& layer : layers_) h = (*layer)(h);
  return h;
}

const std::shared_ptr<UnaryModule>& Sequential::operator[](size_t i) const {
  TESSERA_CHECK(i < layers_.size(), IndexError, "[Sequential] expected an index below ",
                layers_.size(), ", got ", i);
  return layers_[i];
}

namespace {
// Points the entries of list that held old at replacement.
template <class M>
void repoint(std::vector<std::shared_ptr<M>>& list, const Module* old,
             const std::shared_ptr<M>& replacement) {
  for (auto& entry : list)
    if (entry.get() == old) entry = replacement;
}
}  // namespace

void Sequential::swap_child(const std::string& name, std::shared_ptr<Module> module) {
  auto layer = std::dynamic_pointer_cast<UnaryModule>(module);
  TESSERA_CHECK(module == nullptr || layer != nullptr, TypeError,
                "[Sequential] expected a unary module (one tensor in, one out) for '", name,
                "', got ", module->type_name());
  const std::shared_ptr<Module>* old = named_children().find(name);
  const Module* before = old ? old->get() : nullptr;
  Module::swap_child(name, std::move(module));
  repoint(layers_, before, layer);
}

void ModuleList::swap_child(const std::string& name, std::shared_ptr<Module> module) {
  const std::shared_ptr<Module>* old = named_children().find(name);
  const Module* before = old ? old->get() : nullptr;
  Module::swap_child(name, module);
  repoint(modules_, before, module);
}

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) append(m);
}

void ModuleList::append(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  TESSERA_CHECK(i < modules_.size(), IndexError, "[ModuleList] expected an index below ",
                modules_.size(), ", got ", i);
  return modules_[i];
}

ModuleDict::ModuleDict(
    std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (const auto& [name, m] : modules) register_module(name, m);
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& name) const {
  const std::shared_ptr<Module>* m = named_children().find(name);
  TESSERA_CHECK(m != nullptr, IndexError, "[ModuleDict] expected one of ", keys(), ", got '", name,
                "'");
  return *m;
}

}  // namespace tessera::nn
