#pragma once
// Running the PyTorch reference scripts in tests/reference from a C++ test: a fixture that skips
// (with the reason) when /usr/bin/python3 cannot import torch, a runner that returns the
// script's DIR/ref.safetensors, and a scale-aware closeness check.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "tessera/io/safetensors.h"
#include "tessera/tessera.h"
#include "testing/paths.h"
#include "testing/temp_dir.h"

namespace tessera::testing {

// Runs cmd through the shell; its stdout (and whatever it redirects there) goes to out.
inline int run_command(const std::string& cmd, std::string& out) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  return pclose(pipe);
}

// Runs tests/reference/<script> <args>; returns dir's ref.safetensors, or fails the test with
// the script's output and returns an empty dict.
inline nn::TensorDict run_reference_script(const std::string& script, const std::string& args,
                                           const TempDir& dir) {
  const std::filesystem::path path = tests_dir() / "reference" / script;
  std::string out;
  const int status = run_command("/usr/bin/python3 " + path.string() + " " + args + " 2>&1", out);
  EXPECT_EQ(status, 0) << script << " " << args << " failed:\n" << out;
  if (status != 0) return {};
  return io::load_safetensors(dir.file("ref.safetensors")).tensors;
}

// |got - want| <= rtol (|want| + scale / 10) elementwise with scale = max |want|: float32
// rounding differences are judged at the tensor's scale, not at entries near zero.
inline void expect_close(const Tensor& got, const Tensor& want, const std::string& what,
                         double rtol = 1e-4) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  Tensor g = got.detach().to(kFloat64), w = want.to(kFloat64);
  const double scale = max(abs(w)).item<double>();
  const double worst = max(abs(g - w) - rtol * (abs(w) + scale / 10)).item<double>();
  EXPECT_LE(worst, 0.0) << what << ": max |got - want| = " << max(abs(g - w)).item<double>()
                        << " at scale " << scale;
}

// Base fixture of tests that compare against PyTorch.
class TorchReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string out;
    if (run_command("/usr/bin/python3 -c 'import torch' 2>&1", out) != 0)
      skip_reason_ = "PyTorch reference unavailable: /usr/bin/python3 cannot import torch";
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }
  static inline std::string skip_reason_;
};

}  // namespace tessera::testing
