// GPT-2 and LLaMA split into pipeline stages (GPipe, 1F1B, interleaved 1F1B, uneven splits),
// alone and with tensor or data parallelism: 20 training steps equal the single-process run.
#include <gtest/gtest.h>

#include "model_parallel_harness.h"
#include "tessera/models/pipeline_stage.h"

namespace tessera::dist::testing {
namespace {

// Five layers, so two stages split unevenly and four chunks (two per stage) still fit.
std::shared_ptr<models::CausalLM> gpt2_5() { return gpt2(5); }
std::shared_ptr<models::CausalLM> llama_5() { return llama(5); }

TEST(PipelineModels, StagesHoldTheirLayersUnderTheWholeModelsNames) {
  auto model = gpt2_5();
  models::PipelineStage first(model, 0, 2), last(model, 2, 5);
  EXPECT_TRUE(first.named_parameters().contains("transformer.wte.weight"));
  EXPECT_TRUE(first.named_parameters().contains("transformer.h.1.attn.c_attn.weight"));
  EXPECT_FALSE(first.named_parameters().contains("transformer.h.2.attn.c_attn.weight"));
  EXPECT_TRUE(last.named_parameters().contains("lm_head.weight"));
  EXPECT_TRUE(last.named_parameters().contains("transformer.h.4.mlp.c_fc.weight"));
  EXPECT_FALSE(last.named_parameters().contains("transformer.wpe.weight"));
  // The tied embedding is the one weight both ends hold.
  const TensorList tied = models::tied_across_stages(model);
  ASSERT_EQ(tied.size(), 1u);
  EXPECT_EQ(tied[0].impl(), last.named_parameters().at("lm_head.weight").impl());
  EXPECT_TRUE(models::tied_across_stages(llama_5()).empty());  // untied
  EXPECT_EQ(models::split_layers(5, 2), (std::vector<int64_t>{3, 2}));
  EXPECT_THROW(models::split_layers(5, 2, {4, 2}), ValueError);
  EXPECT_THROW(models::PipelineStage(model, 3, 3), ValueError);
}

TEST(PipelineModels, StagesChainedEqualTheWholeModelsLoss) {
  auto model = gpt2_5();
  const data::Batch b = global_batch(0);
  models::PipelineStage a(model, 0, 3), c(model, 3, 5);
  const double want = model->loss(b[0], b[1]).item<double>();
  EXPECT_DOUBLE_EQ(c.forward(a.forward(b[0], b[1]), b[1]).item<double>(), want);
}

int pipeline_size() { return world()->size() >= 2 && world()->size() <= 4 ? world()->size() : 1; }

TEST(PipelineTraining, EverySchedulesTwentyStepsMatchOneProcess) {
  const int p = pipeline_size();
  if (p == 1) GTEST_SKIP() << "needs 2 to 4 ranks";
  // Uneven: the first stage gets the extra layers at p = 2, explicitly.
  const std::vector<int64_t> uneven = p == 2 ? std::vector<int64_t>{3, 2} : std::vector<int64_t>{};
  for (PipelineScheduleKind kind : {PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB})
    expect_layout_matches_one_process(gpt2_5, {.pp = p, .schedule = kind, .layer_sizes = uneven}, 4,
                                      "PP losses");
  if (2 * p <= 5)  // two chunks per stage need 2p layers
    expect_layout_matches_one_process(
        gpt2_5,
        {.pp = p,
         .schedule = PipelineScheduleKind::Interleaved1F1B,
         .virtual_stages = 2,
         .layer_sizes = p == 2 ? std::vector<int64_t>{2, 1, 1, 1} : std::vector<int64_t>{}},
        2 * p, "interleaved PP losses");
  expect_layout_matches_one_process(llama_5, {.pp = p, .schedule = PipelineScheduleKind::OneFOneB},
                                    4, "LLaMA PP losses");
}

TEST(PipelineTraining, EvaluationThroughTheStagesEqualsTheWholeModel) {
  const int p = pipeline_size();
  if (p == 1) GTEST_SKIP() << "needs 2 to 4 ranks";
  // 5 batches of 2 rows: not a multiple of the stages, so every m must flow.
  std::vector<Tensor> x, y;
  for (int64_t k = 0; k < 5; ++k) {
    data::Batch b = global_batch(k);
    x.push_back(b[0]);
    y.push_back(b[1]);
  }
  auto set = std::make_shared<data::TensorDataset>(std::vector<Tensor>{cat(x), cat(y)});
  data::DataLoader loader(set, data::DataLoaderOptions{.batch_size = 2});
  ModelParallelRun whole(gpt2_5, 1);
  const double want = whole.trainer->evaluate(loader);
  ModelParallelRun run(gpt2_5, 1,
                       {.pp = p,
                        .schedule = PipelineScheduleKind::Interleaved1F1B,
                        .virtual_stages = 2 * p <= 5 ? 2 : 1});
  EXPECT_NEAR(run.trainer->evaluate(loader), want, 1e-6 * want);
}

TEST(PipelineTraining, TensorTimesPipelineParallelMatchesOneProcess) {
  if (world()->size() != 4) GTEST_SKIP() << "TP 2 x PP 2 needs 4 ranks";
  expect_layout_matches_one_process(gpt2_5, {.tp = 2, .pp = 2, .sequence_parallel = true}, 4,
                                    "TP2 x PP2 losses");
  expect_layout_matches_one_process(llama_5, {.tp = 2, .pp = 2}, 4, "LLaMA TP2 x PP2 losses");
}

TEST(PipelineTraining, DataTimesPipelineParallelMatchesOneProcess) {
  if (world()->size() != 4) GTEST_SKIP() << "DP 2 x PP 2 needs 4 ranks";
  expect_layout_matches_one_process(gpt2_5, {.pp = 2}, 4, "DP2 x PP2 losses");
}

}  // namespace
}  // namespace tessera::dist::testing
