#include "tessera/io/safetensors.h"
#include "tessera/core/json_parse.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <tuple>
#include <vector>

#include "tessera/io/atomic_file.h"
#include "io/mapped_file.h"
#include "tessera/ops/creation.h"

namespace tessera::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts would need byte swaps");

using tessera::detail::str;
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kAliasesKey = "tessera.aliases";

constexpr std::pair<std::string_view, DType> kDTypeNames[] = {
    {"F64", kFloat64}, {"F32", kFloat32}, {"F16", kFloat16}, {"BF16", kBFloat16}, {"I64", kInt64},
    {"I32", kInt32},   {"I16", kInt16},   {"I8", kInt8},     {"U8", kUInt8},      {"BOOL", kBool}};

std::string_view dtype_code(DType t) {
  for (const auto& [name, dtype] : kDTypeNames)
    if (dtype == t) return name;
  TESSERA_ASSERT(false, "every dtype has a safetensors code");
  return {};
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// "[load_safetensors] expected <what> in '<source>', got <got>".
template <class... Args>
[[noreturn]] void bad_file(std::string_view source, const Args&... what_got) {
  throw ValueError(str("[load_safetensors] ", what_got..., " (file '", source, "')"));
}

Entry parse_entry(const std::string& name, const Json& info, uint64_t data_bytes,
                  std::string_view source) {
  if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
      !info.contains("data_offsets"))
    bad_file(source, "expected {dtype, shape, data_offsets} for tensor '", name, "', got ",
             info.dump());
  const Json& dtype = info["dtype"];
  const Json& shape = info["shape"];
  const Json& offsets = info["data_offsets"];
  Entry e{name, kFloat32, {}, 0, 0};
  bool known = false;
  if (dtype.is_string()) {
    for (const auto& [code, t] : kDTypeNames) {
      if (dtype.get<std::string>() == code) {
        e.dtype = t;
        known = true;
      }
    }
  }
  if (!known)
    bad_file(source, "expected a dtype among F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL for tensor '",
             name, "', got ", dtype.dump());
  if (!shape.is_array()) bad_file(source, "expected a shape array for '", name, "', got ", shape);
  // The product of the dims, zeros counted as ones: the largest stride plus one, which must fit
  // int64 even when a zero dim leaves the tensor empty.
  uint64_t extent = 1;
  bool empty = false;
  for (const Json& d : shape) {
    // Dims beyond 2^62 cannot index real data; the bound keeps every product below checked.
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 62))
      bad_file(source, "expected non-negative integer dims for '", name, "', got ", shape.dump());
    e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    empty |= d.get<uint64_t>() == 0;
    if (__builtin_mul_overflow(extent, std::max<uint64_t>(d.get<uint64_t>(), 1), &extent) ||
        extent > static_cast<uint64_t>(INT64_MAX))
      bad_file(source, "expected a shape whose size fits in 63 bits for '", name, "', got ",
               shape.dump());
  }
  const uint64_t numel = empty ? 0 : extent;
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    bad_file(source, "expected data_offsets [begin, end] for '", name, "', got ", offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, itemsize(e.dtype), &nbytes) || e.begin > e.end ||
      e.end - e.begin != nbytes)
    bad_file(source, "expected data_offsets spanning ", nbytes, " bytes for '", name, "' (",
             dtype.get<std::string>(), " ", shape.dump(), "), got ", offsets.dump());
  if (e.end > data_bytes)
    bad_file(source, "expected tensor '", name, "' within the ", data_bytes,
             " data bytes of the file (truncated?), got data_offsets ", offsets.dump());
  return e;
}

// Parses bytes [data, data + size). With storage (the mapping holding those bytes), aligned
// tensors view it; otherwise every tensor is a copy.
SafetensorsFile parse(const uint8_t* data, size_t size, const Storage* storage,
                      std::string_view source) {
  if (size < 8)
    bad_file(source, "expected at least 8 bytes (the header length), got ", size, " bytes");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, data, 8);
  if (header_bytes > size - 8 || header_bytes > kMaxHeaderBytes)
    bad_file(source, "expected a header length within the file's ", size - 8,
             " remaining bytes (at most 100 MB), got ", header_bytes,
             " (truncated or not safetensors?)");
  const char* header = reinterpret_cast<const char*>(data + 8);
  Json doc = parse_json(std::string_view(header, header_bytes));
  if (doc.is_discarded() || !doc.is_object())
    bad_file(source, "expected a JSON object header, got ",
             doc.is_discarded() ? "invalid JSON" : doc.type_name());

  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = size - data_start;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, info] : doc.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) bad_file(source, "expected __metadata__ to be an object, got ", info);
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string())
          bad_file(source, "expected string values in __metadata__, got ", key, ": ", value.dump());
        out.metadata.insert(key, value.get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_entry(name, info, data_bytes, source));
  }
  // As the reference reader: tensors tile the data exactly, without overlaps or holes.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t cursor = 0;
  for (const Entry& e : entries) {
    if (e.begin != cursor)
      bad_file(source, "expected tensor '", e.name, "' to start at data byte ", cursor,
               " (tensors must tile the data without gaps or overlaps), got ", e.begin);
    cursor = e.end;
  }
  if (cursor != data_bytes)
    bad_file(source, "expected ", cursor, " data bytes after the header, got ", data_bytes);

  for (const Entry& e : entries) {
    const uint8_t* src = data + data_start + e.begin;
    const size_t nbytes = e.end - e.begin;
    if (e.dtype == kBool) {
      // Reading a byte other than 0/1 as bool is undefined behaviour: reject it here.
      for (size_t i = 0; i < nbytes; ++i)
        if (src[i] > 1)
          bad_file(source, "expected 0 or 1 in BOOL tensor '", e.name, "', got ", int(src[i]));
    }
    const uint64_t abs_offset = data_start + e.begin;
    Tensor t;
    if (storage != nullptr && nbytes > 0 && abs_offset % itemsize(e.dtype) == 0) {
      t = Tensor(std::make_shared<TensorImpl>(*storage, e.shape, contiguous_strides(e.shape),
                                              static_cast<int64_t>(abs_offset / itemsize(e.dtype)),
                                              e.dtype));
    } else {
      t = empty(e.shape, TensorOptions(e.dtype));
      if (nbytes > 0) std::memcpy(t.data_ptr(), src, nbytes);
    }
    out.tensors.insert(e.name, std::move(t));
  }
  return out;
}

// Writes the file through sink(bytes, n): header, then each tensor's bytes.
void write(const nn::TensorDict& tensors, const Metadata& metadata,
           const std::function<void(const void*, size_t)>& sink) {
  for (const auto& [name, tensor] : tensors) {
    TESSERA_CHECK(
        !name.empty() && name != "__metadata__", ValueError,
        "[save_safetensors] expected tensor names other than '' and '__metadata__', got '", name,
        "'");
    TESSERA_CHECK(tensor.defined(), ValueError,
                  "[save_safetensors] expected a defined tensor for '", name,
                  "', got an undefined one");
  }
  // Largest elements first (stable): every tensor then starts at a multiple of its element size
  // (the header is padded to 8), so readers can view the data without copying.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensors.item(a).second.element_size() > tensors.item(b).second.element_size();
  });
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, tensor] = tensors.item(i);
    Tensor t = tensor.detach();
    if (t.device() != kCPU) t = t.to(kCPU);
    t = t.contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype_code(t.dtype())},
                    {"shape", t.sizes()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    data.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  const uint64_t header_bytes = text.size();
  sink(&header_bytes, 8);
  sink(text.data(), text.size());
  for (const Tensor& t : data)
    if (t.numel() > 0) sink(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
}

// Identity of a tensor's memory and layout: equal keys mean the two names alias one tensor.
using AliasKey = std::tuple<const void*, DType, Shape, Shape, int>;
AliasKey alias_key(const Tensor& t) {
  return {t.data_ptr(), t.dtype(), t.sizes(), t.strides(), static_cast<int>(t.device().type)};
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  detail::MappedFile file = detail::map_file(path, "load_safetensors");
  return parse(file.data(), file.size(), &file.storage, path);
}

SafetensorsFile parse_safetensors(std::string_view bytes) {
  return parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), nullptr, "<memory>");
}

void save_safetensors(const std::string& path, const nn::TensorDict& tensors,
                      const Metadata& metadata) {
  constexpr std::string_view op = "save_safetensors";
  tessera::io::write_file_atomic(
      path,
      [&](int fd) {
        write(tensors, metadata,
              [&](const void* p, size_t n) { tessera::io::write_all(fd, p, n, op); });
      },
      op);
}

std::string serialize_safetensors(const nn::TensorDict& tensors, const Metadata& metadata) {
  std::string out;
  write(tensors, metadata,
        [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

void save_state_dict(const std::string& path, const nn::TensorDict& state,
                     const Metadata& metadata) {
  nn::TensorDict unique;
  std::map<AliasKey, std::string> stored;
  Json aliases = Json::object();
  for (const auto& [name, t] : state) {
    TESSERA_CHECK(t.defined(), ValueError, "[save_state_dict] expected a defined tensor for '",
                  name, "', got an undefined one");
    auto [it, inserted] = stored.emplace(alias_key(t), name);
    if (inserted) {
      unique.insert(name, t);
    } else {
      aliases[name] = it->second;
    }
  }
  Metadata meta = metadata;
  if (!aliases.empty()) meta.insert_or_assign(kAliasesKey, aliases.dump());
  save_safetensors(path, unique, meta);
}

nn::TensorDict load_state_dict(const std::string& path, Metadata* metadata) {
  SafetensorsFile file = load_safetensors(path);
  if (const std::string* text = file.metadata.find(kAliasesKey)) {
    Json aliases = parse_json(*text);
    if (aliases.is_discarded() || !aliases.is_object())
      bad_file(path, "expected a JSON object in __metadata__[\"", kAliasesKey, "\"], got ", *text);
    for (const auto& [alias, target] : aliases.items()) {
      const Tensor* t = target.is_string() ? file.tensors.find(target.get<std::string>()) : nullptr;
      if (t == nullptr || file.tensors.contains(alias))
        bad_file(path, "expected alias '", alias, "' to name a stored tensor, got ", target.dump());
      file.tensors.insert(alias, *t);
    }
  }
  if (metadata != nullptr) *metadata = std::move(file.metadata);
  return std::move(file.tensors);
}

}  // namespace tessera::io
