#pragma once
// Automatic mixed precision (torch.autocast): inside an AutocastGuard, ops run in the precision
// their registry entry's CastPolicy asks for: matmul, linear, bmm and attention in the lower
// dtype (bfloat16 or float16), norms, softmax, losses and sums in float32, and ops that need equal
// dtypes in the widest one. Parameters stay float32 (the optimizer's master weights); their casts
// are cached for the guard's lifetime and gradients flow back to them through the cast.
//
//   {
//     AutocastGuard autocast(DeviceType::CPU, kBFloat16);
//     loss = model.loss(x, y);
//   }
//   loss.backward();  // backward runs outside autocast, in the forward's dtypes
//
// The state is per thread and nests like PyTorch's; backward passes switch it off.
#include "tessera/core/device.h"
#include "tessera/core/dtype.h"

namespace tessera {

bool autocast_enabled(DeviceType device);
// The lower-precision dtype autocast uses on device (bfloat16 unless a guard chose float16).
DType autocast_dtype(DeviceType device);

class AutocastGuard {
 public:
  // dtype: bfloat16 or float16 (ValueError otherwise). enabled=false switches autocast off in
  // the scope (torch.autocast(..., enabled=False)).
  AutocastGuard(DeviceType device, DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
};

// Clears the cache of parameter casts (done when the outermost guard closes).
void clear_autocast_cache();

}  // namespace tessera
