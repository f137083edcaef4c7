// InfiniCore's functional extras: causal_softmax and rearrange are composites of public ops (so
// their gradients come free); random_sample is a per-row loop over a sorted distribution.
#include "tessera/ops/infinicore.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "ops/op_utils.h"
#include "tessera/ops/index.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/registry.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

Tensor causal_softmax(const Tensor& x_) {
  TESSERA_OP_SCOPE("causal_softmax", x_);
  const Tensor& x = op_scope.arg(0);
  TESSERA_CHECK(is_floating(x.dtype()), TypeError,
                "[causal_softmax] expected a floating-point tensor, got ", x.dtype());
  TESSERA_CHECK(x.dim() >= 2 && x.size(-1) >= x.size(-2), ValueError,
                "[causal_softmax] expected scores [..., T, S] with S >= T, got shape ", x.sizes());
  const int64_t T = x.size(-2), S = x.size(-1);
  // Query i sees keys j <= i + S - T: mask the triangle strictly above that diagonal.
  Tensor hidden = triu(ones({T, S}, TensorOptions(kBool).with_device(x.device())), S - T + 1);
  return softmax(masked_fill(x, hidden, -std::numeric_limits<double>::infinity()), -1);
}

// ---- random_sample ----

namespace {

// The sampled index of one row of V logits given the uniform draw u (see the header).
template <class T>
int64_t sample_row(const T* logits, int64_t V, double u, double topp, int64_t topk,
                   double temperature) {
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  auto value = [&](int64_t i) { return static_cast<double>(logits[i]); };
  // Descending by value, ties by index, so the result does not depend on the sort.
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return value(a) > value(b) || (value(a) == value(b) && a < b);
  });
  const bool greedy = temperature == 0.0 || topk == 1 || topp <= 0.0;
  if (greedy) return order[0];
  // Cumulative softmax probabilities in sorted order, computed in double.
  std::vector<double> cum(V);
  const double top = value(order[0]);
  double total = 0.0;
  for (int64_t i = 0; i < V; ++i) cum[i] = total += std::exp((value(order[i]) - top) / temperature);
  for (double& c : cum) c /= total;
  const int64_t k = topk <= 0 ? V : std::min(topk, V);
  const double threshold = std::min(cum[k - 1], topp * cum[V - 1]) * u;
  // First i with cum[i] >= threshold (a left-sided searchsorted).
  const int64_t i = std::lower_bound(cum.begin(), cum.end(), threshold) - cum.begin();
  return order[std::min(i, V - 1)];
}

}  // namespace

Tensor random_sample(const Tensor& logits, std::optional<double> random_val, double topp,
                     int64_t topk, double temperature, Generator* gen) {
  TESSERA_OP_SCOPE("random_sample", logits);
  constexpr const char* op = "random_sample";
  TESSERA_CHECK(is_floating(logits.dtype()), TypeError, "[", op,
                "] expected floating-point logits, got ", logits.dtype());
  TESSERA_CHECK((logits.dim() == 1 || logits.dim() == 2) && logits.size(-1) > 0, ValueError, "[",
                op, "] expected logits [V] or [B, V] with V > 0, got shape ", logits.sizes());
  TESSERA_CHECK(logits.device().is_cpu(), NotImplementedError, "[", op,
                "] expected cpu logits, got ", logits.device().str());
  TESSERA_CHECK(temperature >= 0.0 && std::isfinite(temperature), ValueError, "[", op,
                "] expected a finite temperature >= 0, got ", temperature);
  TESSERA_CHECK(topk >= 0, ValueError, "[", op, "] expected topk >= 0 (0: no limit), got ", topk);
  TESSERA_CHECK(!random_val || (*random_val >= 0.0 && *random_val <= 1.0), ValueError, "[", op,
                "] expected random_val in [0, 1], got ", random_val.value_or(0.0));
  const int64_t V = logits.size(-1), B = logits.dim() == 2 ? logits.size(0) : 1;
  std::vector<double> u(B, random_val.value_or(0.0));
  if (!random_val) {
    // One Philox block per row, so the draws do not depend on how rows are processed.
    Generator& g = gen ? *gen : default_generator();
    const uint64_t base = g.reserve(static_cast<uint64_t>(B));
    for (int64_t r = 0; r < B; ++r) {
      auto bits = philox(g.seed(), base + static_cast<uint64_t>(r));
      u[r] = uint_to_unit_double(bits[0], bits[1]);
    }
  }
  Tensor x = contiguous(logits.detach());
  Tensor out = empty(logits.dim() == 2 ? Shape{B} : Shape{}, kInt64);
  int64_t* o = out.data_ptr<int64_t>();
  dispatch<kFloatingTypes>(x.dtype(), op, [&]<class T>() {
    const T* p = x.data_ptr<T>();
    for (int64_t r = 0; r < B; ++r) o[r] = sample_row(p + r * V, V, u[r], topp, topk, temperature);
  });
  return out;
}

// ---- rearrange ----

namespace {

constexpr const char* kRearrange = "rearrange";
constexpr const char* kEllipsis = "...";

// One side of a pattern: a list of dims, each a group of axis names ("..." for the ellipsis).
// An empty group is a unit dim ("1" or "()").
struct Side {
  std::vector<std::vector<std::string>> groups;
  bool has_ellipsis = false;
};

Side parse_side(std::string_view s, bool left) {
  Side side;
  std::set<std::string> seen;
  bool in_group = false;
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    return ValueError(detail::str("[", kRearrange,
                                  "] expected a pattern like \"b t (h d) -> b h t d\", got \"", s,
                                  "\" (", why, ")"));
  };
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '(') {
      if (in_group) throw fail("nested parentheses");
      side.groups.emplace_back();
      in_group = true;
      ++i;
    } else if (c == ')') {
      if (!in_group) throw fail("unbalanced ')'");
      in_group = false;
      ++i;
    } else if (s.substr(i, 3) == kEllipsis) {
      if (side.has_ellipsis) throw fail("'...' twice on one side");
      if (in_group && left) throw fail("'...' inside parentheses on the left");
      side.has_ellipsis = true;
      if (in_group)
        side.groups.back().push_back(kEllipsis);
      else
        side.groups.push_back({kEllipsis});
      i += 3;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      std::string name(s.substr(i, j - i));
      i = j;
      if (name == "1") {
        if (!in_group) side.groups.emplace_back();  // a unit dim; inside a group a factor of 1
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(name[0]))) throw fail("axis '" + name + "'");
      if (!seen.insert(name).second) throw fail("axis '" + name + "' twice on one side");
      if (in_group)
        side.groups.back().push_back(name);
      else
        side.groups.push_back({name});
    } else {
      throw fail(std::string("character '") + c + "'");
    }
  }
  if (in_group) throw fail("unbalanced '('");
  return side;
}

// The elementary axes of a side in order, with the ellipsis expanded into n_ellipsis dims.
std::vector<std::string> axes_of(const Side& side, int64_t n_ellipsis) {
  std::vector<std::string> out;
  for (const auto& group : side.groups)
    for (const std::string& name : group) {
      if (name != kEllipsis) {
        out.push_back(name);
        continue;
      }
      for (int64_t e = 0; e < n_ellipsis; ++e) out.push_back(detail::str(kEllipsis, e));
    }
  return out;
}

}  // namespace

Tensor rearrange(const Tensor& x, std::string_view pattern,
                 const std::vector<std::pair<std::string, int64_t>>& sizes) {
  TESSERA_OP_SCOPE("rearrange", x);
  const size_t arrow = pattern.find("->");
  TESSERA_CHECK(arrow != std::string_view::npos, ValueError, "[", kRearrange,
                "] expected a pattern with '->', got \"", pattern, "\"");
  const Side lhs = parse_side(pattern.substr(0, arrow), true);
  const Side rhs = parse_side(pattern.substr(arrow + 2), false);
  TESSERA_CHECK(lhs.has_ellipsis == rhs.has_ellipsis, ValueError, "[", kRearrange,
                "] expected '...' on both sides or neither, got \"", pattern, "\"");

  const int64_t n_groups = static_cast<int64_t>(lhs.groups.size());
  const int64_t n_ellipsis = lhs.has_ellipsis ? x.dim() - (n_groups - 1) : 0;
  TESSERA_CHECK(lhs.has_ellipsis ? n_ellipsis >= 0 : x.dim() == n_groups, ValueError, "[",
                kRearrange, "] expected a tensor with ", lhs.has_ellipsis ? "at least " : "",
                lhs.has_ellipsis ? n_groups - 1 : n_groups, " dims for \"", pattern,
                "\", got shape ", x.sizes());

  const std::vector<std::string> left_axes = axes_of(lhs, n_ellipsis);
  const std::vector<std::string> right_axes = axes_of(rhs, n_ellipsis);
  TESSERA_CHECK(std::set(left_axes.begin(), left_axes.end()) ==
                    std::set(right_axes.begin(), right_axes.end()),
                ValueError, "[", kRearrange, "] expected the same axes on both sides, got \"",
                pattern, "\"");

  std::map<std::string, int64_t> axis_size;
  for (const auto& [name, size] : sizes) {
    TESSERA_CHECK(std::find(left_axes.begin(), left_axes.end(), name) != left_axes.end(),
                  ValueError, "[", kRearrange, "] expected sizes only for axes of \"", pattern,
                  "\", got '", name, "'");
    TESSERA_CHECK(size > 0, ValueError, "[", kRearrange, "] expected a positive size for '", name,
                  "', got ", size);
    axis_size[name] = size;
  }
  // Match each left group to its dim: every axis size known but at most one, which is inferred.
  int64_t dim = 0;
  for (const auto& group : lhs.groups) {
    if (group.size() == 1 && group[0] == kEllipsis) {
      for (int64_t e = 0; e < n_ellipsis; ++e) axis_size[detail::str(kEllipsis, e)] = x.size(dim++);
      continue;
    }
    const int64_t d = x.size(dim++);
    int64_t known = 1;
    std::string unknown;
    for (const std::string& name : group) {
      if (axis_size.count(name)) {
        known *= axis_size[name];
        continue;
      }
      TESSERA_CHECK(unknown.empty(), ValueError, "[", kRearrange,
                    "] expected sizes for all but one axis of a group, got none for '", unknown,
                    "' and '", name, "' (pass e.g. ", name, "=...)");
      unknown = name;
    }
    if (!unknown.empty()) {
      TESSERA_CHECK(d % known == 0, ValueError, "[", kRearrange, "] expected dim ", dim - 1,
                    " (size ", d, ") divisible by ", known, " to infer '", unknown, "', got shape ",
                    x.sizes());
      axis_size[unknown] = d / known;
    } else {
      TESSERA_CHECK(known == d, ValueError, "[", kRearrange, "] expected dim ", dim - 1,
                    " of size ", known, " for the group of ", group, ", got shape ", x.sizes());
    }
  }

  Shape split, order, merged;
  for (const std::string& name : left_axes) split.push_back(axis_size[name]);
  for (const std::string& name : right_axes)
    order.push_back(std::find(left_axes.begin(), left_axes.end(), name) - left_axes.begin());
  for (const auto& group : rhs.groups) {
    if (group.size() == 1 && group[0] == kEllipsis) {
      for (int64_t e = 0; e < n_ellipsis; ++e)
        merged.push_back(axis_size[detail::str(kEllipsis, e)]);
      continue;
    }
    int64_t n = 1;
    for (const std::string& name : group) {
      if (name != kEllipsis)
        n *= axis_size[name];
      else
        for (int64_t e = 0; e < n_ellipsis; ++e) n *= axis_size[detail::str(kEllipsis, e)];
    }
    merged.push_back(n);
  }
  return reshape(permute(reshape(x, split), order), merged);
}

TESSERA_REGISTER_OPS({"causal_softmax", "nn", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"random_sample", "random", kFloatingTypes, false},
                     {"rearrange", "view", kAllTypes, true});

}  // namespace tessera
