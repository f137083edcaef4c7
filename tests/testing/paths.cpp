#include "testing/paths.h"

namespace tessera::testing {

std::filesystem::path tests_dir() { return TESSERA_TESTS_DIR; }
std::string tessera_cli() { return TESSERA_CLI; }

}  // namespace tessera::testing
