#pragma once
// A tokenizer that delegates to another but, while armed, throws from token_to_string (for any
// token, or only for one following token `after`): how tests make the engine fail a request in
// the middle of a step.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::testing {

class FailingTokenizer : public tokenizers::Tokenizer {
 public:
  explicit FailingTokenizer(std::shared_ptr<const tokenizers::Tokenizer> inner, int32_t after = -1)
      : inner_(std::move(inner)), after_(after) {}
  std::string token_to_string(int32_t id, int32_t prev) const override {
    if (armed && (after_ < 0 || prev == after_))
      throw RuntimeError("[FailingTokenizer] armed to fail");
    return inner_->token_to_string(id, prev);
  }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  std::optional<int32_t> bos_id() const override { return inner_->bos_id(); }
  std::optional<int32_t> eos_id() const override { return inner_->eos_id(); }
  std::string_view name() const override { return "FailingTokenizer"; }
  std::atomic<bool> armed{false};

 protected:
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override {
    const std::vector<int32_t> ids = inner_->encode(text);
    out.insert(out.end(), ids.begin(), ids.end());
  }

 private:
  std::shared_ptr<const tokenizers::Tokenizer> inner_;
  int32_t after_;
};

}  // namespace tessera::testing
