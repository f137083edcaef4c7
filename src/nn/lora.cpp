#include "tessera/nn/lora.h"

#include <map>
#include <regex>

#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/linalg.h"

namespace tessera::nn {

namespace {

constexpr std::string_view kA = ".lora_A.weight", kB = ".lora_B.weight";

}  // namespace

bool LoraConfig::targets(const std::string& name) const {
  if (!target_regex.empty()) {
    try {
      return std::regex_match(name, std::regex(target_regex));
    } catch (const std::regex_error& e) {
      throw ValueError(tessera::detail::str("[lora] expected target_modules to be a list of names ",
                                            "or a regular expression, got '", target_regex, "' (",
                                            e.what(), ")"));
    }
  }
  const bool head = name == "lm_head" || name.ends_with(".lm_head");
  for (const std::string& t : target_modules)
    if ((t == "all-linear" && !head) || name == t || name.ends_with("." + t)) return true;
  return false;
}

std::vector<std::string> apply_lora(Module& model, const LoraConfig& config, Generator* gen) {
  std::vector<std::pair<std::string, std::shared_ptr<Linear>>> chosen;
  std::string linears;
  for (const auto& [name, module] : model.named_modules()) {
    auto linear = std::dynamic_pointer_cast<Linear>(module);
    if (!linear) continue;
    TESSERA_CHECK(!linear->has_lora(), ValueError, "[apply_lora] expected a model without LoRA ",
                  "branches, got one on '", name, "'");
    if (linears.size() < 200) linears += (linears.empty() ? "" : ", ") + name;
    if (config.targets(name)) chosen.emplace_back(name, linear);
  }
  TESSERA_CHECK(!chosen.empty(), ValueError, "[apply_lora] expected target_modules naming some ",
                "of the model's Linear layers (", linears, "), got none matching");
  for (Tensor& p : model.parameters()) p.requires_grad_(false);
  std::vector<std::string> names;
  for (auto& [name, linear] : chosen) {
    linear->add_lora(config.r, config.scaling(), config.lora_dropout, gen);
    names.push_back(name);
  }
  return names;
}

TensorDict lora_state_dict(Module& model) {
  TensorDict out;
  for (const auto& [name, module] : model.named_modules())
    if (auto linear = std::dynamic_pointer_cast<Linear>(module); linear && linear->has_lora()) {
      out.insert(name + std::string(kA), linear->lora_A->weight.detach());
      out.insert(name + std::string(kB), linear->lora_B->weight.detach());
    }
  return out;
}

std::vector<LoraPair> lora_pairs(const LoraAdapter& adapter) {
  std::map<std::string, LoraPair> by_layer;
  for (const auto& [key, t] : adapter.weights) {
    const bool a = key.ends_with(kA), b = key.ends_with(kB);
    TESSERA_CHECK(a || b, ValueError, "[lora] expected only <layer>.lora_A.weight and ",
                  "<layer>.lora_B.weight entries in the adapter, got '", key, "'");
    const std::string layer = key.substr(0, key.size() - kA.size());
    TESSERA_CHECK(t.dim() == 2, ValueError, "[lora] expected a 2-d '", key, "', got ",
                  t.shape_str());
    LoraPair& p = by_layer[layer];
    p.layer = layer;
    (a ? p.a : p.b) = t;
  }
  std::vector<LoraPair> out;
  for (auto& [layer, p] : by_layer) {
    TESSERA_CHECK(p.a.defined() && p.b.defined(), ValueError, "[lora] expected both lora_A and ",
                  "lora_B for '", layer, "', got only ", p.a.defined() ? "lora_A" : "lora_B");
    TESSERA_CHECK(p.a.size(0) == p.b.size(1), ValueError, "[lora] expected '", layer,
                  "' lora_A [r, in] and lora_B [out, r] of one rank, got ", p.a.shape_str(),
                  " and ", p.b.shape_str());
    out.push_back(std::move(p));
  }
  return out;
}

void merge_lora(Module& model, const LoraAdapter& adapter) {
  const auto modules = model.named_modules();
  std::vector<std::pair<std::shared_ptr<Linear>, Tensor>> deltas;
  for (const LoraPair& p : lora_pairs(adapter)) {
    const std::shared_ptr<Module>* found = modules.find(p.layer);
    TESSERA_CHECK(found != nullptr, ValueError, "[merge_lora] expected the model to have the ",
                  "adapter's layer '", p.layer, "', got no such module");
    auto linear = std::dynamic_pointer_cast<Linear>(*found);
    TESSERA_CHECK(linear && !linear->has_lora(), ValueError, "[merge_lora] expected '", p.layer,
                  "' to be a Linear without a LoRA branch, got a ", (*found)->type_name(),
                  linear ? " with one" : "");
    TESSERA_CHECK(p.a.size(1) == linear->in_features && p.b.size(0) == linear->out_features,
                  ValueError, "[merge_lora] expected '", p.layer, "' lora_A [r, ",
                  linear->in_features, "] and lora_B [", linear->out_features, ", r], got ",
                  p.a.shape_str(), " and ", p.b.shape_str());
    const Device dev = linear->weight.device();
    Tensor delta =
        matmul(p.b.to(kFloat32).to(dev), p.a.to(kFloat32).to(dev)) * adapter.config.scaling();
    deltas.emplace_back(linear, std::move(delta));
  }
  autograd::NoGradGuard no_grad;
  for (auto& [linear, delta] : deltas) linear->weight.copy_(linear->weight.to(kFloat32) + delta);
}

}  // namespace tessera::nn
