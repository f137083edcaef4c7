// io::write_file_atomic: the file is replaced whole, with the permissions asked for from its
// first byte (the studio's API key is written 0600; it was 0644 until a later chmod).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return st.st_mode & 0777;
}

TEST(AtomicFile, ReplacesTheFileWithTheModeAskedFor) {
  testing::TempDir dir;
  const std::string path = dir.file("f");
  io::write_file_atomic(path, "first", "test");
  EXPECT_EQ(read_all(path), "first");
  EXPECT_EQ(mode_of(path), 0644u);
  io::write_file_atomic(path, "secret\n", "test", 0600);
  EXPECT_EQ(read_all(path), "secret\n");
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_THROW(io::write_file_atomic(dir.file("no/such/dir/f"), "x", "test"), RuntimeError);
}

}  // namespace
}  // namespace tessera
