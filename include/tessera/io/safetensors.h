#pragma once
// safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional
// "__metadata__": {string: string}}, then the raw little-endian data, offsets relative to its
// start. Reading maps the file and returns tensors that view the mapping without copying;
// writing is atomic (temp file, fsync, rename). Dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
//
// Malformed input (truncated file, bad JSON, offsets outside the data, overlapping tensors, an
// unknown dtype) throws ValueError "[load_safetensors] expected ..., got ..." naming the file;
// a file that cannot be opened throws RuntimeError.
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/core/tensor.h"
#include "tessera/nn/ordered_dict.h"

namespace tessera::io {

using Metadata = nn::OrderedDict<std::string>;

struct SafetensorsFile {
  // In the order of the data: for files written here, the order of the tensors given to
  // save_safetensors within each element size (the writer groups 8-, 4-, 2-, 1-byte types so
  // every tensor is aligned for zero-copy reads).
  nn::TensorDict tensors;
  Metadata metadata;
};

// Maps path (copy-on-write: writing to a tensor never changes the file) and returns CPU tensors
// viewing the mapping; the mapping lives while any of them does. A tensor whose data is not
// aligned to its element size (possible in files from other writers) is copied instead.
// Files should be replaced atomically (as save_safetensors does), not rewritten in place, while
// mapped.
SafetensorsFile load_safetensors(const std::string& path);
// Parses a file held in memory (the tensors are copies).
SafetensorsFile parse_safetensors(std::string_view bytes);

// Writes tensors (any device, any strides; copied to contiguous CPU memory as needed) and
// metadata to path atomically. Names must be unique and non-empty and may not be
// "__metadata__". Tensors that share memory are written once per name.
void save_safetensors(const std::string& path, const nn::TensorDict& tensors,
                      const Metadata& metadata = {});
// The bytes save_safetensors would write.
std::string serialize_safetensors(const nn::TensorDict& tensors, const Metadata& metadata = {});

// ---- module state dicts ----

// Writes a Module::state_dict(), storing tensors that alias each other (tied weights such as
// GPT-2's lm_head.weight = transformer.wte.weight) once: the other names go into
// __metadata__["tessera.aliases"] as a JSON object {alias: stored name}, as Hugging Face drops
// tied names. metadata is written alongside.
void save_state_dict(const std::string& path, const nn::TensorDict& state,
                     const Metadata& metadata = {});
// Reads a state dict saved by save_state_dict (or any safetensors file), restoring the alias
// names so Module::load_state_dict(strict) finds every key.
nn::TensorDict load_state_dict(const std::string& path, Metadata* metadata = nullptr);

}  // namespace tessera::io
