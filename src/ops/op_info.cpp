#include "tessera/ops/op_info.h"

#include <algorithm>
#include <deque>

#include "tessera/core/error.h"

namespace tessera {

namespace {
// A deque never moves its elements, so find_op's references stay valid.
std::deque<OpInfo>& table() {
  static std::deque<OpInfo> ops;
  return ops;
}
}  // namespace

const std::vector<OpInfo>& op_registry() {
  static std::vector<OpInfo> sorted;
  sorted.assign(table().begin(), table().end());
  std::sort(sorted.begin(), sorted.end(), [](const OpInfo& a, const OpInfo& b) {
    return a.family != b.family ? a.family < b.family : a.name < b.name;
  });
  return sorted;
}

bool register_ops(std::initializer_list<OpInfo> ops) {
  table().insert(table().end(), ops.begin(), ops.end());
  return true;
}

const OpInfo& find_op(std::string_view name) {
  for (const OpInfo& op : table())
    if (op.name == name) return op;
  throw RuntimeError(detail::str("[internal] op '", name,
                                 "' has an OpScope but no TESSERA_REGISTER_OPS entry"));
}

}  // namespace tessera
