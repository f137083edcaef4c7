#include "tessera/runtime/autocast.h"

#include <unordered_map>

#include "runtime/autocast_cast.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

namespace {

struct CachedCast {
  Tensor source;  // kept alive so its address is not reused while cached
  uint32_t generation;  // of the storage when cast
  Tensor result;
};

struct ThreadAutocast {
  detail::AutocastState state;
  int guards = 0;  // open AutocastGuards; the cache is cleared when the last one closes
  // Casts of parameters (leaves requiring grad) to the lower dtype, keyed by tensor and grad
  // mode: a forward casts each weight once however often it is used.
  std::unordered_map<const TensorImpl*, CachedCast> cache[2];
};
thread_local ThreadAutocast t_autocast;

void refresh_hook() {
  bool any = false;
  for (bool e : t_autocast.state.enabled) any |= e;
  detail::t_op_hooks.autocast = any;
}

int index(DeviceType device) { return static_cast<int>(device); }

Tensor cached_cast(const Tensor& x, DType dtype) {
  const bool cacheable = x.dtype() == kFloat32 && x.is_leaf() && x.requires_grad();
  if (!cacheable) return cast(x, dtype);
  auto& cache = t_autocast.cache[autograd::GradMode::is_enabled() ? 1 : 0];
  auto it = cache.find(x.impl());
  // Every write counts, x.data's too.
  const uint32_t generation = x.impl()->storage()->generation();
  if (it != cache.end() && it->second.generation == generation &&
      it->second.result.dtype() == dtype)
    return it->second.result;
  Tensor result = cast(x, dtype);
  cache[x.impl()] = {x, generation, result};
  return result;
}

bool castable(const Tensor* t) {
  return t->defined() && is_floating(t->dtype()) && t->dtype() != kFloat64;
}

}  // namespace

bool autocast_enabled(DeviceType device) { return t_autocast.state.enabled[index(device)]; }
DType autocast_dtype(DeviceType device) { return t_autocast.state.dtype[index(device)]; }

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled)
    : device_(device),
      prev_enabled_(autocast_enabled(device)),
      prev_dtype_(autocast_dtype(device)) {
  TESSERA_CHECK(is_16bit_float(dtype), ValueError,
                "[autocast] expected dtype bfloat16 or float16, got ", dtype);
  t_autocast.state.enabled[index(device)] = enabled;
  t_autocast.state.dtype[index(device)] = dtype;
  ++t_autocast.guards;
  refresh_hook();
}

AutocastGuard::~AutocastGuard() {
  t_autocast.state.enabled[index(device_)] = prev_enabled_;
  t_autocast.state.dtype[index(device_)] = prev_dtype_;
  if (--t_autocast.guards == 0) clear_autocast_cache();
  refresh_hook();
}

void clear_autocast_cache() {
  for (auto& cache : t_autocast.cache) cache.clear();
}

namespace detail {

AutocastState autocast_state() { return t_autocast.state; }

void set_autocast_state(const AutocastState& state) {
  t_autocast.state = state;
  refresh_hook();
}

AutocastStateScope::AutocastStateScope(const AutocastState& state)
    : prev_(autocast_state()), prev_no_autocast_(t_op_hooks.no_autocast) {
  t_op_hooks.no_autocast = false;
  set_autocast_state(state);
}

AutocastStateScope::~AutocastStateScope() {
  set_autocast_state(prev_);
  t_op_hooks.no_autocast = prev_no_autocast_;
}

NoAutocastScope::NoAutocastScope() : prev_(t_op_hooks.no_autocast) {
  t_op_hooks.no_autocast = true;
}
NoAutocastScope::~NoAutocastScope() { t_op_hooks.no_autocast = prev_; }

// A kFloat32Widening op's inputs it can widen itself: one 16-bit floating input, nothing else
// floating.
bool widens_itself(std::span<const Tensor* const> inputs) {
  int floating = 0, narrow = 0;
  for (const Tensor* t : inputs) {
    if (!t->defined() || !is_floating(t->dtype())) continue;
    ++floating;
    narrow += is_16bit_float(t->dtype());
  }
  return floating == 1 && narrow == 1;
}

bool autocast_inputs(const OpInfo& op, std::span<const Tensor* const> inputs,
                     std::span<Tensor> cast_inputs) {
  const Tensor* first = nullptr;
  for (const Tensor* t : inputs)
    if (castable(t)) {
      first = t;
      break;
    }
  if (!first || !autocast_enabled(first->device().type)) return false;
  if (op.cast == CastPolicy::kFloat32Widening && widens_itself(inputs)) return true;
  DType target = autocast_dtype(first->device().type);
  if (op.cast == CastPolicy::kFloat32 || op.cast == CastPolicy::kFloat32Widening) {
    target = kFloat32;
  } else if (op.cast == CastPolicy::kPromote) {
    target = first->dtype();
    for (const Tensor* t : inputs)
      if (t->defined() && is_floating(t->dtype())) target = promote_types(target, t->dtype());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = *inputs[i];
    if (!castable(&t) || t.dtype() == target) continue;
    cast_inputs[i] =
        op.cast == CastPolicy::kLowerPrecision ? cached_cast(t, target) : cast(t, target);
  }
  return false;
}

}  // namespace detail
}  // namespace tessera
