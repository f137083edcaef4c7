#include "tessera/data/lm_dataset.h"

#include "tessera/core/error.h"
#include "tessera/core/generator.h"

namespace tessera::data {

LanguageModelDataset::LanguageModelDataset(TokenBuffer tokens, LanguageModelOptions options)
    : tokens_(std::move(tokens)), options_(options) {
  const int64_t T = options_.seq_len;
  TESSERA_CHECK(T >= 1, ValueError, "[LanguageModelDataset] expected seq_len >= 1, got ", T);
  TESSERA_CHECK(tokens_.size() >= T + 1, ValueError, "[LanguageModelDataset] expected at least ",
                "seq_len + 1 = ", T + 1, " tokens, got ", tokens_.size());
  TESSERA_CHECK(options_.num_windows >= 0, ValueError,
                "[LanguageModelDataset] expected num_windows >= 0, got ", options_.num_windows);
  const int64_t sequential = (tokens_.size() - 1) / T;
  size_ = (options_.sampling == WindowSampling::Random && options_.num_windows > 0)
              ? options_.num_windows
              : sequential;
}

int64_t LanguageModelDataset::window_start(int64_t index) const {
  check_index(index, size_, "LanguageModelDataset.get");
  if (options_.sampling == WindowSampling::Sequential) return index * options_.seq_len;
  // One Philox block per (epoch, index): counter = epoch * 2^40 + index, 64 random bits.
  const uint64_t block = (static_cast<uint64_t>(epoch_.load(std::memory_order_relaxed)) << 40) +
                         static_cast<uint64_t>(index);
  const std::array<uint32_t, 4> r = philox(options_.seed, block);
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
  const auto starts = static_cast<uint64_t>(tokens_.size() - options_.seq_len);  // valid starts
  return static_cast<int64_t>(bits % starts);
}

Example LanguageModelDataset::get(int64_t index) const {
  const int64_t T = options_.seq_len;
  const Tensor window = tokens_.window(window_start(index), T + 1);
  return {window.narrow(0, 0, T), window.narrow(0, 1, T)};
}

}  // namespace tessera::data
