#pragma once
// One pipeline chunk of a causal LM: its layers [begin, end), with the embedding when begin is 0
// and the final norm and output projection when end is the model's last layer. The chunk
// registers exactly the modules it runs, under the whole model's names (transformer.h.3...,
// lm_head), so its parameters(), state_dict() and optimizer see only them and names map one to
// one onto a whole model's checkpoint.
//
//   auto model = std::make_shared<models::GPT2>(config);        // whole, on every rank
//   std::vector<int64_t> sizes = models::split_layers(model->n_layers(), 2);
//   models::PipelineStage stage(model, stage_index == 0 ? 0 : sizes[0],
//                               stage_index == 0 ? sizes[0] : model->n_layers());
//
// A tied output projection on a last chunk that is not also the first is this rank's own copy
// of the embedding; dist::ParallelGradients keeps the two copies' gradients summed.
#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/models/transformer.h"
#include "tessera/nn/layers.h"

namespace tessera::models {

class PipelineStage : public nn::Module {
 public:
  // ValueError unless 0 <= begin < end <= model->n_layers().
  PipelineStage(std::shared_ptr<CausalLM> model, int64_t begin, int64_t end);
  bool is_first() const { return begin_ == 0; }
  bool is_last() const { return end_ == model_->n_layers(); }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  CausalLM& model() const { return *model_; }

  // input: idx [B, T] int64 on the first chunk, the previous chunk's hidden states otherwise.
  // Returns the hidden states after layer end - 1 or, on the last chunk, the mean loss against
  // targets [B, T] (ignored elsewhere).
  Tensor forward(const Tensor& input, const Tensor& targets);
  std::string type_name() const override { return "PipelineStage"; }
  std::string extra_repr() const override;

 private:
  std::shared_ptr<CausalLM> model_;
  int64_t begin_, end_;
};

// The chunks pipeline stage `stage` of `stages` holds, for a split of the layers into
// sizes.size() (stages x virtual stages) global chunks: local chunk c is global chunk
// c * stages + stage (Megatron's interleaving). ValueError unless stages divides sizes.size().
std::shared_ptr<nn::ModuleList> pipeline_chunks(const std::shared_ptr<CausalLM>& model,
                                                const std::vector<int64_t>& sizes, int stages,
                                                int stage);

// The parameters that both the first chunk's embedding and the last chunk's output projection
// use (a tied token embedding); empty when untied or the model has one layer.
TensorList tied_across_stages(const std::shared_ptr<CausalLM>& model);

// Layer counts of `chunks` consecutive chunks: `sizes` when given (ValueError unless there are
// `chunks` of them, each >= 1, summing to n_layers), else an even split with the remainder on
// the first chunks.
std::vector<int64_t> split_layers(int64_t n_layers, int chunks,
                                  const std::vector<int64_t>& sizes = {});

}  // namespace tessera::models
