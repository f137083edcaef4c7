#pragma once
// Where this checkout's tests/ folder and built `tessera` binary are. Both are absolute paths
// compiled into paths.cpp alone: a path on any other file's command line would make its object
// differ between checkouts, and ccache could not share it with CI's fresh clones.
#include <filesystem>
#include <string>

namespace tessera::testing {

std::filesystem::path tests_dir();
std::string tessera_cli();

}  // namespace tessera::testing
