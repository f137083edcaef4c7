// A recording's replay plan: constant kernels folded away, elementwise chains fused into one
// pass over memory evaluated tile by tile (a small program of functor calls over cache-sized
// buffers), everything else replayed as captured.
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>

#include "runtime/graph_recorder.h"

namespace tessera::detail {

namespace {

constexpr int64_t kTile = 1024;  // elements per tile: a register file of tiles stays in L1/L2

const StorageImpl* storage_of(const Tensor& t) { return t.impl()->storage().get(); }

// A fused chain: loads of the tensors it reads, then functor calls over registers (tile
// buffers); the last call writes the output. Registers 0..loads-1 hold the loads.
struct Program {
  struct Call {
    TileFn fn;
    std::array<int, 3> in{};
    int nin = 0;
  };
  DType dtype{};
  Tensor out;
  std::vector<Tensor> loads;
  std::vector<Call> calls;
  std::vector<std::string_view> names;  // the fused kernels, in order
};

// dst[0, n) = n copies of the item at value (doubling copies).
void replicate(char* dst, const char* value, size_t item, int64_t n) {
  if (n == 0) return;
  std::memcpy(dst, value, item);
  for (int64_t done = 1; done < n; done *= 2)
    std::memcpy(dst + done * item, dst, std::min(done, n - done) * item);
}

// Fills buf[0, n) with t's elements for output positions [begin, begin + n) (t broadcasts to
// sizes), a run along the innermost dim at a time; returns t's own memory when t is contiguous
// with the output's shape.
const char* load_tile(const Tensor& t, const Shape& sizes, int64_t begin, int64_t n, char* buf) {
  const int64_t item = static_cast<int64_t>(t.element_size());
  const char* base = static_cast<const char*>(t.data_ptr());
  if (t.is_contiguous() && t.sizes() == sizes) return base + begin * item;
  if (t.numel() == 1) {
    replicate(buf, base, item, n);
    return buf;
  }
  const int nd = static_cast<int>(sizes.size()), off = nd - static_cast<int>(t.dim());
  std::array<int64_t, 16> idx{}, stride{};
  for (int d = 0; d < nd; ++d)
    stride[d] = d < off || t.size(d - off) == 1 ? 0 : t.stride(d - off) * item;
  int64_t rem = begin;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % sizes[d];
    rem /= sizes[d];
  }
  const int64_t inner = sizes[nd - 1], step = stride[nd - 1];
  for (int64_t i = 0; i < n;) {
    const char* src = base;
    for (int d = 0; d < nd; ++d) src += idx[d] * stride[d];
    const int64_t run = std::min(inner - idx[nd - 1], n - i);
    char* dst = buf + i * item;
    if (step == item)
      std::memcpy(dst, src, run * item);
    else if (step == 0)
      replicate(dst, src, item, run);
    else
      for (int64_t k = 0; k < run; ++k) std::memcpy(dst + k * item, src + k * step, item);
    i += run;
    idx[nd - 1] += run;
    for (int d = nd - 1; d > 0 && idx[d] == sizes[d]; --d) {  // carry into outer dims
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
  return buf;
}

void run_program(const Program& p) {
  const Shape& sizes = p.out.sizes();
  const int64_t n = p.out.numel();
  const size_t item = itemsize(p.dtype);
  const int nload = static_cast<int>(p.loads.size());
  const int nregs = nload + static_cast<int>(p.calls.size());
  const int64_t tiles = (n + kTile - 1) / kTile;
  char* out = static_cast<char*>(p.out.data_ptr());
#pragma omp parallel for schedule(static) if (tiles > 1)
  for (int64_t tile = 0; tile < tiles; ++tile) {
    // Scratch lives with the thread, not the tensor allocator: a replay allocates no tensors.
    thread_local std::vector<char> scratch;
    scratch.resize(size_t(nregs) * kTile * item);
    thread_local std::vector<const char*> regs;
    regs.resize(nregs);
    const int64_t begin = tile * kTile, len = std::min(kTile, n - begin);
    for (int r = 0; r < nload; ++r)
      regs[r] = load_tile(p.loads[r], sizes, begin, len, scratch.data() + r * kTile * item);
    for (size_t c = 0; c < p.calls.size(); ++c) {
      const Program::Call& call = p.calls[c];
      const int r = nload + static_cast<int>(c);
      char* dst = c + 1 == p.calls.size() ? out + begin * item : scratch.data() + r * kTile * item;
      std::array<const char*, 3> in{};
      for (int k = 0; k < call.nin; ++k) in[k] = regs[call.in[k]];
      call.fn(p.dtype, dst, in.data(), len);
      regs[r] = dst;
    }
  }
}

// What the planner knows of each storage the recording touched.
struct StorageUse {
  int writers = 0;              // calls that (may) write it
  std::vector<size_t> readers;  // calls that (may) read it, one entry per call
  // Per tensor of this storage: one of the graph's handles to it, and how many it holds.
  std::map<const TensorImpl*, std::pair<const Tensor*, long>> handles;
  const Storage* storage = nullptr;
};

class Planner {
 public:
  Planner(std::vector<CapturedKernel> calls, const std::unordered_set<const StorageImpl*>& external)
      : calls_(std::move(calls)),
        external_(external),
        folded_(calls_.size()),
        absorbed_(calls_.size()),
        inputs_(calls_.size()) {
    for (size_t i = 0; i < calls_.size(); ++i) {
      for (const CapturedTensor& t : calls_[i].tensors) {
        StorageUse& use = uses_[storage_of(t.tensor)];
        use.storage = &t.tensor.impl()->storage();
        auto& [handle, count] = use.handles[t.tensor.impl()];
        handle = &t.tensor;
        count += 2;  // one in the call's arguments, one in its tensor list
        const bool writes = t.written || !calls_[i].known_access;
        const bool reads = !t.written || !calls_[i].known_access;
        if (writes) ++use.writers;
        if (reads && (use.readers.empty() || use.readers.back() != i)) use.readers.push_back(i);
      }
    }
  }

  ReplayPlan plan() {
    ReplayPlan plan;
    plan.stats.recorded_kernels = static_cast<int64_t>(calls_.size());
    fold_constants();
    for (size_t i = 0; i < calls_.size(); ++i)
      if (!folded_[i] && fusable(i)) absorb_inputs(i);
    for (size_t i = 0; i < calls_.size(); ++i) {
      if (folded_[i]) {
        ++plan.stats.folded_kernels;
        continue;
      }
      if (absorbed_[i]) continue;
      if (!has_group(i)) {
        plan.steps.push_back({std::string(calls_[i].name), std::move(calls_[i].run)});
        continue;
      }
      auto program = std::make_shared<Program>(build(i));
      plan.stats.fused_kernels += static_cast<int64_t>(program->calls.size());
      ++plan.stats.fused_passes;
      std::string name = "fused(";
      for (size_t k = 0; k < program->names.size(); ++k)
        name += std::string(k ? " " : "") + std::string(program->names[k]);
      plan.steps.push_back({name + ")", [program] { run_program(*program); }});
    }
    plan.stats.freed_intermediates = std::count(absorbed_.begin(), absorbed_.end(), true);
    plan.stats.launches = static_cast<int64_t>(plan.steps.size());
    return plan;  // the captured calls go: fused chains' intermediates are freed here
  }

 private:
  // A kernel whose inputs are all constants (or none) and whose outputs only it writes keeps
  // its recorded result: scalar operands (fill, then a cast), zeros.
  void fold_constants() {
    std::unordered_set<const StorageImpl*> constant;
    for (size_t i = 0; i < calls_.size(); ++i) {
      const CapturedKernel& c = calls_[i];
      if (!c.known_access) continue;
      bool ok = true;
      for (const CapturedTensor& t : c.tensors) {
        const StorageImpl* s = storage_of(t.tensor);
        ok &= t.written ? !external_.contains(s) && uses_[s].writers == 1 : constant.contains(s);
      }
      if (!ok) continue;
      folded_[i] = true;
      for (const CapturedTensor& t : c.tensors)
        if (t.written) constant.insert(storage_of(t.tensor));
    }
  }

  // An elementwise functor call of one dtype writing one contiguous CPU output.
  bool fusable(size_t i) const {
    const CapturedKernel& c = calls_[i];
    if (!c.tile || !c.known_access || c.tensors.size() < 2 || c.tensors.size() > 4) return false;
    const Tensor& out = c.tensors[0].tensor;
    if (!c.tensors[0].written || !out.is_contiguous() || out.device() != kCPU) return false;
    for (size_t k = 1; k < c.tensors.size(); ++k)
      if (c.tensors[k].written || c.tensors[k].tensor.dtype() != out.dtype()) return false;
    return true;
  }

  // Merges into call i the fusable calls that produce its inputs when nothing else sees them.
  void absorb_inputs(size_t i) {
    const Tensor& out = calls_[i].tensors[0].tensor;
    std::unordered_map<const StorageImpl*, size_t> taken;  // x * x reads one producer twice
    for (size_t k = 1; k < calls_[i].tensors.size(); ++k) {
      const Tensor& in = calls_[i].tensors[k].tensor;
      std::optional<size_t> producer;
      if (auto it = taken.find(storage_of(in)); it != taken.end())
        producer = it->second;
      else
        producer = group_producing(in, i, out);
      if (producer) {
        absorbed_[*producer] = true;
        taken[storage_of(in)] = *producer;
      }
      inputs_[i].push_back(producer);
    }
  }

  // The unabsorbed group whose output is `in`, read by call i only, with out's shape, and
  // held by nothing outside the graph; nullopt when there is none.
  std::optional<size_t> group_producing(const Tensor& in, size_t i, const Tensor& out) const {
    const StorageImpl* s = storage_of(in);
    if (external_.contains(s) || !in.is_contiguous() || in.sizes() != out.sizes()) return {};
    const StorageUse& use = uses_.at(s);
    if (use.writers != 1 || use.readers.size() != 1 || use.readers[0] != i) return {};
    if (use.storage->use_count() != static_cast<long>(use.handles.size())) return {};
    for (const auto& [impl, held] : use.handles)
      if (held.first->impl_ptr().use_count() != held.second) return {};
    for (size_t j = i; j-- > 0;) {
      const CapturedKernel& c = calls_[j];
      if (folded_[j] || absorbed_[j] || c.tensors.empty() || storage_of(c.tensors[0].tensor) != s)
        continue;
      const Tensor& produced = c.tensors[0].tensor;
      if (!fusable(j) || produced.data_ptr() != in.data_ptr() || produced.sizes() != out.sizes())
        return {};
      if (writes_between(j, i, j)) return {};
      return j;
    }
    return {};
  }

  // Whether a call strictly between first and last writes what group `root` reads (moving the
  // group's work to `last` would then read different values).
  bool writes_between(size_t first, size_t last, size_t root) const {
    std::unordered_set<const StorageImpl*> reads;
    collect_reads(root, reads);
    for (size_t j = first + 1; j < last; ++j) {
      if (folded_[j]) continue;
      for (const CapturedTensor& t : calls_[j].tensors)
        if ((t.written || !calls_[j].known_access) && reads.contains(storage_of(t.tensor)))
          return true;
    }
    return false;
  }
  void collect_reads(size_t i, std::unordered_set<const StorageImpl*>& reads) const {
    for (size_t k = 1; k < calls_[i].tensors.size(); ++k) {
      if (k - 1 < inputs_[i].size() && inputs_[i][k - 1])
        collect_reads(*inputs_[i][k - 1], reads);
      else
        reads.insert(storage_of(calls_[i].tensors[k].tensor));
    }
  }

  bool has_group(size_t i) const {
    return std::any_of(inputs_[i].begin(), inputs_[i].end(), [](auto p) { return p.has_value(); });
  }

  Program build(size_t root) {
    Program p;
    p.dtype = calls_[root].tensors[0].tensor.dtype();
    p.out = calls_[root].tensors[0].tensor;
    // Loads first (registers 0..), then calls in dependency order.
    std::vector<size_t> postorder;
    collect(root, postorder);
    std::unordered_map<const TensorImpl*, int> load_reg;
    for (size_t c : postorder)
      for (size_t k = 1; k < calls_[c].tensors.size(); ++k) {
        if (inputs_[c][k - 1]) continue;
        const Tensor& t = calls_[c].tensors[k].tensor;
        if (load_reg.emplace(t.impl(), static_cast<int>(p.loads.size())).second)
          p.loads.push_back(t);
      }
    std::unordered_map<size_t, int> call_reg;
    for (size_t c : postorder) {
      Program::Call call{calls_[c].tile};
      for (size_t k = 1; k < calls_[c].tensors.size(); ++k) {
        const auto& producer = inputs_[c][k - 1];
        call.in[call.nin++] =
            producer ? call_reg.at(*producer) : load_reg.at(calls_[c].tensors[k].tensor.impl());
      }
      call_reg[c] = static_cast<int>(p.loads.size() + p.calls.size());
      p.calls.push_back(call);
      p.names.push_back(calls_[c].name);
    }
    return p;
  }
  void collect(size_t i, std::vector<size_t>& postorder) const {
    for (const auto& producer : inputs_[i])
      if (producer) collect(*producer, postorder);
    postorder.push_back(i);
  }

  std::vector<CapturedKernel> calls_;
  const std::unordered_set<const StorageImpl*>& external_;
  std::unordered_map<const StorageImpl*, StorageUse> uses_;
  std::vector<bool> folded_, absorbed_;
  std::vector<std::vector<std::optional<size_t>>> inputs_;  // per fusable call: producer per input
};

}  // namespace

ReplayPlan plan_replay(std::vector<CapturedKernel> calls,
                       const std::unordered_set<const StorageImpl*>& external) {
  return Planner(std::move(calls), external).plan();
}

}  // namespace tessera::detail
