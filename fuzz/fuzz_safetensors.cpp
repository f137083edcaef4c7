// safetensors bytes, parsed in memory and mapped from a file (zero-copy views, load_state_dict's
// alias table). A file that parses must also survive the writer: serialize, parse again, and get
// the same tensors and metadata back.
#include <cstring>

#include "fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/io/safetensors.h"

namespace {

using namespace tessera;

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() &&
         (a.numel() == 0 ||
          std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.numel()) * a.element_size()) == 0);
}

void check_writer_round_trip(const io::SafetensorsFile& f, std::string_view input) {
  std::string again;
  try {
    again = io::serialize_safetensors(f.tensors, f.metadata);
  } catch (const ValueError&) {
    return;  // names the writer refuses (""): the reader may accept them, as the reference does
  }
  const io::SafetensorsFile g = io::parse_safetensors(again);
  if (g.tensors.size() != f.tensors.size() || g.metadata.size() != f.metadata.size())
    fuzz::fail("the rewritten file holds other entries", input);
  for (const auto& [name, t] : f.tensors) {
    const Tensor* u = g.tensors.find(name);
    if (u == nullptr || !same_tensor(t, *u)) fuzz::fail("tensor changed by a rewrite", input);
  }
  for (const auto& [key, value] : f.metadata) {
    const std::string* v = g.metadata.find(key);
    if (v == nullptr || *v != value) fuzz::fail("metadata changed by a rewrite", input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::bytes(data, size);
  try {
    check_writer_round_trip(io::parse_safetensors(input), input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  try {
    io::Metadata metadata;
    io::load_state_dict(fuzz::write_scratch("input.safetensors", input), &metadata);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
