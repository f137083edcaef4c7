// The reasoning formats of serve/reasoning_parser.h: DeepSeek-R1's output (the template opened
// the thought) and Qwen3's (the output opens it, or answers without one), replies cut off while
// thinking, and every output split one byte at a time growing only by appending (what a stream
// sends) to the split of the whole.
#include <gtest/gtest.h>

#include <string>

#include "tessera/core/error.h"
#include "tessera/serve/reasoning_parser.h"
#include "testing/expect_error.h"

namespace tessera::serve {
namespace {

// The whole text's split, checked to be where a stream of it, one byte more each step, ends
// after only ever appending.
ReasoningSplit split(ReasoningFormat f, const std::string& text) {
  ReasoningSplit prev;
  for (size_t n = 0; n <= text.size(); ++n) {
    ReasoningSplit s = split_reasoning(f, std::string_view(text).substr(0, n), n == text.size());
    EXPECT_TRUE(s.reasoning.starts_with(prev.reasoning) && s.content.starts_with(prev.content))
        << "took back text at byte " << n << " of '" << text << "'";
    prev = std::move(s);
  }
  const ReasoningSplit whole = split_reasoning(f, text, /*finished=*/true);
  EXPECT_EQ(prev.reasoning, whole.reasoning);
  EXPECT_EQ(prev.content, whole.content);
  return whole;
}

void expect_split(ReasoningFormat f, const std::string& text, const std::string& reasoning,
                  const std::string& content) {
  SCOPED_TRACE(text);
  const ReasoningSplit s = split(f, text);
  EXPECT_EQ(s.reasoning, reasoning);
  EXPECT_EQ(s.content, content);
}

TEST(ReasoningParser, DeepSeekR1ReasonsUpToTheEndTag) {
  const ReasoningFormat f = ReasoningFormat::DeepSeekR1;
  expect_split(f, "Okay, 9.11 < 9.9.\n</think>\n\n9.9 is larger.", "Okay, 9.11 < 9.9.\n",
               "\n\n9.9 is larger.");
  expect_split(f, "<think>\nHmm.</think>Yes.", "\nHmm.", "Yes.");  // it opened one anyway
  expect_split(f, "Still thinking about </thi", "Still thinking about </thi", "");  // cut off
  expect_split(f, "</think>", "", "");
  expect_split(f, "a</think>b</think>c", "a", "b</think>c");
}

TEST(ReasoningParser, Qwen3ReasonsOnlyWhenTheOutputOpensAThought) {
  const ReasoningFormat f = ReasoningFormat::Qwen3;
  expect_split(f, "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?",
               "\nThe user greets me.\n", "\n\nHello! How can I help?");
  expect_split(f, "Hello! <think> is a tag.", "", "Hello! <think> is a tag.");  // no thinking
  expect_split(f, "<thin", "", "<thin");
  expect_split(f, "\n<think>cut off", "cut off", "");
  expect_split(f, "", "", "");
}

TEST(ReasoningParser, NamesTheKnownFormats) {
  EXPECT_EQ(reasoning_format("deepseek_r1"), ReasoningFormat::DeepSeekR1);
  EXPECT_EQ(reasoning_format("qwen3"), ReasoningFormat::Qwen3);
  EXPECT_TESSERA_ERROR(reasoning_format("o1"), ValueError, "known: deepseek_r1, qwen3");
}

}  // namespace
}  // namespace tessera::serve
