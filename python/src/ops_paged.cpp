// tessera._C._ops: InfiniCore's KV-cache attention ops (tessera/ops/paged_attention.h), which the
// Python module tessera.ops re-exports under infinicore.ops' names and argument order.
#include "bind.h"
#include "tessera/ops/paged_attention.h"

namespace tessera::python {

void init_ops_paged(py::module_& m) {
  // A private submodule: `from tessera._C import *` must not bring `attention` to the top level.
  py::module_ ops = m.def_submodule("_ops", "InfiniCore's KV-cache attention ops");
  ops.def(
      "paged_caching",
      [](const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
         const Tensor& slot_mapping) {
        tessera::paged_caching(k, v, k_cache, v_cache, slot_mapping);
        return std::make_pair(k_cache, v_cache);
      },
      py::arg("k"), py::arg("v"), py::arg("k_cache"), py::arg("v_cache"), py::arg("slot_mapping"),
      "Writes k, v [N, Hkv, D] into the caches [num_blocks, Hkv, D, block_size] at slot_mapping "
      "[N] (-1 skips); in place, returns (k_cache, v_cache).");
  // infinicore.ops' order: alibi_slopes before scale (scale None: 1 / sqrt(D)).
  ops.def(
      "paged_attention",
      [](const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& tables,
         const Tensor& seq_lens, std::optional<Tensor> alibi_slopes, std::optional<double> scale) {
        return tessera::paged_attention(q, k_cache, v_cache, tables, seq_lens, scale, alibi_slopes);
      },
      py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("block_tables"),
      py::arg("seq_lens"), py::arg("alibi_slopes") = py::none(), py::arg("scale") = py::none(),
      "Decode attention of q [S, Hq, D] over the paged caches; returns [S, Hq, D].");
  ops.def(
      "paged_attention_prefill",
      [](const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& tables,
         const Tensor& history_lens, const Tensor& cu_seqlens_q, std::optional<Tensor> alibi_slopes,
         std::optional<double> scale) {
        return tessera::paged_attention_prefill(q, k_cache, v_cache, tables, history_lens,
                                                cu_seqlens_q, scale, alibi_slopes);
      },
      py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("block_tables"),
      py::arg("history_lens"), py::arg("cu_seqlens_q"), py::arg("alibi_slopes") = py::none(),
      py::arg("scale") = py::none(),
      "Causal prefill of packed query chunks q [total_q, Hq, D] after each sequence's "
      "cached history; returns [total_q, Hq, D].");
  ops.def("attention", &tessera::attention, py::arg("q"), py::arg("k"), py::arg("v"),
          py::arg("k_cache"), py::arg("v_cache"), py::arg("pos"),
          "Writes k, v [Hkv, T, D] into the contiguous caches [Hkv, capacity, D] at pos, then "
          "causal attention of q [Hq, T, D] over positions 0..pos + T - 1; returns [T, Hq, D].");
}

}  // namespace tessera::python
