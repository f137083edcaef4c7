#include "tessera/tokenizers/chat_template.h"

#include <algorithm>
#include <array>

#include "tessera/core/error.h"

namespace tessera::tokenizers {

bool is_chat_role(std::string_view role) {
  static constexpr std::array<std::string_view, 5> roles{"system", "developer", "user", "assistant",
                                                         "tool"};
  return std::find(roles.begin(), roles.end(), role) != roles.end();
}

std::string plain_chat_prompt(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  TESSERA_CHECK(!messages.empty(), ValueError, "[chat] expected at least one message, got none");
  std::string text;
  for (const ChatMessage& m : messages) {
    TESSERA_CHECK(is_chat_role(m.role), ValueError,
                  "[chat] expected a role among system, developer, user, assistant and tool, "
                  "got unknown message role '",
                  m.role, "'");
    text += m.role + ": " + m.content + "\n";
  }
  return add_generation_prompt ? text + "assistant:" : text;
}

}  // namespace tessera::tokenizers
