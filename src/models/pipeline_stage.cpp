#include "tessera/models/pipeline_stage.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "tessera/core/error.h"

namespace tessera::models {

namespace {

// The module at `path` of root's tree (as named_modules names it); IndexError when absent.
std::shared_ptr<nn::Module> module_at(nn::Module& root, const std::string& path) {
  std::shared_ptr<nn::Module> m = root.shared_from_this();
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = std::min(path.find('.', start), path.size());
    m = m->named_children().at(path.substr(start, dot - start));
    start = dot + 1;
  }
  return m;
}

// Registers module under the dotted `path`, creating empty containers for the parts before the
// last dot (so a parameter's name in root is its name in the whole model).
void register_at(nn::Module& root, const std::string& path, std::shared_ptr<nn::Module> module) {
  nn::Module* parent = &root;
  size_t start = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', start)) {
    const std::string part = path.substr(start, dot - start);
    if (const auto* child = parent->named_children().find(part))
      parent = child->get();
    else
      parent = parent->register_module(part, std::make_shared<nn::Module>()).get();
    start = dot + 1;
  }
  parent->register_module(path.substr(start), std::move(module));
}

}  // namespace

PipelineStage::PipelineStage(std::shared_ptr<CausalLM> model, int64_t begin, int64_t end)
    : model_(std::move(model)), begin_(begin), end_(end) {
  TESSERA_CHECK(model_ != nullptr, ValueError, "[PipelineStage] expected a model, got null");
  TESSERA_CHECK(0 <= begin && begin < end && end <= model_->n_layers(), ValueError,
                "[PipelineStage] expected layers 0 <= begin < end <= ", model_->n_layers(),
                ", got [", begin, ", ", end, ")");
  // Each stage's layers add to an auxiliary loss that only the whole model's loss() sums.
  TESSERA_CHECK(!model_->has_auxiliary_loss(), NotImplementedError,
                "[PipelineStage] expected a model without an auxiliary loss (a mixture of experts "
                "trains its router's load balancing through the whole model), got a ",
                model_->type_name());
  for (const std::string& path : model_->stage_module_paths(begin, end))
    register_at(*this, path, module_at(*model_, path));
}

Tensor PipelineStage::forward(const Tensor& input, const Tensor& targets) {
  Tensor x = is_first() ? model_->embed(input) : input;
  x = model_->layers(x, begin_, end_);
  return is_last() ? model_->loss_from_logits(model_->head(x), targets) : x;
}

std::string PipelineStage::extra_repr() const {
  return tessera::detail::str("layers=[", begin_, ", ", end_, ")");
}

std::shared_ptr<nn::ModuleList> pipeline_chunks(const std::shared_ptr<CausalLM>& model,
                                                const std::vector<int64_t>& sizes, int stages,
                                                int stage) {
  const int n = static_cast<int>(sizes.size());
  TESSERA_CHECK(stages >= 1 && n % stages == 0 && stage >= 0 && stage < stages, ValueError,
                "[pipeline_chunks] expected stage in [0, stages) and a multiple of stages ", stages,
                " chunks, got stage ", stage, " and ", n, " chunks");
  auto chunks = std::make_shared<nn::ModuleList>();
  for (int g = stage; g < n; g += stages) {
    const int64_t begin = std::accumulate(sizes.begin(), sizes.begin() + g, int64_t{0});
    chunks->push_back(std::make_shared<PipelineStage>(model, begin, begin + sizes[g]));
  }
  return chunks;
}

TensorList tied_across_stages(const std::shared_ptr<CausalLM>& model) {
  const int64_t n = model->n_layers();
  if (n < 2) return {};
  std::unordered_set<const void*> first;
  for (const Tensor& p : PipelineStage(model, 0, 1).parameters()) first.insert(p.impl());
  TensorList shared;
  for (const Tensor& p : PipelineStage(model, n - 1, n).parameters())
    if (first.count(p.impl())) shared.push_back(p);
  return shared;
}

std::vector<int64_t> split_layers(int64_t n_layers, int chunks, const std::vector<int64_t>& sizes) {
  TESSERA_CHECK(chunks >= 1 && chunks <= n_layers, ValueError, "[split_layers] expected 1 to ",
                n_layers, " chunks (one layer each at least), got ", chunks);
  if (!sizes.empty()) {
    const bool ok = static_cast<int>(sizes.size()) == chunks &&
                    std::all_of(sizes.begin(), sizes.end(), [](int64_t s) { return s >= 1; }) &&
                    std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == n_layers;
    TESSERA_CHECK(ok, ValueError, "[split_layers] expected ", chunks,
                  " layer counts >= 1 summing to ", n_layers, ", got ", sizes.size(),
                  " counts summing to ", std::accumulate(sizes.begin(), sizes.end(), int64_t{0}));
    return sizes;
  }
  std::vector<int64_t> out(chunks, n_layers / chunks);
  for (int64_t i = 0; i < n_layers % chunks; ++i) ++out[i];
  return out;
}

}  // namespace tessera::models
