// multinomial: indices drawn from each row's categorical distribution of non-negative weights,
// as torch.multinomial. A small host loop: rows are few and wide in its uses (sampling a token
// from a vocabulary), and the draws come from rand() so that a seeded generator reproduces them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/dtype_dispatch.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/op_info.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

namespace {

// The index whose cumulative weight first exceeds u * total (the last non-zero one when
// rounding leaves u * total at the end).
int64_t draw(const std::vector<double>& w, double u) {
  double total = 0;
  for (double x : w) total += x;
  const double target = u * total;
  double cum = 0;
  int64_t last = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    cum += w[i];
    last = static_cast<int64_t>(i);
    if (target < cum) return last;
  }
  return last;
}

}  // namespace

Tensor multinomial(const Tensor& input, int64_t num_samples, bool replacement, Generator* gen) {
  TESSERA_OP_SCOPE("multinomial", input);
  TESSERA_CHECK(input.dim() == 1 || input.dim() == 2, ValueError,
                "[multinomial] expected a 1-d or 2-d tensor of weights, got shape ",
                input.shape_str());
  TESSERA_CHECK(is_floating(input.dtype()), TypeError,
                "[multinomial] expected floating-point weights, got ", input.dtype());
  const int64_t rows = input.dim() == 2 ? input.size(0) : 1;
  const int64_t n = input.size(input.dim() - 1);
  TESSERA_CHECK(n > 0, ValueError, "[multinomial] expected at least one category, got 0");
  TESSERA_CHECK(num_samples > 0, ValueError, "[multinomial] expected num_samples > 0, got ",
                num_samples);
  TESSERA_CHECK(replacement || num_samples <= n, ValueError,
                "[multinomial] expected num_samples <= ", n,
                " categories without replacement, got ", num_samples);
  Tensor weights = input.detach().to(kCPU).to(kFloat64).contiguous();
  Tensor uniforms = rand({rows * num_samples}, TensorOptions(kFloat64), gen);
  Tensor out = empty({rows, num_samples}, TensorOptions(kInt64));
  const double* w = weights.data_ptr<double>();
  const double* u = uniforms.data_ptr<double>();
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> row(w + r * n, w + (r + 1) * n);
    int64_t positive = 0;
    for (double x : row) {
      TESSERA_CHECK(std::isfinite(x) && x >= 0, ValueError,
                    "[multinomial] expected finite, non-negative weights, got ", x, " in row ", r);
      positive += x > 0;
    }
    TESSERA_CHECK(positive > 0, ValueError,
                  "[multinomial] expected a positive weight in every row, row ", r, " sums to 0");
    TESSERA_CHECK(replacement || num_samples <= positive, ValueError, "[multinomial] expected ",
                  num_samples, " samples without replacement from row ", r, " with only ", positive,
                  " non-zero weights");
    for (int64_t s = 0; s < num_samples; ++s) {
      const int64_t i = draw(row, u[r * num_samples + s]);
      o[r * num_samples + s] = i;
      if (!replacement) row[i] = 0;  // drawn: out of the remaining draws
    }
  }
  if (input.dim() == 1) out = out.reshape({num_samples});
  return out.to(input.device());
}

TESSERA_REGISTER_OPS({"multinomial", "random", kFloatingTypes, false});

}  // namespace tessera
