#pragma once
// Chat requests' prompts (openai_chat_prompt.cpp): messages through the chat template with
// vLLM's options, tokenized as Hugging Face tokenizes a rendered chat.
#include <cstdint>
#include <vector>

#include "serve/openai_json.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

struct ChatOptions {
  const detail::Json* tools = nullptr;   // the request's tools, for the template
  const detail::Json* kwargs = nullptr;  // chat_template_kwargs
  bool add_generation_prompt = true;     // the template opens the assistant's turn
  bool continue_final_message = false;   // the prompt ends inside the last (assistant) message
};
// A chat or /tokenize request's options: chat_template_kwargs (an object that sets neither
// messages nor tools), add_generation_prompt, continue_final_message (which needs
// add_generation_prompt false, as vLLM's), tools when with_tools; a 400 naming the field.
ChatOptions chat_options(const detail::Fields& f, bool with_tools);

// The prompt tokens of messages; a 400 naming messages (or continue_final_message) when the
// messages, the template or the tokenizer refuse them.
std::vector<int32_t> chat_tokens(const detail::Json& messages, const tokenizers::Tokenizer& tok,
                                 const ModelLimits& limits, const ChatOptions& options);

}  // namespace tessera::serve
