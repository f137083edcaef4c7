#pragma once
// EXPECT_TESSERA_ERROR(stmt, Type, "[op]"): stmt throws tessera::Type whose message contains text.
#include <gtest/gtest.h>

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
