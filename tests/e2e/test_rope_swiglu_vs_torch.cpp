// rope (both pair layouts, on a [B, T, H, D] view as attention layers pass it) and swiglu against
// PyTorch (tests/reference/rope_swiglu_reference.py): outputs and input gradients in float32
// (rtol 1e-5) and bfloat16 (rtol 3e-2 at the tensor's scale: PyTorch rounds every intermediate
// op, the fused kernels once, which unit_tests checks against float32). Skipped with a message when
// /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>

#include <string>

#include "tessera/io/safetensors.h"
#include "tessera/tessera.h"
#include "testing/temp_dir.h"
#include "testing/torch_reference.h"

namespace tessera {
namespace {

constexpr int64_t B = 2, T = 7, H = 3, D = 16, N = 5, F = 37;

class RopeSwigluVsTorch : public testing::TorchReferenceTest {};

TEST_F(RopeSwigluVsTorch, OutputsAndGradientsMatch) {
  testing::TempDir dir;
  manual_seed(11);
  auto [cos, sin] = rope_tables(T, D, 10000.0);
  const nn::TensorDict in{{"x", randn({B, T, H, D})},
                          {"cos", cos},
                          {"sin", sin},
                          {"w_rope", randn({B, H, T, D})},
                          {"gate", randn({N, F}) * 3.0},
                          {"up", randn({N, F})},
                          {"w_swiglu", randn({N, F})}};
  io::save_safetensors(dir.file("inputs.safetensors"), in);
  const nn::TensorDict ref =
      testing::run_reference_script("rope_swiglu_reference.py", dir.path.string(), dir);
  if (ref.empty()) return;

  for (DType dt : {kFloat32, kBFloat16}) {
    const std::string name = dt == kFloat32 ? "float32" : "bfloat16";
    const double rtol = dt == kFloat32 ? 1e-5 : 3e-2;
    for (bool interleaved : {false, true}) {
      const std::string what =
          std::string("rope_") + (interleaved ? "interleaved_" : "half_split_") + name;
      Tensor x = in.at("x").to(dt).detach().requires_grad_();
      Tensor out = rope(x.transpose(1, 2), cos, sin, interleaved);
      sum(out.to(kFloat32) * in.at("w_rope")).backward();
      EXPECT_EQ(out.dtype(), dt) << what;
      testing::expect_close(out, ref.at(what), what, rtol);
      testing::expect_close(x.grad(), ref.at(what + "_dx"), what + " dx", rtol);
    }
    Tensor gate = in.at("gate").to(dt).detach().requires_grad_(),
           up = in.at("up").to(dt).detach().requires_grad_();
    Tensor out = swiglu(gate, up);
    sum(out.to(kFloat32) * in.at("w_swiglu")).backward();
    EXPECT_EQ(out.dtype(), dt);
    testing::expect_close(out, ref.at("swiglu_" + name), "swiglu " + name, rtol);
    testing::expect_close(gate.grad(), ref.at("swiglu_" + name + "_dgate"), "dgate " + name, rtol);
    testing::expect_close(up.grad(), ref.at("swiglu_" + name + "_dup"), "dup " + name, rtol);
  }
}

}  // namespace
}  // namespace tessera
