#pragma once
// Chat messages as one prompt text. The default (plain) template, used by `tessera serve` and
// tessera.llm.LLM.chat when the model brings no template of its own:
//   "<role>: <content>\n" per message, then "assistant:" (the generation prompt).
#include <span>
#include <string>
#include <string_view>

namespace tessera::tokenizers {

struct ChatMessage {
  std::string role;  // system, developer, user, assistant or tool
  std::string content;
};

// Whether role is one the chat APIs accept.
bool is_chat_role(std::string_view role);

// The plain template's text for messages (without the generation prompt unless
// add_generation_prompt). ValueError "[chat] expected ..." for no messages or an unknown role.
std::string plain_chat_prompt(std::span<const ChatMessage> messages,
                              bool add_generation_prompt = true);

}  // namespace tessera::tokenizers
