#pragma once
// EXPECT_TESSERA_ERROR(stmt, Type, "[op]"): stmt throws tessera::Type whose message contains text.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#define EXPECT_TESSERA_ERROR(stmt, Type, text)                                          \
  do {                                                                                  \
    try {                                                                               \
      stmt;                                                                             \
      ADD_FAILURE() << #stmt " did not throw " #Type;                                   \
    } catch (const ::tessera::Type& e) {                                                \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos)                    \
          << "message of " #stmt ": " << e.what();                                      \
    } catch (const std::exception& e) {                                                 \
      ADD_FAILURE() << #stmt " threw the wrong exception type: " << e.what();           \
    }                                                                                   \
  } while (0)

namespace tessera::testing {

// f throws Exc and its message contains "[op]" (and `detail`, when given).
template <class Exc>
void expect_error(const std::function<void()>& f, const std::string& op,
                  const std::string& detail = "") {
  try {
    f();
    ADD_FAILURE() << "op " << op << " did not throw";
  } catch (const Exc& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[" + op + "]"), std::string::npos) << msg;
    if (!detail.empty()) EXPECT_NE(msg.find(detail), std::string::npos) << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "op " << op << " threw the wrong exception type: " << e.what();
  }
}

}  // namespace tessera::testing
