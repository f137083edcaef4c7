// Checkpoints: a resumed run continues bit-for-bit (model, AdamW state, scheduler, RNG, data
// position, step); corrupt files are detected by their checksums; only the newest K are kept;
// a failed save leaves the previous checkpoints untouched.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "io/mapped_file.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// A tiny GPT-2 training run with everything a checkpoint must carry: dropout (RNG), AdamW with
// two groups, warmup + cosine, and a shuffled loader over random windows.
struct TinyRun {
  std::shared_ptr<models::GPT2> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::WarmupCosineLR> sched;
  std::unique_ptr<data::DataLoader> loader;

  explicit TinyRun(uint64_t init_seed) {
    manual_seed(init_seed);
    models::GPT2Config c;
    c.vocab_size = 32;
    c.block_size = 8;
    c.n_layer = 1;
    c.n_head = 2;
    c.n_embd = 16;
    c.dropout = 0.1;
    model = std::make_shared<models::GPT2>(c);
    optim::AdamOptions o;
    o.lr = 1e-2;
    opt = std::make_unique<optim::AdamW>(optim::weight_decay_param_groups(model->parameters(), 0.1),
                                         o);
    sched = std::make_unique<optim::WarmupCosineLR>(*opt, 2, 10, 1e-3);
    std::mt19937 rng(0);
    std::vector<int32_t> ids(60);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 32);
    data::LanguageModelOptions lm;
    lm.seq_len = 8;
    lm.sampling = data::WindowSampling::Random;
    lm.seed = 5;
    auto dataset =
        std::make_shared<data::LanguageModelDataset>(data::TokenBuffer::from_ids(ids), lm);
    data::DataLoaderOptions lo;
    lo.batch_size = 2;
    lo.shuffle = true;
    lo.seed = 3;
    lo.prefetch = 0;
    loader = std::make_unique<data::DataLoader>(dataset, lo);
  }

  float step() {
    std::optional<data::Batch> batch = loader->next();
    if (!batch) batch = loader->next();  // next epoch
    opt->zero_grad();
    Tensor loss = model->loss((*batch)[0], (*batch)[1]);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    opt->step();
    sched->step();
    return loss.item<float>();
  }

  io::TrainingObjects objects() { return {model.get(), opt.get(), sched.get(), loader.get()}; }
};

std::vector<float> values(const Tensor& t) {
  Tensor c = t.detach().to(kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

TEST(Checkpoint, ResumedRunContinuesBitForBit) {
  testing::TempDir dir;
  const std::string root = dir.file("out");
  TinyRun a(1);
  for (int i = 0; i < 3; ++i) a.step();
  const std::string config = R"({"model":"tiny","lr":0.01})";
  const std::string folder =
      io::save_checkpoint(root, io::capture_checkpoint(3, a.objects(), config));
  EXPECT_EQ(fs::path(folder).filename(), "ckpt_000003");
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json"})
    EXPECT_TRUE(fs::exists(fs::path(folder) / f)) << f;
  std::vector<float> expected_losses;
  for (int i = 0; i < 6; ++i) expected_losses.push_back(a.step());  // crosses an epoch

  TinyRun b(2);  // different weights, fresh optimizer/scheduler/loader, other RNG state
  io::Checkpoint ckpt = io::load_checkpoint(io::resolve_checkpoint(root));
  EXPECT_EQ(ckpt.config, R"({"lr":0.01,"model":"tiny"})");
  EXPECT_EQ(io::restore_checkpoint(ckpt, b.objects()), 3);
  EXPECT_EQ(b.sched->last_step(), 3);
  EXPECT_EQ(b.loader->state().batch, 3);
  std::vector<float> resumed_losses;
  for (int i = 0; i < 6; ++i) resumed_losses.push_back(b.step());
  EXPECT_EQ(resumed_losses, expected_losses);
  for (const auto& [name, p] : a.model->named_parameters())
    EXPECT_EQ(values(p), values(b.model->named_parameters().at(name))) << name;
}

// The checkpoint of a tiny run after one step, saved under dir/out; returns its folder.
std::string one_step_checkpoint(const testing::TempDir& dir) {
  TinyRun a(1);
  a.step();
  return io::save_checkpoint(dir.file("out"), io::capture_checkpoint(1, a.objects()));
}

TEST(Checkpoint, CorruptionIsDetected) {
  testing::TempDir dir;
  const std::string folder = one_step_checkpoint(dir);
  const fs::path model = fs::path(folder) / "model.safetensors";
  const fs::path optimizer = fs::path(folder) / "optimizer.safetensors";
  const fs::path state = fs::path(folder) / "state.json";
  auto rewrite = [](const fs::path& p, const std::function<void(std::string&)>& edit) {
    std::ifstream in(p, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    in.close();
    fs::permissions(p, fs::perms::owner_write, fs::perm_options::add);
    edit(bytes);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  };
  fs::copy(folder, dir.file("backup"), fs::copy_options::recursive);
  auto restore_backup = [&] {
    fs::remove_all(folder);
    fs::copy(dir.file("backup"), folder, fs::copy_options::recursive);
  };

  rewrite(model, [](std::string& b) { b[b.size() / 2] ^= 0x10; });
  testing::expect_error<ValueError>([&] { io::load_checkpoint(folder); }, "load_checkpoint",
                                    "model.safetensors' (checksum mismatch");
  restore_backup();
  rewrite(optimizer, [](std::string& b) { b.resize(b.size() - 4); });
  testing::expect_error<ValueError>([&] { io::load_checkpoint(folder); }, "load_checkpoint",
                                    "optimizer.safetensors' (checksum mismatch");
  restore_backup();
  rewrite(state, [](std::string& b) { b.replace(b.find("\"step\": 1"), 9, "\"step\": 2"); });
  testing::expect_error<ValueError>([&] { io::load_checkpoint(folder); }, "load_checkpoint",
                                    "state.json' (checksum mismatch");
  restore_backup();
  rewrite(state, [](std::string& b) { b.resize(b.size() / 2); });
  testing::expect_error<ValueError>([&] { io::load_checkpoint(folder); }, "load_checkpoint",
                                    "invalid JSON");
  restore_backup();
  fs::remove(optimizer);
  testing::expect_error<ValueError>([&] { io::load_checkpoint(folder); }, "load_checkpoint",
                                    "expected file");
  restore_backup();
  EXPECT_EQ(io::load_checkpoint(folder).step, 1);
}

// state.json rewritten by edit with its own checksum made right again, so the loader reads past
// the checksum and meets the edited content.
void edit_state(const fs::path& state, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(state);
  nlohmann::json doc = nlohmann::json::parse(in);
  in.close();
  edit(doc);
  doc.erase("crc32c");
  const std::string text = doc.dump();
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08x", io::detail::crc32c(text.data(), text.size()));
  doc["crc32c"] = crc;
  fs::permissions(state, fs::perms::owner_write, fs::perm_options::add);
  std::ofstream(state, std::ios::trunc) << doc.dump(2);
}

// fuzz_checkpoint found a state.json without "scheduler" (its checksums right) crashing the
// loader; a missing or malformed scalars object is a ValueError naming it.
TEST(Checkpoint, MissingOrMalformedScalarStatesAreValueErrors) {
  testing::TempDir dir;
  const fs::path folder = one_step_checkpoint(dir);
  const fs::path state = folder / "state.json";
  edit_state(state, [](nlohmann::json& doc) { doc.erase("scheduler"); });
  testing::expect_error<ValueError>([&] { io::load_checkpoint(folder.string()); },
                                    "load_checkpoint", "expected an object 'scheduler'");
  edit_state(state, [](nlohmann::json& doc) {
    doc["scheduler"] = nlohmann::json::object();
    doc["grad_scaler"] = 3;
  });
  testing::expect_error<ValueError>([&] { io::load_checkpoint(folder.string()); },
                                    "load_checkpoint", "expected an object 'grad_scaler'");
  edit_state(state, [](nlohmann::json& doc) { doc.erase("grad_scaler"); });  // as saved before
  EXPECT_TRUE(io::load_checkpoint(folder.string()).grad_scaler.scalars.empty());
}

// nlohmann's get<uint64_t> cast 1e300 (undefined) and wrapped -1: integer fields take integers
// in their type's range only; a data file that is a folder is named, not a filesystem_error.
TEST(Checkpoint, IntegerFieldsOutOfRangeAndFoldersForFilesAreValueErrors) {
  testing::TempDir dir;
  const fs::path folder = one_step_checkpoint(dir);
  const fs::path state = folder / "state.json";
  auto expect_bad_field = [&](const char* key, const nlohmann::json& value) {
    edit_state(state, [&](nlohmann::json& doc) {
      doc["step"] = 1;
      doc["rng"] = {{"seed", 7}, {"offset", 0}};
      nlohmann::json& parent = std::string(key) == "step" ? doc : doc["rng"];
      parent[key] = value;
    });
    testing::expect_error<ValueError>(
        [&] { io::load_checkpoint(folder.string()); }, "load_checkpoint",
        std::string("expected field '") + key + "' to be an integer in range");
  };
  expect_bad_field("seed", 1e300);
  expect_bad_field("seed", -1);
  expect_bad_field("offset", 2.5);
  expect_bad_field("step", "1");
  edit_state(state, [](nlohmann::json& doc) {
    doc["step"] = 1;
    doc["rng"] = {{"seed", 7}, {"offset", 18446744073709551615ull}};
  });
  EXPECT_EQ(io::load_checkpoint(folder.string()).rng[1], 18446744073709551615ull);
  fs::remove(folder / "optimizer.safetensors");
  fs::create_directory(folder / "optimizer.safetensors");
  testing::expect_error<ValueError>([&] { io::load_checkpoint(folder.string()); },
                                    "load_checkpoint", "got something else");
}

io::Checkpoint small_checkpoint(int64_t step, float value) {
  io::Checkpoint c;
  c.step = step;
  c.model.insert("w", full({2, 2}, value));
  c.optimizer.tensors.insert("state.0.exp_avg", full({2}, value));
  c.optimizer.scalars.insert("state.0.step", 0.1 * static_cast<double>(step));
  c.scheduler.scalars.insert("last_step", static_cast<double>(step));
  c.rng = {42, static_cast<uint64_t>(step) << 40};
  c.data = {2, step};
  return c;
}

std::vector<std::string> names(const std::vector<std::string>& folders) {
  std::vector<std::string> out;
  for (const std::string& f : folders) out.push_back(fs::path(f).filename().string());
  return out;
}

TEST(Checkpoint, KeepsTheLastKAndFindsTheLatest) {
  testing::TempDir dir;
  const std::string root = dir.file("out");
  EXPECT_FALSE(io::latest_checkpoint(root).has_value());
  EXPECT_TESSERA_ERROR(io::resolve_checkpoint(root), ValueError, "[resolve_checkpoint]");
  for (int64_t step : {5, 10, 15, 20, 1000000})
    io::save_checkpoint(root, small_checkpoint(step, 1.f), 2);
  EXPECT_EQ(names(io::list_checkpoints(root)),
            (std::vector<std::string>{"ckpt_000020", "ckpt_1000000"}));
  EXPECT_EQ(io::latest_checkpoint(root), dir.file("out/ckpt_1000000"));
  EXPECT_EQ(io::resolve_checkpoint(dir.file("out/ckpt_000020")), dir.file("out/ckpt_000020"));

  io::save_checkpoint(root, small_checkpoint(30, 1.f), /*keep_last=*/0);
  EXPECT_EQ(io::list_checkpoints(root).size(), 3u);
  EXPECT_EQ(io::checkpoint_steps(root), (std::vector<int64_t>{20, 30, 1000000}));
  // Pruning later (as model-parallel ranks do once all saved) deletes the oldest but `keep`.
  io::prune_checkpoints(root, 0);
  EXPECT_EQ(io::checkpoint_steps(root).size(), 3u);
  io::prune_checkpoints(root, 2, dir.file("out/ckpt_000020"));
  EXPECT_EQ(io::checkpoint_steps(root), (std::vector<int64_t>{20, 1000000}));

  io::Checkpoint loaded = io::load_checkpoint(*io::latest_checkpoint(root));
  const io::Checkpoint want = small_checkpoint(1000000, 1.f);
  EXPECT_EQ(loaded.step, want.step);
  EXPECT_EQ(loaded.rng, want.rng);
  EXPECT_EQ(loaded.data.epoch, 2);
  EXPECT_EQ(loaded.data.batch, 1000000);
  EXPECT_EQ(loaded.optimizer.scalars.at("state.0.step"), 0.1 * 1000000);  // exact round trip
  EXPECT_EQ(loaded.scheduler.scalars.at("last_step"), 1000000.0);
  EXPECT_EQ(values(loaded.optimizer.tensors.at("state.0.exp_avg")), values(full({2}, 1.f)));
  // A model-parallel resume drops steps newer than the one all ranks hold.
  io::save_checkpoint(root, small_checkpoint(40, 1.f), /*keep_last=*/0);
  io::remove_checkpoints_after(root, 40);
  EXPECT_EQ(io::checkpoint_steps(root), (std::vector<int64_t>{20, 40}));
}

TEST(Checkpoint, FailedSaveLeavesPreviousCheckpointsIntact) {
  testing::TempDir dir;
  const std::string root = dir.file("out");
  io::save_checkpoint(root, small_checkpoint(10, 1.f));

  // Fails after model.safetensors was written (the optimizer file has an undefined tensor).
  io::Checkpoint bad = small_checkpoint(20, 2.f);
  bad.optimizer.tensors.insert("state.1.exp_avg", Tensor());
  EXPECT_TESSERA_ERROR(io::save_checkpoint(root, bad), ValueError, "undefined");
  // Fails while writing state.json; and re-saving step 10 fails the same way.
  bad = small_checkpoint(10, 3.f);
  bad.config = "[1, 2]";
  EXPECT_TESSERA_ERROR(io::save_checkpoint(root, bad), ValueError, "JSON object");
  bad = small_checkpoint(10, 3.f);
  bad.scheduler.scalars.insert("lr", std::nan(""));
  EXPECT_TESSERA_ERROR(io::save_checkpoint(root, bad), ValueError, "finite");

  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(root)) entries.push_back(e.path().filename());
  EXPECT_EQ(entries, std::vector<std::string>{"ckpt_000010"}) << "no temp folders left";
  io::Checkpoint loaded = io::load_checkpoint(*io::latest_checkpoint(root));
  EXPECT_EQ(values(loaded.model.at("w")), values(full({2, 2}, 1.f)));

  // A crash midway leaves a hidden temp folder (and maybe a stray folder without state.json):
  // neither is a checkpoint, and the next save clears the temp folder.
  fs::create_directories(fs::path(root) / ".ckpt_000030.tmp-abcdef");
  std::ofstream(fs::path(root) / ".ckpt_000030.tmp-abcdef" / "model.safetensors") << "partial";
  fs::create_directories(fs::path(root) / "ckpt_000040");
  EXPECT_EQ(io::latest_checkpoint(root), dir.file("out/ckpt_000010"));
  // A deletion of an old checkpoint cut short leaves it renamed out of sight; it goes too.
  fs::create_directories(fs::path(root) / ".ckpt_000005.tmp-retired");
  io::remove_interrupted_writes(root);
  EXPECT_FALSE(fs::exists(fs::path(root) / ".ckpt_000030.tmp-abcdef"));
  EXPECT_FALSE(fs::exists(fs::path(root) / ".ckpt_000005.tmp-retired"));
  EXPECT_TRUE(fs::exists(fs::path(root) / "ckpt_000040")) << "not a temp folder: kept";
  io::remove_interrupted_writes(dir.file("missing"));  // no folder: nothing to do
  fs::create_directories(fs::path(root) / ".ckpt_000030.tmp-abcdef");
  // Re-saving a step replaces it as a whole.
  io::save_checkpoint(root, small_checkpoint(10, 5.f));
  EXPECT_FALSE(fs::exists(fs::path(root) / ".ckpt_000030.tmp-abcdef"));
  EXPECT_EQ(values(io::load_checkpoint(dir.file("out/ckpt_000010")).model.at("w")),
            values(full({2, 2}, 5.f)));
}

}  // namespace
}  // namespace tessera
