#include "tessera/infer/stopping.h"

#include <algorithm>
#include <limits>

#include "tessera/core/error.h"

namespace tessera::infer {

void StoppingCriteria::validate() const {
  TESSERA_CHECK(max_tokens >= 1, ValueError, "[StoppingCriteria] expected max_tokens >= 1, got ",
                max_tokens);
  TESSERA_CHECK(min_tokens >= 0 && min_tokens <= max_tokens, ValueError,
                "[StoppingCriteria] expected min_tokens in [0, max_tokens ", max_tokens, "], got ",
                min_tokens);
  for (const std::string& s : stop)
    TESSERA_CHECK(!s.empty(), ValueError, "[StoppingCriteria] expected non-empty stop strings");
}

void StoppingCriteria::mask_early_stops(std::span<float> logits, int64_t num_output) const {
  if (num_output >= min_tokens) return;
  for (int32_t id : stop_token_ids)
    if (id >= 0 && static_cast<size_t>(id) < logits.size())
      logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
}

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Abort:
      return "abort";
    case FinishReason::None:
      break;
  }
  return "";
}

namespace {

// Bytes at the end of s that start a UTF-8 character whose continuation bytes have not all
// arrived (byte-level tokens split characters); 0 when s ends on a whole character or on bytes
// that are not valid UTF-8 anyway.
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? back : 0;
  }
  return 0;
}

}  // namespace

TextStream::TextStream(const tokenizers::Tokenizer* tokenizer, const StoppingCriteria* stopping,
                       int32_t prev_token)
    : tokenizer_(tokenizer), stopping_(stopping), prev_(prev_token) {}

std::string TextStream::push(int32_t token) {
  if (tokenizer_ == nullptr || stopped_) return {};
  const size_t old = pending_.size();
  pending_ += tokenizer_->token_to_string(token, prev_);
  prev_ = token;
  ++pushed_;
  size_t hold = 0;  // bytes at the end of pending_ that may begin a stop string
  if (stopping_ != nullptr) {
    const std::vector<std::string>& stops = stopping_->stop;
    for (const std::string& s : stops) {
      if (pushed_ < stopping_->min_tokens) break;
      // A stop string can only end in the new bytes: search from where it could start.
      const size_t from = old >= s.size() ? old - s.size() + 1 : 0;
      const size_t at = pending_.find(s, from);
      if (at != std::string::npos) {
        pending_.resize(stopping_->include_stop_str_in_output ? at + s.size() : at);
        stopped_ = true;
      }
    }
    if (stopped_) {
      std::string out = std::move(pending_);
      pending_.clear();
      emitted_ += out;
      return out;
    }
    for (const std::string& s : stops) {
      for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n)
        if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
          hold = n;
          break;
        }
    }
  }
  hold = std::max(hold, incomplete_utf8_tail(pending_));
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  emitted_ += out;
  return out;
}

std::string TextStream::flush() {
  std::string out = stopped_ ? std::string() : std::move(pending_);
  pending_.clear();
  emitted_ += out;
  return out;
}

}  // namespace tessera::infer
