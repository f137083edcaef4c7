#pragma once
// Internals of graph recording (tessera/runtime/graph.h): the op scope's hook, and the planner
// that turns captured kernel calls into replay steps (graph_fusion.cpp).
#include <functional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "tessera/core/kernel_capture.h"
#include "tessera/ops/op_info.h"
#include "tessera/runtime/graph.h"

namespace tessera::detail {

// Called by every op scope while this thread records: notes the op (the outermost one names
// errors) and its inputs, and refuses ops a replay cannot repeat.
void note_recorded_op(const OpInfo& op, std::span<const Tensor* const> inputs,
                      const TensorList* list, int depth);

struct ReplayStep {
  std::string name;
  std::function<void()> run;
};

struct ReplayPlan {
  std::vector<ReplayStep> steps;
  GraphStats stats;
};

// Folds constant kernels and fuses elementwise chains. external: storages of tensors made before
// recording (never folded or freed).
ReplayPlan plan_replay(std::vector<CapturedKernel> calls,
                       const std::unordered_set<const StorageImpl*>& external);

}  // namespace tessera::detail
