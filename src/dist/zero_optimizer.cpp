#include "tessera/dist/zero.h"

#include <cmath>
#include <set>
#include <unordered_map>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/optim/clip_grad.h"

namespace tessera::dist {

using tessera::detail::str;

struct ZeroOptimizer::Piece {
  int64_t param = 0;  // index into ddp.parameters()
  int64_t bucket = 0;
  int64_t param_begin = 0;  // first element, in the parameter's flat order
  int64_t length = 0;
  int64_t shard_begin = 0;  // offset inside this rank's shard of the bucket
  Tensor view;              // the parameter's elements, stepped in place
};

// The group index of each DDP parameter (-1: not stepped by this optimizer) and its index in
// the unsharded optimizer's numbering (groups in order).
struct ParamIndex {
  std::vector<int> group;
  std::vector<int64_t> flat;
};

struct ZeroOptimizer::Shards {
  ParamIndex index;  // of DDP's parameters in this optimizer's groups
  // The bucket layout the pieces were cut from (DDP keeps it: freeze_bucket_layout).
  struct Bucket {
    std::vector<int64_t> params, offsets;
    int64_t padded = 0;
  };
  std::vector<Bucket> buckets;
  std::vector<Piece> pieces;
  std::vector<std::vector<int64_t>> group_pieces;  // pieces of each group, in order
  std::unique_ptr<optim::Optimizer> optimizer;     // null when this rank owns no element

  std::vector<int64_t> padded() const {
    std::vector<int64_t> out;
    for (const Bucket& b : buckets) out.push_back(b.padded);
    return out;
  }
  const optim::ParamState* state(const Piece& p) const {
    return optimizer ? optimizer->state(p.view) : nullptr;
  }
};

namespace {

ParamIndex index_params(const TensorList& ddp_params,
                        const std::vector<optim::ParamGroup>& groups) {
  std::unordered_map<const TensorImpl*, int64_t> where;
  for (size_t i = 0; i < ddp_params.size(); ++i)
    where[ddp_params[i].impl()] = static_cast<int64_t>(i);
  ParamIndex out{std::vector<int>(ddp_params.size(), -1),
                 std::vector<int64_t>(ddp_params.size(), -1)};
  int64_t flat = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Tensor& p : groups[g].params) {
      auto it = where.find(p.impl());
      TESSERA_CHECK(it != where.end(), ValueError,
                    "[ZeroOptimizer] expected parameters of the DistributedDataParallel module "
                    "that require grad, got one of shape ",
                    p.sizes(), " it does not reduce");
      out.group[it->second] = static_cast<int>(g);
      out.flat[it->second] = flat++;
    }
  }
  return out;
}

// All-gathers, bucket by bucket, the shards `fill` writes into a staging buffer; calls
// `take(param, full elements)` for every parameter of groups afterwards.
void gather_buckets(ProcessGroup& group, const std::vector<ZeroOptimizer::Piece>& pieces,
                    const std::vector<int64_t>& buckets_padded, DType dtype,
                    const std::function<Tensor(const ZeroOptimizer::Piece&)>& piece_values,
                    const std::function<void(int64_t b, const Tensor& full)>& take) {
  autograd::NoGradGuard no_grad;
  const int world = group.size();
  std::vector<Tensor> full(buckets_padded.size()), staging(buckets_padded.size());
  std::vector<WorkHandle> works;
  for (size_t b = 0; b < buckets_padded.size(); ++b) {
    full[b] = empty({buckets_padded[b]}, TensorOptions(dtype));
    staging[b] = zeros({buckets_padded[b] / world}, TensorOptions(dtype));
  }
  for (const ZeroOptimizer::Piece& p : pieces)
    staging[p.bucket].narrow(0, p.shard_begin, p.length).copy_(piece_values(p));
  for (size_t b = 0; b < full.size(); ++b) works.push_back(group.all_gather(full[b], staging[b]));
  for (const WorkHandle& w : works) w->wait();
  for (size_t b = 0; b < full.size(); ++b) take(static_cast<int64_t>(b), full[b]);
}

// Every rank's names, on every rank (a rank may own no piece that has a buffer, say rank 0 whose
// pieces are all outside the optimizer's groups, or an amsgrad group's).
std::vector<std::string> union_names(ProcessGroup& group, const std::set<std::string>& names) {
  std::string joined;
  for (const std::string& n : names) joined += n + "\n";
  Tensor longest = scalar_tensor(static_cast<int64_t>(joined.size()), TensorOptions(kInt64));
  group.all_reduce(longest, ReduceOp::Max)->wait();
  const int64_t width = longest.item<int64_t>();
  Tensor mine = zeros({width}, TensorOptions(kUInt8));
  std::copy(joined.begin(), joined.end(), mine.data_ptr<uint8_t>());
  Tensor all = zeros({width * group.size()}, TensorOptions(kUInt8));
  group.all_gather(all, mine)->wait();
  std::set<std::string> out;
  std::string current;
  for (int64_t k = 0; k < all.numel(); ++k) {
    const char c = static_cast<char>(all.data_ptr<uint8_t>()[k]);
    if (c == '\n') {
      out.insert(current);
      current.clear();
    } else if (c != 0) {
      current += c;
    }
  }
  return {out.begin(), out.end()};
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups,
                             const Factory& make_optimizer)
    : Optimizer("ZeroOptimizer", make_optimizer(groups)->defaults()), ddp_(ddp) {
  index_params(ddp_.parameters(), groups);  // checks every parameter is DDP's
  const Tensor& first = ddp_.parameters().front();
  for (const Tensor& p : ddp_.parameters())
    TESSERA_CHECK(p.dtype() == first.dtype() && p.device() == first.device(), ValueError,
                  "[ZeroOptimizer] expected parameters of one dtype and device, got ",
                  first.dtype(), " on ", first.device(), " and ", p.dtype(), " on ", p.device());
  add_initial_groups(std::move(groups));
  ddp_.freeze_bucket_layout();
  build_shards(make_optimizer);
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::add_param_group(optim::ParamGroup) {
  throw NotImplementedError(
      "[ZeroOptimizer.add_param_group] expected the groups at construction, got a new one: the "
      "shards are cut once from DDP's buckets (make a new ZeroOptimizer over every group)");
}

void ZeroOptimizer::update(const Tensor&, const Tensor&, const optim::Options&,
                           optim::ParamState&) {
  TESSERA_ASSERT(false, "ZeroOptimizer::update: step() updates the shards");
}

int64_t ZeroOptimizer::shard_numel() const {
  int64_t n = 0;
  for (const Piece& p : shards_->pieces) n += p.length;
  return n;
}

void ZeroOptimizer::build_shards(const Factory& make_optimizer) {
  const TensorList& params = ddp_.parameters();
  const ParamIndex index = index_params(params, param_groups());
  const int world = ddp_.group().size(), rank = ddp_.group().rank();
  auto shards = std::make_unique<Shards>();
  shards->index = index;
  shards->group_pieces.resize(param_groups().size());
  const std::vector<GradBucket>& buckets = ddp_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const GradBucket& bucket = buckets[b];
    shards->buckets.push_back({bucket.params, bucket.offsets, bucket.padded_numel()});
    const int64_t shard = bucket.padded_numel() / world;
    const int64_t mine = rank * shard;
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const int64_t i = bucket.params[k];
      if (index.group[i] < 0) continue;
      const int64_t begin = std::max(bucket.offsets[k], mine);
      const int64_t end = std::min(bucket.offsets[k] + params[i].numel(), mine + shard);
      if (begin >= end) continue;
      Piece piece{i,
                  static_cast<int64_t>(b),
                  begin - bucket.offsets[k],
                  end - begin,
                  begin - mine,
                  params[i].detach().view({-1}).narrow(0, begin - bucket.offsets[k], end - begin)};
      piece.view.set_grad(stage() == 2 ? bucket.shard.narrow(0, piece.shard_begin, piece.length)
                                       : bucket.buffer.narrow(0, begin, piece.length));
      shards->group_pieces[index.group[i]].push_back(static_cast<int64_t>(shards->pieces.size()));
      shards->pieces.push_back(std::move(piece));
    }
  }
  if (!shards->pieces.empty()) {
    std::vector<optim::ParamGroup> groups;
    for (size_t g = 0; g < param_groups().size(); ++g) {
      optim::ParamGroup group{{}, param_groups()[g].options};
      for (int64_t k : shards->group_pieces[g]) group.params.push_back(shards->pieces[k].view);
      groups.push_back(std::move(group));
    }
    shards->optimizer = make_optimizer(std::move(groups));
  }
  shards_ = std::move(shards);
}

void ZeroOptimizer::step() {
  if (shards_->optimizer) {
    auto& inner = shards_->optimizer->param_groups();
    for (size_t g = 0; g < inner.size(); ++g) inner[g].options = param_groups()[g].options;
    shards_->optimizer->step();
  }
  all_gather_parameters();
}

void ZeroOptimizer::all_gather_parameters() {
  const TensorList& params = ddp_.parameters();
  const ParamIndex& index = shards_->index;
  gather_buckets(
      ddp_.group(), shards_->pieces, shards_->padded(), params.front().dtype(),
      [](const Piece& p) { return p.view; },
      [&](int64_t b, const Tensor& full) {
        const Shards::Bucket& bucket = shards_->buckets[b];
        for (size_t k = 0; k < bucket.params.size(); ++k) {
          const int64_t i = bucket.params[k];
          if (index.group[i] < 0) continue;
          params[i].detach().view({-1}).copy_(full.narrow(0, bucket.offsets[k], params[i].numel()));
        }
      });
}

Tensor ZeroOptimizer::clip_grad_norm_(double max_norm) {
  TensorList views;
  for (const Piece& p : shards_->pieces) views.push_back(p.view);
  const double local = views.empty() ? 0.0 : optim::grad_norm(views).item<double>();
  Tensor sum = scalar_tensor(local * local, TensorOptions(kFloat64));
  ddp_.group().all_reduce(sum, ReduceOp::Sum)->wait();
  const double total = std::sqrt(sum.item<double>());
  const double coef = max_norm / (total + 1e-6);
  if (max_norm > 0 && coef < 1.0) {
    autograd::NoGradGuard no_grad;
    for (const Tensor& v : views) v.grad().mul_(coef);
  }
  return scalar_tensor(total, TensorOptions(kFloat32));
}

optim::StateDict ZeroOptimizer::state_dict() const {
  const TensorList& params = ddp_.parameters();
  const ParamIndex& index = shards_->index;
  optim::StateDict out = Optimizer::state_dict();  // the groups' options and sizes
  // Steps: each parameter's, from whichever rank owns a piece of it.
  Tensor steps = zeros({static_cast<int64_t>(params.size())}, TensorOptions(kFloat64));
  std::set<std::string> local_names;
  for (const Piece& p : shards_->pieces) {
    const optim::ParamState* s = shards_->state(p);
    if (!s) continue;
    steps.data_ptr<double>()[p.param] = static_cast<double>(s->step);
    for (const auto& [name, _] : s->buffers) local_names.insert(name);
  }
  ddp_.group().all_reduce(steps, ReduceOp::Max)->wait();
  const std::vector<std::string> names = union_names(ddp_.group(), local_names);
  const double* step = steps.data_ptr<double>();
  for (size_t i = 0; i < params.size(); ++i)
    if (index.group[i] >= 0 && step[i] > 0)
      out.scalars.insert(str("state.", index.flat[i], ".step"), step[i]);
  const DType dtype = optim::state_dtype(params.front().dtype());
  // Gathered per buffer name, listed per parameter (the unsharded optimizer's order).
  std::vector<std::vector<std::pair<std::string, Tensor>>> gathered(params.size());
  for (const std::string& name : names) {
    gather_buckets(
        ddp_.group(), shards_->pieces, shards_->padded(), dtype,
        [&](const Piece& p) {
          const optim::ParamState* s = shards_->state(p);
          const Tensor* buf = s ? s->buffers.find(name) : nullptr;
          return buf ? buf->view({-1}) : zeros({p.length}, TensorOptions(dtype));
        },
        [&](int64_t b, const Tensor& full) {
          const Shards::Bucket& bucket = shards_->buckets[b];
          for (size_t k = 0; k < bucket.params.size(); ++k) {
            const int64_t i = bucket.params[k];
            if (index.group[i] < 0 || step[i] <= 0) continue;
            gathered[index.flat[i]].emplace_back(
                name, full.narrow(0, bucket.offsets[k], params[i].numel())
                          .view(params[i].sizes())
                          .clone());
          }
        });
  }
  for (size_t i = 0; i < gathered.size(); ++i)
    for (auto& [name, t] : gathered[i])
      out.tensors.insert(str("state.", i, ".", name), std::move(t));
  return out;
}

void ZeroOptimizer::load_state_dict(const optim::StateDict& state) {
  Optimizer::load_state_dict(state);  // checks it against the full parameters, keeps it whole
  if (shards_->optimizer) {
    optim::StateDict inner;
    int64_t j = 0;
    for (size_t g = 0; g < param_groups().size(); ++g) {
      const std::string prefix = str("param_groups.", g, ".");
      for (const auto& [key, value] : param_groups()[g].options)
        inner.scalars.insert(prefix + key, value);
      inner.scalars.insert(prefix + "num_params",
                           static_cast<double>(shards_->group_pieces[g].size()));
      for (int64_t k : shards_->group_pieces[g]) {
        const Piece& p = shards_->pieces[k];
        const optim::ParamState* s = Optimizer::state(ddp_.parameters()[p.param]);
        const std::string key = str("state.", j++, ".");
        if (!s) continue;
        inner.scalars.insert(key + "step", static_cast<double>(s->step));
        for (const auto& [name, buf] : s->buffers)
          inner.tensors.insert(key + name, buf.view({-1}).narrow(0, p.param_begin, p.length));
      }
    }
    shards_->optimizer->load_state_dict(inner);
  }
  clear_state();
}

}  // namespace tessera::dist
