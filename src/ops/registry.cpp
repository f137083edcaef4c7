#include "tessera/ops/registry.h"

#include <algorithm>

namespace tessera {

namespace {
std::vector<OpInfo>& table() {
  static std::vector<OpInfo> ops;
  return ops;
}
}  // namespace

const std::vector<OpInfo>& op_registry() {
  std::sort(table().begin(), table().end(), [](const OpInfo& a, const OpInfo& b) {
    return a.family != b.family ? a.family < b.family : a.name < b.name;
  });
  return table();
}

bool register_ops(std::initializer_list<OpInfo> ops) {
  table().insert(table().end(), ops.begin(), ops.end());
  return true;
}

}  // namespace tessera
