// The inference runner's GEMM (pack_linear_kernel, packed_linear_kernel): a weight W [O, K] is
// repacked once as column panels [ceil(O / 16), K, 16], so a micro-kernel keeps a tile of rows x
// 16..128 columns in registers and streams W once per tile of rows. The panels may be float32,
// bfloat16 or int8 with a scale per output (the runner's weight dtype: a half or a quarter of the
// bytes a decode step streams); they are widened exactly as they are loaded, and the arithmetic
// is float32 whatever they hold (int8 outputs are scaled once, after their chain).
//
// Batch invariance: every output element is one FMA chain over k = 0..K-1 starting from 0, then
// + b (then + the old y when accumulating), whatever the tile shape, the number of rows or the
// thread count. So a sequence's logits are bit-identical whether it runs alone or batched (the
// tiny shapes of decode also avoid oneDNN's per-call primitive setup, which costs more than
// the multiply itself below a few MFLOP).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/common/inference_kernels.h"
#include "backend/cpu/parallel_for.h"
#include "backend/cpu/vec16.h"
#include "tessera/ops/creation.h"

namespace tessera::cpu {
namespace {

using tessera::detail::V16;
using tessera::detail::vadd;
using tessera::detail::vfma;
using tessera::detail::vload;
using tessera::detail::vset1;
using tessera::detail::vstore;
using tessera::detail::vzero;

constexpr int64_t kPanel = 16;
constexpr int64_t kGroupPanels = 8;                  // columns per task: 128
constexpr int64_t kParallelMacs = int64_t{1} << 20;  // ~50 us: below, a team costs more

// MR rows x NP panels of y from x rows and the panels at w (panel q at w + q K 16), of W: float,
// BFloat16, or int8_t with its outputs' scale.
template <int MR, int NP, class W>
void tile(const float* x, int64_t ldx, const W* w, int64_t K, float* y, int64_t ldy,
          const float* bias, const float* scale, int64_t cols, bool accumulate) {
  V16 acc[MR][NP];
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) acc[i][p] = vzero();
  for (int64_t k = 0; k < K; ++k) {
    V16 wv[NP];
    for (int p = 0; p < NP; ++p) wv[p] = vload(w + (p * K + k) * kPanel);
    for (int i = 0; i < MR; ++i) {
      const V16 xi = vset1(x[i * ldx + k]);
      for (int p = 0; p < NP; ++p) acc[i][p] = vfma(xi, wv[p], acc[i][p]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* yi = y + i * ldy;
    for (int p = 0; p < NP; ++p) {
      V16 out;
      if constexpr (std::is_same_v<W, int8_t>)
        out = vfma(acc[i][p], vload(scale + p * kPanel), vload(bias + p * kPanel));
      else
        out = vadd(acc[i][p], vload(bias + p * kPanel));
      const int64_t n = std::min<int64_t>(kPanel, cols - p * kPanel);
      if (n == kPanel) {
        if (accumulate) out = vadd(vload(yi + p * kPanel), out);
        vstore(yi + p * kPanel, out);
      } else {  // the ragged last panel: same arithmetic, element by element
        alignas(64) float tmp[kPanel];
        vstore(tmp, out);
        for (int64_t j = 0; j < n; ++j)
          yi[p * kPanel + j] = accumulate ? yi[p * kPanel + j] + tmp[j] : tmp[j];
      }
    }
  }
}

// tile<MR, np> for a runtime np in [1, MaxNP].
template <int MR, int MaxNP, int NP = 1, class W>
void tile_np(int64_t np, const float* x, int64_t ldx, const W* w, int64_t K, float* y, int64_t ldy,
             const float* bias, const float* scale, int64_t cols, bool accumulate) {
  if constexpr (NP < MaxNP) {
    if (np > NP)
      return tile_np<MR, MaxNP, NP + 1>(np, x, ldx, w, K, y, ldy, bias, scale, cols, accumulate);
  }
  tile<MR, NP>(x, ldx, w, K, y, ldy, bias, scale, cols, accumulate);
}

// Per output (a panel lane): scale = max_k |W[o, k]| / 127 (1 for an all-zero output, the
// padding too) and packed = W / scale rounded to nearest even, within [-127, 127]. ValueError for
// a weight that is not finite (no scale represents it).
void quantize_int8(PackedLinearWeights& p) {
  const int64_t panels = p.packed.size(0), K = p.in;
  Tensor q = empty({panels, K, kPanel}, TensorOptions(kInt8));
  p.scale = empty({panels * kPanel});
  const float* w = p.packed.data_ptr<float>();
  int8_t* dst = q.data_ptr<int8_t>();
  float* scale = p.scale.data_ptr<float>();
  for (int64_t panel = 0; panel < panels; ++panel)
    for (int64_t j = 0; j < kPanel; ++j) {
      const int64_t at = panel * K * kPanel + j;  // then every kPanel along k
      float amax = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const float v = w[at + k * kPanel];
        TESSERA_CHECK(std::isfinite(v), ValueError,
                      "[pack_linear] expected finite weights to quantize to int8, got ", v,
                      " in output ", panel * kPanel + j);
        amax = std::max(amax, std::abs(v));
      }
      const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
      scale[panel * kPanel + j] = s;
      for (int64_t k = 0; k < K; ++k)
        dst[at + k * kPanel] = static_cast<int8_t>(
            std::clamp(std::nearbyint(w[at + k * kPanel] / s), -127.0f, 127.0f));
    }
  p.packed = q;
}

PackedLinearWeights pack_linear(const std::vector<Tensor>& weights,
                                const std::vector<Tensor>& biases, DType dtype) {
  TESSERA_CHECK(dtype == kFloat32 || dtype == kBFloat16 || dtype == kInt8, TypeError,
                "[pack_linear] expected float32, bfloat16 or int8 packed weights, got ", dtype);
  TESSERA_CHECK(!weights.empty() && (biases.empty() || biases.size() == weights.size()), ValueError,
                "[pack_linear] expected weights and as many biases (or none), got ", weights.size(),
                " and ", biases.size());
  PackedLinearWeights p;
  p.in = weights[0].size(1);
  for (const Tensor& w : weights) {
    TESSERA_CHECK(w.dtype() == kFloat32 && w.dim() == 2 && w.size(1) == p.in &&
                      w.device().type == DeviceType::CPU,
                  TypeError, "[pack_linear] expected float32 CPU weights [out, ", p.in, "], got ",
                  w.shape_str(), " ", w.dtype());
    p.out += w.size(0);
  }
  const int64_t panels = (p.out + kPanel - 1) / kPanel;
  p.packed = zeros({panels, p.in, kPanel});
  p.bias = zeros({panels * kPanel});
  float* dst = p.packed.data_ptr<float>();
  float* bias = p.bias.data_ptr<float>();
  int64_t row = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const Tensor w = weights[i].contiguous();
    const float* src = w.data_ptr<float>();
    for (int64_t o = 0; o < w.size(0); ++o, ++row)
      for (int64_t k = 0; k < p.in; ++k)
        dst[((row / kPanel) * p.in + k) * kPanel + row % kPanel] = src[o * p.in + k];
    if (!biases.empty() && biases[i].defined()) {
      const Tensor b = biases[i].contiguous();
      TESSERA_CHECK(b.dtype() == kFloat32 && b.numel() == w.size(0), TypeError,
                    "[pack_linear] expected a float32 bias of ", w.size(0), " elements, got ",
                    b.shape_str(), " ", b.dtype());
      std::copy(b.data_ptr<float>(), b.data_ptr<float>() + b.numel(), bias + (row - w.size(0)));
    }
  }
  if (dtype == kInt8)
    quantize_int8(p);
  else
    p.packed = p.packed.to(dtype);  // element for element: the panel layout is kept
  return p;
}

// p + offset, or null for null p (the scales of float panels).
const float* offset_or_null(const float* p, int64_t offset) { return p ? p + offset : nullptr; }

template <class W>
void packed_linear_of(const PackedLinearWeights& weights, const LinearRowsArgs& a) {
  const int64_t in = weights.in, out = weights.out, rows = a.rows;
  const int64_t panels = weights.packed.size(0);
  const int64_t groups = (panels + kGroupPanels - 1) / kGroupPanels;
  const W* packed = static_cast<const W*>(weights.packed.data_ptr());
  const float* bias = weights.bias.data_ptr<float>();
  const float* scale = weights.scale.defined() ? weights.scale.data_ptr<float>() : nullptr;
  const float* x = a.x;
  float* y = a.y;
  const int64_t ldx = a.ldx, ldy = a.ldy;
  const bool accumulate = a.accumulate;
  // Tasks are column groups: each streams its panels once while every row tile reuses them.
  parallel_for(groups, rows * in * out >= kParallelMacs, [&](int64_t g) {
    const int64_t p0 = g * kGroupPanels, np = std::min(kGroupPanels, panels - p0);
    const int64_t c0 = p0 * kPanel, cols = std::min(out, (p0 + np) * kPanel) - c0;
    const W* w = packed + p0 * in * kPanel;
    const float* b = bias + c0;
    const float* sc = offset_or_null(scale, c0);
    int64_t r = 0;
    // Four rows share each weight load; single rows take all 8 panels at once so enough FMAs
    // are in flight. Two half groups for 2..4 rows keep the accumulators in registers.
    for (; r + 4 <= rows; r += 4) {
      for (int64_t h = 0; h < np; h += 4)
        tile_np<4, 4>(std::min<int64_t>(4, np - h), x + r * ldx, ldx, w + h * in * kPanel, in,
                      y + r * ldy + c0 + h * kPanel, ldy, b + h * kPanel,
                      offset_or_null(sc, h * kPanel), cols - h * kPanel, accumulate);
    }
    const int64_t left = rows - r;
    if (left == 1) {
      tile_np<1, 8>(np, x + r * ldx, ldx, w, in, y + r * ldy + c0, ldy, b, sc, cols, accumulate);
    } else if (left > 1) {
      for (int64_t h = 0; h < np; h += 4) {
        const int64_t n = std::min<int64_t>(4, np - h);
        const float* xr = x + r * ldx;
        float* yr = y + r * ldy + c0 + h * kPanel;
        const W* wh = w + h * in * kPanel;
        const float* bh = b + h * kPanel;
        const float* sh = offset_or_null(sc, h * kPanel);
        if (left == 2)
          tile_np<2, 4>(n, xr, ldx, wh, in, yr, ldy, bh, sh, cols - h * kPanel, accumulate);
        else
          tile_np<3, 4>(n, xr, ldx, wh, in, yr, ldy, bh, sh, cols - h * kPanel, accumulate);
      }
    }
  });
}

void packed_linear(const PackedLinearWeights& weights, const LinearRowsArgs& a) {
  switch (weights.packed.dtype()) {
    case kBFloat16:
      return packed_linear_of<BFloat16>(weights, a);
    case kInt8:
      return packed_linear_of<int8_t>(weights, a);
    default:
      return packed_linear_of<float>(weights, a);
  }
}

TESSERA_REGISTER_KERNEL(pack_linear_kernel, DeviceType::CPU, &pack_linear);
TESSERA_REGISTER_KERNEL(packed_linear_kernel, DeviceType::CPU, &packed_linear);

}  // namespace
}  // namespace tessera::cpu
