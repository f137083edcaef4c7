#include "tessera/io/checkpoint.h"
#include "tessera/core/json_parse.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

#include "tessera/io/atomic_file.h"
#include "io/mapped_file.h"
#include "tessera/io/safetensors.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;
using tessera::detail::str;
using Json = nlohmann::json;

constexpr const char* kFormat = "tessera-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr std::string_view kPrefix = "ckpt_";
// Temp folders are hidden ("." first) so list_checkpoints and users' globs skip them.
constexpr std::string_view kTempPrefix = ".ckpt_";
constexpr std::string_view kTempMarker = ".tmp-";

template <class... Args>
[[noreturn]] void bad_checkpoint(const Args&... args) {
  throw ValueError(str("[load_checkpoint] ", args...));
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

// Shortest decimal that reads back as the same double (inf/nan included).
std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  TESSERA_ASSERT(ec == std::errc(), "to_chars of a double fits 64 chars");
  return std::string(buf, end);
}

std::optional<double> parse_double(const std::string& s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The step of a folder named ckpt_<digits>, else nullopt.
std::optional<int64_t> step_of(const std::string& name) {
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0)
    return std::nullopt;
  int64_t step = 0;
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last || step < 0) return std::nullopt;
  return step;
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Moves the finished temp folder to final. An existing final (a re-saved step) is swapped out
// atomically with renameat2(RENAME_EXCHANGE) and then deleted, so final always names a complete
// checkpoint.
void publish(const fs::path& temp, const fs::path& final) {
  if (::rename(temp.c_str(), final.c_str()) == 0) return;
  int err = errno;
  if (err == EEXIST || err == ENOTEMPTY) {
    if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, final.c_str(), RENAME_EXCHANGE) == 0) {
      // temp now holds the old checkpoint; the new one is published, so a failure here only
      // leaves a temp folder that remove_interrupted_writes sweeps later.
      std::error_code ec;
      fs::remove_all(temp, ec);
      return;
    }
    err = errno;
  }
  throw RuntimeError(str("[save_checkpoint] expected to rename '", temp.string(), "' to '",
                         final.string(), "', got ", std::strerror(err)));
}

// Deletes an old checkpoint. It is first renamed out of sight (one atomic step), so a crash
// midway through the deletion never leaves a ckpt_ folder with files missing;
// remove_interrupted_writes clears what is left.
void retire(const fs::path& folder) {
  std::error_code ec;
  const fs::path hidden =
      folder.parent_path() / str(".", folder.filename().string(), kTempMarker, "retired");
  fs::remove_all(hidden, ec);
  fs::rename(folder, hidden, ec);
  fs::remove_all(ec ? folder : hidden, ec);
}

Json file_record(const fs::path& path) {
  return {{"bytes", fs::file_size(path)},
          {"crc32c", hex32(detail::crc32c_file(path.string(), "save_checkpoint"))}};
}

// The CRC-32C of a state document without its "crc32c" field (keys sorted, compact dump: the
// same text whenever the same document is parsed and dumped again).
std::string state_checksum(Json doc) {
  doc.erase("crc32c");
  const std::string text = doc.dump();
  return hex32(detail::crc32c(text.data(), text.size()));
}

// A state of scalars only (scheduler, loss scaler) as a JSON object.
Json scalars_json(const optim::StateDict& state, const char* what) {
  Json out = Json::object();
  for (const auto& [name, value] : state.scalars) {
    TESSERA_CHECK(std::isfinite(value), ValueError, "[save_checkpoint] expected finite ", what,
                  " values, got ", name, " = ", value);
    out[name] = value;
  }
  TESSERA_CHECK(state.tensors.empty(), ValueError, "[save_checkpoint] expected a ", what,
                " state without tensors, got ", state.tensors.size());
  return out;
}

Json state_json(const Checkpoint& ckpt, const fs::path& folder) {
  Json config = parse_json(ckpt.config);
  TESSERA_CHECK(!config.is_discarded() && config.is_object(), ValueError,
                "[save_checkpoint] expected config to be a JSON object, got '", ckpt.config, "'");
  Json doc = {{"format", kFormat},
              {"version", kVersion},
              {"step", ckpt.step},
              {"scheduler", scalars_json(ckpt.scheduler, "scheduler")},
              {"grad_scaler", scalars_json(ckpt.grad_scaler, "grad_scaler")},
              {"rng", {{"seed", ckpt.rng[0]}, {"offset", ckpt.rng[1]}}},
              {"data", {{"epoch", ckpt.data.epoch}, {"batch", ckpt.data.batch}}},
              {"config", config},
              {"files",
               {{kModelFile, file_record(folder / kModelFile)},
                {kOptimizerFile, file_record(folder / kOptimizerFile)}}}};
  doc["crc32c"] = state_checksum(doc);
  return doc;
}

// Whether v is an integer T holds (nlohmann's get<T> casts floats and wraps negatives).
template <class T>
bool holds_integer(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= std::numeric_limits<T>::max();
  if (!v.is_number_integer()) return false;
  const int64_t i = v.get<int64_t>();
  return std::is_signed_v<T> && i >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         i <= static_cast<int64_t>(std::numeric_limits<T>::max());
}

// doc[key] as T (a string or an integer type), or ValueError naming the field.
template <class T>
T field(const Json& doc, const char* key, const fs::path& file) {
  const Json* v = doc.is_object() && doc.contains(key) ? &doc.at(key) : nullptr;
  bool ok;
  if constexpr (std::is_same_v<T, std::string>)
    ok = v && v->is_string();
  else
    ok = v && holds_integer<T>(*v);
  if (!ok)
    bad_checkpoint("expected field '", key, "' to be ",
                   std::is_same_v<T, std::string> ? "a string" : "an integer in range", " in '",
                   file.string(), "', got ", v ? v->dump() : "none");
  return v->get<T>();
}

// doc[key], an object of numbers, as a scalars-only state.
optim::StateDict read_scalars(const Json& doc, const char* key, const fs::path& file) {
  if (!doc.contains(key) || !doc.at(key).is_object())
    bad_checkpoint("expected an object '", key, "' in '", file.string(), "', got ",
                   doc.contains(key) ? doc.at(key).dump() : "none");
  optim::StateDict state;
  for (const auto& [name, value] : doc.at(key).items()) {
    if (!value.is_number())
      bad_checkpoint("expected numbers in '", key, "' of '", file.string(), "', got ", name,
                     " = ", value.dump());
    state.scalars.insert(name, value.get<double>());
  }
  return state;
}

void verify_file(const fs::path& folder, const char* name, const Json& files) {
  const fs::path path = folder / name;
  if (!files.is_object() || !files.contains(name))
    bad_checkpoint("expected a checksum for '", name, "' in '", (folder / kStateFile).string(),
                   "', got none");
  const Json& record = files.at(name);
  const auto bytes = field<uint64_t>(record, "bytes", folder / kStateFile);
  const auto crc = field<std::string>(record, "crc32c", folder / kStateFile);
  if (!fs::is_regular_file(path))
    bad_checkpoint("expected file '", path.string(), "', got ",
                   fs::exists(path) ? "something else" : "none");
  const uint64_t actual_bytes = fs::file_size(path);
  if (actual_bytes != bytes)
    bad_checkpoint("expected ", bytes, " bytes in '", path.string(), "' (checksum mismatch), got ",
                   actual_bytes);
  const std::string actual = hex32(detail::crc32c_file(path.string(), "load_checkpoint"));
  if (actual != crc)
    bad_checkpoint("expected CRC-32C ", crc, " for '", path.string(),
                   "' (checksum mismatch: the file is corrupt), got ", actual);
}

}  // namespace

Checkpoint capture_checkpoint(int64_t step, const TrainingObjects& objects, std::string config) {
  Checkpoint ckpt;
  ckpt.step = step;
  if (objects.model != nullptr) ckpt.model = objects.model->state_dict();
  if (objects.optimizer != nullptr) ckpt.optimizer = objects.optimizer->state_dict();
  if (objects.scheduler != nullptr) ckpt.scheduler = objects.scheduler->state_dict();
  if (objects.grad_scaler != nullptr) ckpt.grad_scaler = objects.grad_scaler->state_dict();
  Generator& gen = objects.generator != nullptr ? *objects.generator : default_generator();
  ckpt.rng = gen.get_state();
  if (objects.loader != nullptr) ckpt.data = objects.loader->state();
  ckpt.config = std::move(config);
  return ckpt;
}

int64_t restore_checkpoint(const Checkpoint& ckpt, const TrainingObjects& objects) {
  if (objects.model != nullptr) objects.model->load_state_dict(ckpt.model, /*strict=*/true);
  if (objects.optimizer != nullptr) objects.optimizer->load_state_dict(ckpt.optimizer);
  if (objects.scheduler != nullptr) objects.scheduler->load_state_dict(ckpt.scheduler);
  if (objects.grad_scaler != nullptr && !ckpt.grad_scaler.scalars.empty())
    objects.grad_scaler->load_state_dict(ckpt.grad_scaler);
  Generator& gen = objects.generator != nullptr ? *objects.generator : default_generator();
  gen.set_state(ckpt.rng);
  if (objects.loader != nullptr) objects.loader->load_state(ckpt.data);
  return ckpt.step;
}

std::string checkpoint_folder_name(int64_t step) {
  TESSERA_CHECK(step >= 0, ValueError, "[save_checkpoint] expected step >= 0, got ", step);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "ckpt_%06lld", static_cast<long long>(step));
  return buf;
}

void remove_interrupted_writes(const std::string& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string n = entry.path().filename().string();
    if (n.starts_with(kTempPrefix) && n.find(kTempMarker) != std::string::npos)
      fs::remove_all(entry.path(), ec);
  }
}

std::string save_checkpoint(const std::string& root, const Checkpoint& ckpt, int keep_last) {
  const std::string name = checkpoint_folder_name(ckpt.step);
  const fs::path root_path(root);
  std::error_code ec;
  fs::create_directories(root_path, ec);
  TESSERA_CHECK(!ec, RuntimeError, "[save_checkpoint] expected to create folder '", root, "', got ",
                ec.message());
  remove_interrupted_writes(root);

  std::string pattern =
      (root_path / (str(kTempPrefix, name.substr(kPrefix.size()), kTempMarker, "XXXXXX"))).string();
  TESSERA_CHECK(::mkdtemp(pattern.data()) != nullptr, RuntimeError,
                "[save_checkpoint] expected to create a temp folder in '", root, "', got ",
                std::strerror(errno));
  const fs::path temp(pattern);
  const fs::path final = root_path / name;
  try {
    save_state_dict((temp / kModelFile).string(), ckpt.model);
    Metadata scalars;
    for (const auto& [key, value] : ckpt.optimizer.scalars)
      scalars.insert(key, format_double(value));
    save_safetensors((temp / kOptimizerFile).string(), ckpt.optimizer.tensors, scalars);
    const Json state = state_json(ckpt, temp);
    tessera::io::write_file_atomic((temp / kStateFile).string(), state.dump(2) + "\n",
                                       "save_checkpoint");
    publish(temp, final);
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
  fsync_dir(root_path);
  prune_checkpoints(root, keep_last, final.string());
  return final.string();
}

void prune_checkpoints(const std::string& root, int keep_last, const std::string& keep) {
  if (keep_last <= 0) return;
  std::vector<std::string> all = list_checkpoints(root);
  int64_t excess = static_cast<int64_t>(all.size()) - keep_last;
  for (const std::string& folder : all) {
    if (excess <= 0) break;
    if (!keep.empty() && fs::path(folder) == fs::path(keep)) continue;
    retire(folder);
    --excess;
  }
}

Checkpoint load_checkpoint(const std::string& folder) {
  const fs::path dir(folder);
  const fs::path state_path = dir / kStateFile;
  if (!fs::exists(state_path))
    bad_checkpoint("expected a checkpoint folder holding ", kStateFile, ", got '", folder, "'");
  detail::MappedFile state_bytes = detail::map_file(state_path.string(), "load_checkpoint");
  const char* text = reinterpret_cast<const char*>(state_bytes.data());
  Json doc = parse_json(std::string_view(text, state_bytes.size()));
  if (doc.is_discarded() || !doc.is_object())
    bad_checkpoint("expected a JSON object in '", state_path.string(), "', got ",
                   doc.is_discarded() ? "invalid JSON (corrupt file?)" : doc.type_name());
  if (field<std::string>(doc, "format", state_path) != kFormat)
    bad_checkpoint("expected format '", kFormat, "' in '", state_path.string(), "', got ",
                   doc["format"].dump());
  const auto version = field<int>(doc, "version", state_path);
  if (version != kVersion)
    bad_checkpoint("expected version ", kVersion, " in '", state_path.string(), "', got ", version);
  const auto crc = field<std::string>(doc, "crc32c", state_path);
  if (state_checksum(doc) != crc)
    bad_checkpoint("expected CRC-32C ", crc, " of the content of '", state_path.string(),
                   "' (checksum mismatch: the file was modified or is corrupt), got ",
                   state_checksum(doc));
  const Json& files = doc["files"];
  verify_file(dir, kModelFile, files);
  verify_file(dir, kOptimizerFile, files);

  Checkpoint ckpt;
  ckpt.step = field<int64_t>(doc, "step", state_path);
  ckpt.scheduler = read_scalars(doc, "scheduler", state_path);
  if (doc.contains("grad_scaler"))  // absent from checkpoints saved before scalers were
    ckpt.grad_scaler = read_scalars(doc, "grad_scaler", state_path);
  const Json& rng = doc["rng"];
  ckpt.rng = {field<uint64_t>(rng, "seed", state_path), field<uint64_t>(rng, "offset", state_path)};
  const Json& data = doc["data"];
  ckpt.data = {field<int64_t>(data, "epoch", state_path),
               field<int64_t>(data, "batch", state_path)};
  if (!doc["config"].is_object())
    bad_checkpoint("expected 'config' to be an object in '", state_path.string(), "', got ",
                   doc["config"].dump());
  ckpt.config = doc["config"].dump();

  ckpt.model = load_state_dict((dir / kModelFile).string());
  SafetensorsFile optimizer = load_safetensors((dir / kOptimizerFile).string());
  ckpt.optimizer.tensors = std::move(optimizer.tensors);
  for (const auto& [key, text_value] : optimizer.metadata) {
    std::optional<double> v = parse_double(text_value);
    if (!v)
      bad_checkpoint("expected a number for optimizer scalar '", key, "' in '",
                     (dir / kOptimizerFile).string(), "', got '", text_value, "'");
    ckpt.optimizer.scalars.insert(key, *v);
  }
  return ckpt;
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::optional<int64_t> step = step_of(entry.path().filename().string());
    if (step && fs::exists(entry.path() / kStateFile, ec))
      found.emplace_back(*step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

namespace {

// The step of a folder list_checkpoints returned.
int64_t listed_step(const std::string& folder) {
  return *step_of(fs::path(folder).filename().string());
}

}  // namespace

void remove_checkpoints_after(const std::string& root, int64_t step) {
  for (const std::string& folder : list_checkpoints(root))
    if (listed_step(folder) > step) retire(folder);
}

std::vector<int64_t> checkpoint_steps(const std::string& root) {
  std::vector<int64_t> steps;
  for (const std::string& folder : list_checkpoints(root)) steps.push_back(listed_step(folder));
  return steps;
}

std::optional<std::string> latest_checkpoint(const std::string& root) {
  std::vector<std::string> all = list_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string resolve_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / kStateFile)) return path;
  if (std::optional<std::string> latest = latest_checkpoint(path)) return *latest;
  throw ValueError(
      str("[resolve_checkpoint] expected a checkpoint folder or a folder holding "
          "ckpt_<step> checkpoints, got '",
          path, "'"));
}

}  // namespace tessera::io
