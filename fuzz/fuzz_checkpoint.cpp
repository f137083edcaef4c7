// A checkpoint folder: input = model.safetensors, optimizer.safetensors and state.json separated
// by fuzz::kPartSeparator (an empty part leaves its file out). Checksums would stop almost every
// mutation at the first CRC, so state.json may say "auto" for its own "crc32c" and for a file's
// "bytes"/"crc32c": the harness fills in the right values and the loader gets past them.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "io/mapped_file.h"
#include "tessera/core/error.h"
#include "tessera/io/checkpoint.h"

namespace {

using namespace tessera;
using Json = nlohmann::json;

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

// state.json with every "auto" replaced by the value the loader checks against.
std::string fill_in_checksums(std::string_view state, std::string_view model,
                              std::string_view optimizer) {
  Json doc = Json::parse(state, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return std::string(state);
  if (doc.contains("files") && doc["files"].is_object()) {
    for (auto [name, bytes] :
         {std::pair{"model.safetensors", model}, std::pair{"optimizer.safetensors", optimizer}}) {
      Json& files = doc["files"];
      if (!files.contains(name) || !files[name].is_object()) continue;
      Json& record = files[name];
      if (record.value("bytes", Json()) == "auto") record["bytes"] = bytes.size();
      if (record.value("crc32c", Json()) == "auto")
        record["crc32c"] = hex32(io::detail::crc32c(bytes.data(), bytes.size()));
    }
  }
  if (doc.value("crc32c", Json()) == "auto") {
    Json body = doc;
    body.erase("crc32c");
    const std::string text = body.dump();
    doc["crc32c"] = hex32(io::detail::crc32c(text.data(), text.size()));
  }
  return doc.dump(2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const std::string_view input = fuzz::bytes(data, size);
  const auto parts = fuzz::split_parts(input, 3);
  const fs::path dir = fs::path(fuzz::scratch_dir()) / "ckpt_000001";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string state = fill_in_checksums(parts[2], parts[0], parts[1]);
  const std::pair<const char*, std::string_view> files[] = {
      {"ckpt_000001/model.safetensors", parts[0]},
      {"ckpt_000001/optimizer.safetensors", parts[1]},
      {"ckpt_000001/state.json", state}};
  for (const auto& [name, bytes] : files)
    if (!bytes.empty()) fuzz::write_scratch(name, bytes);
  try {
    const io::Checkpoint ckpt = io::load_checkpoint(io::resolve_checkpoint(fuzz::scratch_dir()));
    // What loaded must be usable: the config is a JSON object again.
    const Json config = Json::parse(ckpt.config, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object())
      fuzz::fail("load_checkpoint returned a config that is not a JSON object", input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
