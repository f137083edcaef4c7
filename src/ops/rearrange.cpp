// einops-style rearrange (InfiniCore's rearrange): a composite of reshape and permute, so its
// gradient comes free.
#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <set>

#include "ops/op_utils.h"
#include "tessera/ops/index.h"
#include "tessera/ops/infinicore.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

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

TESSERA_REGISTER_OPS({"rearrange", "view", kAllTypes, true});

}  // namespace tessera
