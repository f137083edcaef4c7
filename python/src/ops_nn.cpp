// Neural-network functional ops (torch.nn.functional's names and arguments) and InfiniCore's
// functional extras (causal_softmax, random_sample, rearrange). tessera.nn.functional re-exports
// these; _C.functional holds the few whose argument order differs from the top-level function.
#include "bind.h"
#include "tessera/ops/infinicore.h"

namespace tessera::python {

namespace {

// softmax-style ops accept torch's dtype= (the input is cast first).
Tensor cast_if(const Tensor& x, py::object dtype) {
  return dtype.is_none() ? x : x.to(to_dtype(dtype));
}

void bind_activations_and_norms(py::module_& m, py::class_<Tensor>& cls) {
  def_op(
      m, cls, "softmax",
      [](const Tensor& x, int64_t dim, py::object dtype) {
        return softmax(cast_if(x, dtype), dim);
      },
      py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());
  def_op(
      m, cls, "log_softmax",
      [](const Tensor& x, int64_t dim, py::object dtype) {
        return log_softmax(cast_if(x, dtype), dim);
      },
      py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());
  def_op(m, cls, "causal_softmax", &tessera::causal_softmax);
  def_op(
      m, cls, "layer_norm",
      [](const Tensor& x, const IntList& shape, std::optional<Tensor> w, std::optional<Tensor> b,
         double eps) { return layer_norm(x, shape.values, w, b, eps); },
      py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
      py::arg("eps") = 1e-5);
  def_op(m, cls, "rms_norm", &tessera::rms_norm, py::arg("weight") = py::none(),
         py::arg("eps") = 1e-6);
  def_op(
      m, cls, "add_rms_norm",
      [](const Tensor& x, const Tensor& residual, std::optional<Tensor> w, double eps) {
        return add_rms_norm(x, residual, w, eps);
      },
      py::arg("residual"), py::arg("weight") = py::none(), py::arg("eps") = 1e-6,
      "(residual + input, rms_norm(residual + input)).");
  def_op(m, cls, "dropout", &tessera::dropout, py::arg("p") = 0.5, py::arg("training") = true,
         py::kw_only(), py::arg("generator") = py::none());
  def_op(m, cls, "swiglu", &tessera::swiglu, py::arg("up"), "silu(input) * up.");
  def_op(m, cls, "rope", &tessera::rope, py::arg("cos"), py::arg("sin"),
         py::arg("interleaved") = false);
  m.def(
      "rope_tables",
      [](int64_t seq_len, int64_t head_dim, double theta, py::object dtype) {
        return rope_tables(seq_len, head_dim, theta, to_dtype(dtype));
      },
      py::arg("seq_len"), py::arg("head_dim"), py::arg("theta") = 10000.0,
      py::arg("dtype") = dtype_object(kFloat32), "(cos, sin) tables [seq_len, head_dim / 2].");
}

void bind_losses_and_layers(py::module_& m, py::class_<Tensor>& cls) {
  def_op(
      m, cls, "cross_entropy",
      [](const Tensor& x, const Tensor& t, std::optional<Tensor> w,
         std::optional<int64_t> ignore_index, const std::string& reduction, double smoothing) {
        return cross_entropy(x, t, ignore_index, smoothing,
                             reduction_from_string(reduction, "cross_entropy"), w);
      },
      py::arg("target"), py::arg("weight") = py::none(), py::arg("ignore_index") = -100,
      py::arg("reduction") = "mean", py::arg("label_smoothing") = 0.0);
  def_op(
      m, cls, "nll_loss",
      [](const Tensor& x, const Tensor& t, std::optional<Tensor> w,
         std::optional<int64_t> ignore_index, const std::string& reduction) {
        return nll_loss(x, t, ignore_index, reduction_from_string(reduction, "nll_loss"), w);
      },
      py::arg("target"), py::arg("weight") = py::none(), py::arg("ignore_index") = -100,
      py::arg("reduction") = "mean");
  def_op(
      m, cls, "mse_loss",
      [](const Tensor& x, const Tensor& t, const std::string& reduction) {
        return mse_loss(x, t, reduction_from_string(reduction, "mse_loss"));
      },
      py::arg("target"), py::arg("reduction") = "mean");
  def_op(
      m, cls, "scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, std::optional<Tensor> mask,
         double dropout_p, bool is_causal, std::optional<double> scale) {
        TESSERA_CHECK(dropout_p == 0.0, NotImplementedError,
                      "[scaled_dot_product_attention] expected dropout_p == 0, got ", dropout_p,
                      " (apply dropout to the output instead)");
        return scaled_dot_product_attention(q, k, v, mask, is_causal, scale);
      },
      py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
      py::arg("dropout_p") = 0.0, py::arg("is_causal") = false, py::kw_only(),
      py::arg("scale") = py::none());
  def_op(m, cls, "linear", &tessera::linear, py::arg("weight"), py::arg("bias") = py::none());
  def_op(
      m, cls, "linear_gelu",
      [](const Tensor& x, const Tensor& w, std::optional<Tensor> b,
         const std::string& approximate) { return linear_gelu(x, w, b, approximate); },
      py::arg("weight"), py::arg("bias") = py::none(), py::arg("approximate") = "none",
      "gelu(linear(input, weight, bias), approximate) in one call.");
  // torch.embedding(weight, indices) vs torch.nn.functional.embedding(indices, weight).
  m.def("embedding", &tessera::embedding, py::arg("weight"), py::arg("input"),
        py::arg("padding_idx") = py::none());
  py::module_ f =
      m.def_submodule("functional", "nn.functional spellings that differ from tessera.*");
  f.def(
      "embedding",
      [](const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx) {
        return embedding(weight, input, padding_idx);
      },
      py::arg("input"), py::arg("weight"), py::arg("padding_idx") = py::none());
}

void bind_infinicore(py::module_& m, py::class_<Tensor>& cls) {
  def_op(
      m, cls, "random_sample",
      [](const Tensor& logits, std::optional<double> random_val, double topp, int64_t topk,
         double temperature, Generator* gen) {
        return random_sample(logits, random_val, topp, topk, temperature, gen);
      },
      py::arg("random_val") = py::none(), py::arg("topp") = 1.0, py::arg("topk") = 0,
      py::arg("temperature") = 1.0, py::kw_only(), py::arg("generator") = py::none(),
      "Top-k / top-p / temperature sampling of one index per row of logits [V] or [B, V].");
  def_op(
      m, cls, "rearrange",
      [](const Tensor& x, const std::string& pattern, const py::kwargs& sizes) {
        std::vector<std::pair<std::string, int64_t>> axes;
        for (auto [k, v] : sizes) axes.emplace_back(py::str(k), v.cast<int64_t>());
        return rearrange(x, pattern, axes);
      },
      py::arg("pattern"), "einops-style rearrange: rearrange(x, 'b t (h d) -> b h t d', h=4).");
}

}  // namespace

void init_ops_nn(py::module_& m) {
  auto cls = tensor_class(m);
  bind_activations_and_norms(m, cls);
  bind_losses_and_layers(m, cls);
  bind_infinicore(m, cls);
}

}  // namespace tessera::python
