#pragma once
// Importers for checkpoints of other C trainers.
//
// llm.c GPT-2 (gpt2_124M.bin, train_gpt2.py's output): a header of 256 int32 (magic 20240326,
// version 3 = fp32 or 5 = bf16, max_seq_len, vocab_size, num_layers, num_heads, channels,
// padded_vocab_size), then the parameters, each stacked over layers: wte [Vp, C], wpe [maxT, C],
// ln1w, ln1b, qkvw [L, 3C, C], qkvb, attprojw, attprojb, ln2w, ln2b, fcw [L, 4C, C], fcb,
// fcprojw [L, C, 4C], fcprojb, lnfw, lnfb. The Linear layouts are already PyTorch's [out, in].
//
// llama2.c model files (run.c's format, export.py version 0, and version 1 with the "ak42"
// header): dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative in version 0:
// untied classifier), seq_len; then fp32 token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1
// (gate), w2 (down), w3 (up), rms_final, freq_cis_real/imag (ignored), wcls when untied
// (version 1 orders norms first; handled).
//
// llama2.c (like Meta's checkpoints) rotates interleaved pairs (x[2i], x[2i+1]); our Llama uses
// Hugging Face's half-split pairs (x[i], x[i + D/2]). The importer therefore permutes the rows
// of each head of wq and wk (row 2i -> i, 2i+1 -> i + D/2), as Hugging Face's conversion script
// does, so the imported state dict is also a valid Hugging Face LLaMA state dict.
//
// Malformed files (bad magic or version, sizes that do not match the header) throw ValueError
// "[load_llmc_gpt2] expected ..., got ..."; unreadable files RuntimeError.
#include <memory>
#include <string>

#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"

namespace tessera::io {

// The GPT2Config of an llm.c checkpoint from its header, checked against the file's size as
// load_llmc_gpt2 does, without reading the weights.
models::GPT2Config llmc_gpt2_config(const std::string& path);
// A float32 GPT-2 from an llm.c checkpoint. block_size = max_seq_len; the vocabulary padding
// rows (vocab_size..padded_vocab_size) are dropped, so logits cover the real vocabulary only
// (llm.c's softmax ignores them too).
std::shared_ptr<models::GPT2> load_llmc_gpt2(const std::string& path);
// Writes model as an llm.c version 3 (fp32) checkpoint, the vocabulary padded with zero rows to
// padded_vocab_size (0: the next multiple of 128, as llm.c). Atomic.
void save_llmc_gpt2(const std::string& path, models::GPT2& model, int64_t padded_vocab_size = 0);

// The LlamaConfig of a llama2.c model file from its header, checked against the file's size as
// load_llama2c does, without reading the weights.
models::LlamaConfig llama2c_config(const std::string& path);
// A float32 LLaMA from a llama2.c model file (rope_theta 10000, norm_eps 1e-5 as run.c).
std::shared_ptr<models::Llama> load_llama2c(const std::string& path);

}  // namespace tessera::io
