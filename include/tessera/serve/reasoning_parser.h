#pragma once
// A reasoning model's thinking split from its answer (vLLM's --reasoning-parser NAME): chat
// responses carry it as message.reasoning_content (streamed as delta.reasoning_content) and
// only the answer as content, which the tool-call parser then reads.
//
//   deepseek_r1  DeepSeek-R1 and its distills: the chat template opens "<think>\n" itself, so
//                the output is reasoning up to "</think>" (a "<think>" it writes anyway is
//                dropped), then the answer. Without "</think>" all of it is reasoning.
//   qwen3        Qwen3, QwQ: an output that starts with "<think>" reasons up to "</think>";
//                one that does not (thinking turned off, enable_thinking false) is all answer.
//                A reply cut off while thinking is reasoning, as in deepseek_r1.
//
// The answer keeps the model's text after "</think>" as written (vLLM's: often "\n\n" first).
#include <string>
#include <string_view>

namespace tessera::serve {

enum class ReasoningFormat { DeepSeekR1, Qwen3 };

// "deepseek_r1" or "qwen3"; ValueError listing them otherwise.
ReasoningFormat reasoning_format(std::string_view name);

struct ReasoningSplit {
  std::string reasoning, content;
};

// Splits generated text into reasoning and answer. While the text may still grow (finished
// false) the split holds back only what could be the start of a tag; each split's reasoning and
// content are prefixes of those of any longer text's split, so a stream sends the difference.
ReasoningSplit split_reasoning(ReasoningFormat format, std::string_view text, bool finished);

}  // namespace tessera::serve
