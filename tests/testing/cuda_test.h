#pragma once
// What the CUDA suite's tests share: the first GPU, and a fixture that skips its tests where
// there is none (CI and most machines), so the suite builds and passes everywhere.
#include <gtest/gtest.h>

#include "tessera/runtime/cuda.h"
#include "tessera/tessera.h"

namespace tessera::testing {

inline const Device kCuda{DeviceType::CUDA, 0};

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device here";
  }
};

}  // namespace tessera::testing
