// tessera._C.distributed, model-parallel part: the tensor-parallel regions, layers and
// vocab-parallel cross-entropy (tessera.distributed.tensor_parallel), and pipeline schedules with
// the executor that runs Python chunk functions through them (tessera.distributed.pipeline).
//
// The executor calls back into Python for every forward, so its run keeps the GIL (a rank waiting
// for a peer's activation blocks its own Python thread, as a blocking recv would).
#include "bind.h"
#include "tessera/dist/pipeline.h"
#include "tessera/dist/tensor_parallel.h"

namespace tessera::python {

namespace {

using dist::GroupPtr;

Tensor or_undefined(const std::optional<Tensor>& t) { return t.value_or(Tensor()); }

void bind_regions(py::module_& d) {
  const auto group = py::arg("group");
  d.def("copy_to_tensor_parallel_region", &dist::copy_to_tensor_parallel_region, py::arg("input"),
        group, "Identity forward; the gradient is summed over the group.");
  d.def("reduce_from_tensor_parallel_region", &dist::reduce_from_tensor_parallel_region,
        py::arg("input"), group, "Sum over the group forward; identity backward.");
  d.def("scatter_to_tensor_parallel_region", &dist::scatter_to_tensor_parallel_region,
        py::arg("input"), group, "This rank's slice of the last dim; the gradient is gathered.");
  d.def("gather_from_tensor_parallel_region", &dist::gather_from_tensor_parallel_region,
        py::arg("input"), group, "All-gather along the last dim; the gradient is sliced.");
  d.def("scatter_to_sequence_parallel_region", &dist::scatter_to_sequence_parallel_region,
        py::arg("input"), group, py::arg("dim") = 1,
        "This rank's slice of dim; the gradient is all-gathered.");
  d.def("gather_from_sequence_parallel_region", &dist::gather_from_sequence_parallel_region,
        py::arg("input"), group, py::arg("dim") = 1,
        "All-gather along dim; the gradient is reduce-scattered.");
  d.def("reduce_scatter_to_sequence_parallel_region",
        &dist::reduce_scatter_to_sequence_parallel_region, py::arg("input"), group,
        py::arg("dim") = 1, "Reduce-scatter along dim; the gradient is all-gathered.");
  d.def("vocab_parallel_cross_entropy", &dist::vocab_parallel_cross_entropy, py::arg("logits"),
        py::arg("target"), group, py::arg("vocab_size"), py::kw_only(),
        py::arg("ignore_index") = -100, py::arg("label_smoothing") = 0.0,
        "Mean cross-entropy of logits whose last dim is this rank's slice of the vocabulary.");
  d.def("shard_tensor", &dist::shard_tensor, py::arg("master"), py::arg("dim"), py::arg("rank"),
        py::arg("size"), "Slice `rank` of `size` equal slices of master along dim.");
  d.def("shard_fused_rows", &dist::shard_fused_rows, py::arg("master"), py::arg("parts"),
        py::arg("rank"), py::arg("size"), "Each block of rows sharded on its own (fused QKV).");
}

void bind_layers(py::module_& d) {
  py::class_<dist::ColumnParallelLinear, nn::Linear, std::shared_ptr<dist::ColumnParallelLinear>>(
      d, "ColumnParallelLinear", py::dynamic_attr(),
      "Linear whose output features are split over the group, cut from the whole weight.")
      .def(py::init([](const Tensor& weight, std::optional<Tensor> bias, GroupPtr group,
                       bool gather_output, bool sequence_parallel,
                       std::vector<int64_t> fused_parts) {
             dist::ColumnParallelOptions o;
             o.input = sequence_parallel ? dist::ColumnInput::SequenceParallel
                                         : dist::ColumnInput::Replicated;
             o.gather_output = gather_output;
             o.fused_parts = std::move(fused_parts);
             return std::make_shared<dist::ColumnParallelLinear>(weight, or_undefined(bias),
                                                                 std::move(group), o);
           }),
           py::arg("weight"), py::arg("bias"), py::arg("group"), py::kw_only(),
           py::arg("gather_output") = false, py::arg("sequence_parallel") = false,
           py::arg("fused_parts") = std::vector<int64_t>{});
  py::class_<dist::RowParallelLinear, nn::Linear, std::shared_ptr<dist::RowParallelLinear>>(
      d, "RowParallelLinear", py::dynamic_attr(),
      "Linear whose input features are split over the group; the results are summed.")
      .def(py::init([](const Tensor& weight, std::optional<Tensor> bias, GroupPtr group,
                       bool input_is_parallel, bool reduce_output, bool sequence_parallel) {
             return std::make_shared<dist::RowParallelLinear>(
                 weight, or_undefined(bias), std::move(group),
                 dist::RowParallelOptions{input_is_parallel, reduce_output, sequence_parallel});
           }),
           py::arg("weight"), py::arg("bias"), py::arg("group"), py::kw_only(),
           py::arg("input_is_parallel") = true, py::arg("reduce_output") = true,
           py::arg("sequence_parallel") = false);
  py::class_<dist::VocabParallelEmbedding, nn::Embedding,
             std::shared_ptr<dist::VocabParallelEmbedding>>(
      d, "VocabParallelEmbedding", py::dynamic_attr(),
      "Embedding whose vocabulary rows are split over the group (padded to a multiple of it).")
      .def(py::init<const Tensor&, GroupPtr, bool>(), py::arg("weight"), py::arg("group"),
           py::kw_only(), py::arg("sequence_parallel") = false)
      .def_readonly("vocab_start", &dist::VocabParallelEmbedding::vocab_start)
      .def_readonly("vocab_end", &dist::VocabParallelEmbedding::vocab_end);
}

void bind_pipeline(py::module_& d) {
  d.def(
      "make_pipeline_schedule",
      [](const std::string& kind, int stages, int64_t micro_batches, int virtual_stages,
         int stage) {
        py::list out;
        for (const dist::PipelineStep& s : dist::make_pipeline_schedule(
                 dist::parse_pipeline_schedule(kind), stages, micro_batches, virtual_stages, stage))
          out.append(py::make_tuple(s.kind == dist::PipelineStep::Kind::Forward ? "F" : "B",
                                    s.micro, s.chunk));
        return out;
      },
      py::arg("kind"), py::arg("stages"), py::arg("micro_batches"), py::arg("virtual_stages"),
      py::arg("stage"),
      "Stage `stage`'s steps as (\"F\" or \"B\", micro-batch, local chunk) tuples; kind is "
      "gpipe, 1f1b or interleaved.");
  py::class_<dist::PipelineExecutor>(
      d, "PipelineExecutor",
      "Runs a step's micro-batches through this rank's model chunks in a schedule's order.")
      .def(py::init([](GroupPtr group, const std::string& schedule, int virtual_stages) {
             return std::make_unique<dist::PipelineExecutor>(
                 std::move(group), dist::parse_pipeline_schedule(schedule), virtual_stages);
           }),
           py::arg("group"), py::arg("schedule") = "1f1b", py::arg("virtual_stages") = 1)
      .def_property_readonly("stage", &dist::PipelineExecutor::stage)
      .def_property_readonly("stages", &dist::PipelineExecutor::stages)
      .def_property_readonly("virtual_stages", &dist::PipelineExecutor::virtual_stages)
      .def("global_chunk", &dist::PipelineExecutor::global_chunk, py::arg("chunk"))
      .def(
          "run",
          [](dist::PipelineExecutor& e, int64_t micro_batches, py::function forward,
             py::object before_backward, bool forward_only) {
            dist::PipelineCallbacks cb;
            cb.forward = [&forward](int chunk, int64_t micro, const Tensor& input) {
              return forward(chunk, micro, tensor_or_none(input)).cast<Tensor>();
            };
            if (!before_backward.is_none())
              cb.before_backward = [&before_backward](int chunk, int64_t micro, bool last) {
                before_backward(chunk, micro, last);
              };
            cb.forward_only = forward_only;
            return e.run(micro_batches, cb);
          },
          py::arg("micro_batches"), py::arg("forward"), py::kw_only(),
          py::arg("before_backward") = py::none(), py::arg("forward_only") = false,
          "forward(chunk, micro, input) returns the chunk's output (input is None on the first "
          "global chunk), or the micro-batch's loss on the last; backward runs on loss / m. "
          "Returns the summed losses on every rank.");
}

}  // namespace

void init_model_parallel(py::module_& d) {
  bind_regions(d);
  bind_layers(d);
  bind_pipeline(d);
}

}  // namespace tessera::python
