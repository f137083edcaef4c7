#pragma once
// Test data shared between checkouts (tokenizer files, tinyshakespeare): $TESSERA_SHARED_DATA,
// else ../shared/data beside the repository root. Tests skip, with the path, when a file is
// missing: the data is never copied into the repository.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "testing/paths.h"

namespace tessera::testing {

// The repository root (not from __FILE__, which may be relative when ccache rewrites paths).
inline std::filesystem::path repo_root() { return tests_dir().parent_path(); }

inline std::filesystem::path shared_data_path(const std::string& relative) {
  if (const char* env = std::getenv("TESSERA_SHARED_DATA"))
    return std::filesystem::path(env) / relative;
  return repo_root().parent_path() / "shared" / "data" / relative;
}

}  // namespace tessera::testing

// Declares `const std::string var` = the shared data file `relative`, or skips the test.
#define TESSERA_SHARED_DATA_OR_SKIP(var, relative)                                 \
  const std::string var = ::tessera::testing::shared_data_path(relative).string(); \
  if (!std::filesystem::exists(var)) GTEST_SKIP() << "shared test data missing: " << var
