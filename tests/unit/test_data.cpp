// Data loading: samplers partition like torch's, the DataLoader's batches, seeding, prefetch
// bound, error propagation, shutdown and resumable state, llm.c token files (format checks,
// zero-copy views, atomic writes) and the language-modelling windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/data/dataloader.h"
#include "tessera/data/lm_dataset.h"
#include "tessera/data/token_buffer.h"
#include "tessera/ops/creation.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "testing/expect_error.h"
#include "testing/shared_data.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using Indices = std::vector<int64_t>;

using testing::TempDir;

std::vector<int64_t> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

// Example i is {i} (int64 scalar), optionally throwing at one index or sleeping per example.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t throw_at = -1, int sleep_ms = 0)
      : n_(n), throw_at_(throw_at), sleep_ms_(sleep_ms) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    calls.fetch_add(1);
    if (sleep_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (i == throw_at_ && fail) throw IndexError("[CountingDataset] expected a good index, got 7");
    return {tensor(std::vector<int64_t>{i}).reshape({})};
  }
  mutable std::atomic<int64_t> calls{0};
  std::atomic<bool> fail{true};

 private:
  int64_t n_, throw_at_;
  int sleep_ms_;
};

// All batches of one epoch, each as its list of example indices.
std::vector<Indices> epoch_batches(DataLoader& loader) {
  std::vector<Indices> out;
  for (Batch& b : loader) out.push_back(values(b[0]));
  return out;
}

// ---------------------------------------------------------------- samplers

TEST(Sampler, SequentialAndRandom) {
  EXPECT_EQ(SequentialSampler(4).indices(), (Indices{0, 1, 2, 3}));
  RandomSampler a(100, 7), b(100, 7);
  Indices pa = a.indices();
  EXPECT_EQ(pa, b.indices());  // same seed and epoch
  Indices sorted = pa;
  std::sort(sorted.begin(), sorted.end());
  Indices iota(100);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(pa, iota);
  a.set_epoch(1);
  EXPECT_NE(a.indices(), pa);
  EXPECT_NE(RandomSampler(100, 8).indices(), pa);
}

TEST(Sampler, BatchShardsInterleaveWholeBatches) {
  auto base = std::make_shared<SequentialSampler>(11);
  // Batches of 2: [0 1] [2 3] [4 5] [6 7] [8 9] [10]; 2 ranks take alternate whole batches and
  // drop the tail that does not give both a batch.
  BatchShardSampler r0(base, 2, 0, 2), r1(base, 2, 1, 2);
  EXPECT_EQ(r0.indices(), (Indices{0, 1, 4, 5}));
  EXPECT_EQ(r1.indices(), (Indices{2, 3, 6, 7}));
  EXPECT_EQ(r0.size(), 4);
  // The base's epoch follows the shard's: a random base reshuffles.
  auto random = std::make_shared<RandomSampler>(12, 3);
  BatchShardSampler shard(random, 3, 1, 2);
  const Indices first = shard.indices();
  shard.set_epoch(1);
  EXPECT_NE(shard.indices(), first);
  random->set_epoch(1);
  const Indices all = random->indices();
  EXPECT_EQ(shard.indices(), (Indices{all[3], all[4], all[5], all[9], all[10], all[11]}));
  EXPECT_THROW(BatchShardSampler(base, 2, 2, 2), ValueError);
}

TEST(Sampler, DistributedPartitionsLikeTorch) {
  // torch.utils.data.DistributedSampler(range(10), num_replicas=3, shuffle=False)
  EXPECT_EQ(DistributedSampler(10, 0, 3, false).indices(), (Indices{0, 3, 6, 9}));
  EXPECT_EQ(DistributedSampler(10, 1, 3, false).indices(), (Indices{1, 4, 7, 0}));
  EXPECT_EQ(DistributedSampler(10, 2, 3, false).indices(), (Indices{2, 5, 8, 1}));
  // drop_last=True drops the uneven tail instead of padding.
  EXPECT_EQ(DistributedSampler(10, 2, 3, false, 0, true).indices(), (Indices{2, 5, 8}));
  EXPECT_EQ(DistributedSampler(10, 0, 3, false, 0, true).size(), 3);
  // More ranks than examples: padding cycles through the list.
  EXPECT_EQ(DistributedSampler(2, 4, 5, false).indices(), (Indices{0}));
  EXPECT_EQ(DistributedSampler(2, 3, 5, false).indices(), (Indices{1}));
  EXPECT_EQ(DistributedSampler(2, 3, 5, false, 0, true).size(), 0);
  // Shuffled: every rank uses the same permutation, so the shares are disjoint and cover all.
  std::multiset<int64_t> all;
  for (int64_t r = 0; r < 4; ++r) {
    DistributedSampler s(20, r, 4, true, 3);
    s.set_epoch(2);
    for (int64_t i : s.indices()) all.insert(i);
  }
  EXPECT_EQ(all.size(), 20u);
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 20u);
  EXPECT_TESSERA_ERROR(DistributedSampler(10, 3, 3), ValueError,
                       "[DistributedSampler] expected rank in [0, 3), got 3");
  EXPECT_TESSERA_ERROR(DistributedSampler(10, 0, 0), ValueError, "expected world >= 1");
}

// ---------------------------------------------------------------- DataLoader

TEST(DataLoader, BatchesAndDropLast) {
  auto ds =
      std::make_shared<TensorDataset>(std::vector<Tensor>{arange(10), arange(20).reshape({10, 2})});
  DataLoader loader(ds, {.batch_size = 3});
  EXPECT_EQ(loader.num_batches(), 4);
  std::vector<Batch> batches;
  for (Batch& b : loader) batches.push_back(b);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0][0].sizes(), (Shape{3}));
  EXPECT_EQ(batches[0][1].sizes(), (Shape{3, 2}));
  EXPECT_EQ(values(batches[1][1]), (Indices{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(values(batches[3][0]), (Indices{9}));
  DataLoader dropping(ds, {.batch_size = 3, .drop_last = true});
  EXPECT_EQ(epoch_batches(dropping).size(), 3u);
}

TEST(DataLoader, SeededShuffleIsReproducibleAndChangesPerEpoch) {
  auto ds = std::make_shared<CountingDataset>(50);
  DataLoader a(ds, {.batch_size = 8, .shuffle = true, .seed = 11});
  DataLoader b(ds, {.batch_size = 8, .shuffle = true, .seed = 11, .prefetch = 0});
  const auto a0 = epoch_batches(a), b0 = epoch_batches(b);
  EXPECT_EQ(a0, b0);                 // the prefetch thread does not change the order
  const auto a1 = epoch_batches(a);  // the next range-for is the next epoch
  EXPECT_NE(a0, a1);
  EXPECT_EQ(a.state().epoch, 2);
  b.set_epoch(1);
  EXPECT_EQ(epoch_batches(b), a1);
  std::multiset<int64_t> seen;
  for (const Indices& batch : a1) seen.insert(batch.begin(), batch.end());
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 50u);
}

TEST(DataLoader, StateResumesMidEpoch) {
  auto ds = std::make_shared<CountingDataset>(40);
  DataLoader a(ds, {.batch_size = 4, .shuffle = true, .seed = 5});
  epoch_batches(a);  // finish epoch 0
  a.next();
  a.next();
  const DataLoaderState saved = a.state();
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.batch, 2);
  const auto rest = epoch_batches(a);
  DataLoader b(ds, {.batch_size = 4, .shuffle = true, .seed = 5});
  b.load_state(saved);
  EXPECT_EQ(epoch_batches(b), rest);
  EXPECT_TESSERA_ERROR(b.load_state({0, 11}), ValueError,
                       "[DataLoader.load_state] expected epoch >= 0 and batch in [0, 10]");
}

TEST(DataLoader, WorkerExceptionsReachTheConsumer) {
  for (int64_t prefetch : {0, 2}) {
    auto ds = std::make_shared<CountingDataset>(20, 7);
    DataLoader loader(ds, {.batch_size = 3, .prefetch = prefetch});
    loader.next();
    loader.next();  // examples 3..5
    EXPECT_TESSERA_ERROR(loader.next(), IndexError, "[CountingDataset] expected a good index");
    EXPECT_EQ(loader.state().batch, 2);
    ds->fail = false;  // the failed batch is retried
    EXPECT_EQ(values((*loader.next())[0]), (Indices{6, 7, 8}));
  }
}

TEST(DataLoader, PrefetchIsBoundedAndShutdownIsClean) {
  auto ds = std::make_shared<CountingDataset>(1000);
  {
    DataLoader loader(ds, {.batch_size = 4, .prefetch = 2});
    loader.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // One batch consumed, at most two more ready: the worker waits for room in the queue.
    EXPECT_LE(ds->calls.load(), 3 * 4);
  }
  // Destroying a loader whose worker is mid-batch on a slow dataset joins promptly.
  auto slow = std::make_shared<CountingDataset>(1000, -1, 5);
  const auto start = std::chrono::steady_clock::now();
  {
    DataLoader loader(slow, {.batch_size = 10, .prefetch = 4});
    loader.next();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(DataLoader, Errors) {
  auto ds = std::make_shared<CountingDataset>(10);
  EXPECT_TESSERA_ERROR(DataLoader(ds, {.batch_size = 0}), ValueError,
                       "[DataLoader] expected batch_size >= 1, got 0");
  EXPECT_TESSERA_ERROR(DataLoader(ds, {.shuffle = true}, std::make_shared<SequentialSampler>(10)),
                       ValueError, "expected shuffle=false with an explicit sampler");
  EXPECT_TESSERA_ERROR(DataLoader(nullptr), ValueError, "[DataLoader] expected a dataset");
  EXPECT_TESSERA_ERROR(collate_stack({{arange(2)}, {arange(2), arange(2)}}), ValueError,
                       "[collate_stack] expected examples with 1 tensors, got 2 at position 1");
  // A sampler that runs past the dataset surfaces the dataset's IndexError.
  auto td = std::make_shared<TensorDataset>(std::vector<Tensor>{arange(3)});
  DataLoader bad(td, {.batch_size = 2}, std::make_shared<SequentialSampler>(5));
  bad.next();
  EXPECT_TESSERA_ERROR(bad.next(), IndexError,
                       "[TensorDataset.get] expected an index in [0, 3), got 3");
}

// ---------------------------------------------------------------- llm.c token files

TEST(TokenFile, WriteReadBothFormats) {
  TempDir dir;
  const std::vector<int32_t> tokens = {0, 1, 50256, 65535, 7, 300};
  write_token_file(dir.file("a.bin"), tokens, TokenFormat::UInt16);
  TokenBuffer a = read_token_file(dir.file("a.bin"));
  EXPECT_EQ(a.format(), TokenFormat::UInt16);
  EXPECT_EQ(a.to_vector(), tokens);
  EXPECT_EQ(fs::file_size(dir.file("a.bin")), 1024u + 2 * tokens.size());
  // The header llm.c expects.
  std::ifstream in(dir.file("a.bin"), std::ios::binary);
  int32_t header[3];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 6);

  const std::vector<int32_t> big = {128000, 128255, 5, 1 << 30};
  write_token_file(dir.file("b.bin"), big, TokenFormat::UInt32);
  TokenBuffer b = read_token_file(dir.file("b.bin"));
  EXPECT_EQ(b.format(), TokenFormat::UInt32);
  EXPECT_EQ(b.to_vector(), big);
  EXPECT_EQ(values(b.window(1, 2)), (Indices{128255, 5}));
  EXPECT_EQ(b.at(3), 1 << 30);
  // Only the final files remain: the temp files were renamed.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 2);
  // Overwriting replaces the file.
  write_token_file(dir.file("a.bin"), std::vector<int32_t>{9}, TokenFormat::UInt16);
  EXPECT_EQ(read_token_file(dir.file("a.bin")).to_vector(), (std::vector<int32_t>{9}));
}

TEST(TokenFile, ZeroCopyTensorViews) {
  TempDir dir;
  std::vector<int32_t> tokens(5000);
  std::iota(tokens.begin(), tokens.end(), 100);
  write_token_file(dir.file("t.bin"), tokens, TokenFormat::UInt32);
  Tensor view;
  {
    TokenBuffer buf = read_token_file(dir.file("t.bin"));
    Tensor all = buf.as_tensor();
    view = buf.slice(10, 20).as_tensor();
    EXPECT_EQ(all.dtype(), kInt32);
    EXPECT_EQ(all.numel(), 5000);
    EXPECT_EQ(view.data_ptr<int32_t>(), all.data_ptr<int32_t>() + 10);  // same memory
  }
  // The mapping outlives the buffer while a view holds it.
  EXPECT_EQ(view.numel(), 10);
  EXPECT_EQ(view.data_ptr<int32_t>()[0], 110);
  view.data_ptr<int32_t>()[0] = -1;  // copy-on-write: the file is untouched
  EXPECT_EQ(read_token_file(dir.file("t.bin")).at(10), 110);

  write_token_file(dir.file("u16.bin"), tokens, TokenFormat::UInt16);
  EXPECT_TESSERA_ERROR(read_token_file(dir.file("u16.bin")).as_tensor(), TypeError,
                       "[TokenBuffer.as_tensor] expected uint32 tokens");
  EXPECT_EQ(TokenBuffer::from_ids(tokens).as_tensor().data_ptr<int32_t>()[4999], 5099);
}

TEST(TokenFile, ValidatesHeaderAndSize) {
  TempDir dir;
  const auto write_raw = [&](const std::string& name, std::vector<int32_t> header, size_t extra) {
    header.resize(256, 0);
    std::ofstream out(dir.file(name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out << std::string(extra, '\0');
    return dir.file(name);
  };
  EXPECT_TESSERA_ERROR(read_token_file(write_raw("magic.bin", {1234, 1, 0}, 0)), ValueError,
                       "[read_token_file] expected magic 20240520 (uint16) or 20240801 (uint32)");
  EXPECT_TESSERA_ERROR(read_token_file(write_raw("v.bin", {20240520, 7, 0}, 0)), ValueError,
                       "expected version 1 for magic 20240520");
  EXPECT_TESSERA_ERROR(read_token_file(write_raw("v32.bin", {20240801, 1, 0}, 0)), ValueError,
                       "expected version 7 for magic 20240801");
  EXPECT_TESSERA_ERROR(read_token_file(write_raw("size.bin", {20240520, 1, 10}, 18)), ValueError,
                       "expected 1044 bytes for the 10 tokens");
  EXPECT_EQ(read_token_file(write_raw("ok.bin", {20240520, 1, 9}, 18)).size(), 9);
  std::ofstream(dir.file("short.bin")) << "tiny";
  EXPECT_TESSERA_ERROR(read_token_file(dir.file("short.bin")), ValueError,
                       "expected a file of at least 1024 bytes");
  EXPECT_TESSERA_ERROR(read_token_file(dir.file("none.bin")), RuntimeError,
                       "[read_token_file] expected a readable file");
  EXPECT_TESSERA_ERROR(write_token_file(dir.file("w.bin"), std::vector<int32_t>{1, 70000}),
                       ValueError, "expected tokens in [0, 65536) for uint16 files, got 70000");
  EXPECT_FALSE(fs::exists(dir.file("w.bin")));
}

TEST(TokenBuffer, SliceAndSplit) {
  std::vector<int32_t> ids(100);
  std::iota(ids.begin(), ids.end(), 0);
  TokenBuffer buf = TokenBuffer::from_ids(ids);
  auto [train, val] = buf.split(0.1);
  EXPECT_EQ(train.size(), 90);
  EXPECT_EQ(val.size(), 10);
  EXPECT_EQ(val.at(0), 90);
  EXPECT_EQ(buf.slice(5, 8).to_vector(), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TESSERA_ERROR(buf.slice(5, 101), IndexError, "[TokenBuffer.slice]");
  EXPECT_TESSERA_ERROR(buf.at(100), IndexError, "[TokenBuffer.at] expected an index in [0, 100)");
  EXPECT_TESSERA_ERROR(buf.split(1.5), ValueError, "expected val_fraction in [0, 1]");
  EXPECT_EQ(TokenBuffer().to_vector().size(), 0u);
}

// ---------------------------------------------------------------- language modelling

TEST(LanguageModelDataset, SequentialWindows) {
  std::vector<int32_t> ids(35);
  std::iota(ids.begin(), ids.end(), 0);
  auto ds = std::make_shared<LanguageModelDataset>(TokenBuffer::from_ids(ids),
                                                   LanguageModelOptions{.seq_len = 8});
  EXPECT_EQ(ds->size(), 4);  // (35 - 1) / 8
  const Example ex = ds->get(3);
  EXPECT_EQ(values(ex[0]), (Indices{24, 25, 26, 27, 28, 29, 30, 31}));
  EXPECT_EQ(values(ex[1]), (Indices{25, 26, 27, 28, 29, 30, 31, 32}));
  DataLoader loader(ds, {.batch_size = 2});
  const Batch b = *loader.next();
  EXPECT_EQ(b[0].sizes(), (Shape{2, 8}));
  EXPECT_EQ(b[1].dtype(), kInt64);
  EXPECT_EQ(values(b[1]).front(), 1);
  EXPECT_TESSERA_ERROR(LanguageModelDataset(TokenBuffer::from_ids(ids), {.seq_len = 40}),
                       ValueError, "expected at least seq_len + 1 = 41 tokens, got 35");
  EXPECT_TESSERA_ERROR(ds->get(4), IndexError, "[LanguageModelDataset.get]");
}

TEST(LanguageModelDataset, RandomWindowsAreSeededPerEpoch) {
  std::vector<int32_t> ids(1000);
  std::iota(ids.begin(), ids.end(), 0);
  const LanguageModelOptions opts{
      .seq_len = 16, .sampling = WindowSampling::Random, .seed = 3, .num_windows = 200};
  LanguageModelDataset a(TokenBuffer::from_ids(ids), opts), b(TokenBuffer::from_ids(ids), opts);
  EXPECT_EQ(a.size(), 200);
  Indices starts0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const int64_t s = a.window_start(i);
    EXPECT_GE(s, 0);
    EXPECT_LE(s, 1000 - 17);
    EXPECT_EQ(s, b.window_start(i));
    starts0.push_back(s);
  }
  EXPECT_GT(std::set<int64_t>(starts0.begin(), starts0.end()).size(), 150u);
  const Example ex = a.get(5);
  EXPECT_EQ(values(ex[0]).front(), starts0[5]);
  EXPECT_EQ(values(ex[1]).back(), starts0[5] + 16);
  a.set_epoch(1);
  EXPECT_NE(a.window_start(0), starts0[0]);
}

TEST(LanguageModelDataset, ShakespeareThroughTokenizerAndRanks) {
  TESSERA_SHARED_DATA_OR_SKIP(path, "tinyshakespeare.txt");
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  tokenizers::CharTokenizer tok(text);
  auto [train, val] = tokenize_text(text, tok).split(0.1);
  EXPECT_EQ(train.size(), 1003854);  // nanoGPT shakespeare_char: train has 1,003,854 tokens
  EXPECT_EQ(val.size(), 111540);
  // Two data-parallel ranks read disjoint windows of the same epoch.
  auto ds = std::make_shared<LanguageModelDataset>(val, LanguageModelOptions{.seq_len = 64});
  std::set<Indices> rows[2];
  for (int64_t rank = 0; rank < 2; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(ds->size(), rank, 2, true, 0, true);
    DataLoader loader(ds, {.batch_size = 16, .drop_last = true}, sampler);
    for (Batch& b : loader) {
      const Indices x = values(b[0]), y = values(b[1]);
      EXPECT_TRUE(std::equal(x.begin() + 1, x.begin() + 64, y.begin()));  // y is x shifted
      for (int64_t r = 0; r < 16; ++r)
        rows[rank].insert(Indices(x.begin() + r * 64, x.begin() + (r + 1) * 64));
    }
  }
  // (111540 - 1) / 64 = 1742 windows, 871 per rank, 54 full batches of 16.
  EXPECT_EQ(rows[0].size(), 54u * 16);
  std::vector<Indices> shared;
  std::set_intersection(rows[0].begin(), rows[0].end(), rows[1].begin(), rows[1].end(),
                        std::back_inserter(shared));
  EXPECT_TRUE(shared.empty());
  EXPECT_EQ(tok.decode(val.slice(0, 5).to_vector()).size(), 5u);
}

}  // namespace
}  // namespace tessera::data
