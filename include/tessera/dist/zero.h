#pragma once
// ZeroOptimizer: ZeRO stages 1 and 2 over DistributedDataParallel's buckets. Each bucket (padded
// to a multiple of the group size) splits into equal shards, one per rank; a rank keeps optimizer
// state only for the parameter elements of its shards and updates only those, then the ranks
// all-gather the updated parameters.
//   stage 1: DDP all-reduces the gradients as usual; each rank reads its shard of them.
//   stage 2: DDP reduce-scatters (DDPOptions::reduce_scatter), so each rank receives only its
//            shard of the averaged gradients.
//
//   dist::DistributedDataParallel ddp(model, world, {.reduce_scatter = true});  // stage 2
//   dist::ZeroOptimizer opt(ddp, optim::weight_decay_param_groups(model.parameters(), 0.1),
//                           [](std::vector<optim::ParamGroup> groups) {
//                             return std::make_unique<optim::AdamW>(std::move(groups), adam);
//                           });
//
// The shards are cut from DDP's buckets as they are when the optimizer is made, and DDP keeps
// them (freeze_bucket_layout). The shards are slices of parameters (1-d views), stepped by an
// ordinary optimizer made by the factory, so the arithmetic is the unsharded optimizer's, element
// for element. state_dict() is collective (every rank calls it) and returns the state of the
// unsharded optimizer, so a checkpoint loads into any world size, with or without ZeRO.
#include <functional>
#include <memory>
#include <vector>

#include "tessera/dist/ddp.h"
#include "tessera/optim/optimizer.h"

namespace tessera::dist {

class ZeroOptimizer : public optim::Optimizer {
 public:
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
  // groups: the full parameters, each among ddp's, all of one dtype. ddp must outlive this
  // object.
  ZeroOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups,
                const Factory& make_optimizer);
  ~ZeroOptimizer() override;

  int stage() const { return ddp_.options().reduce_scatter ? 2 : 1; }
  // Steps this rank's shards, then all-gathers the parameters.
  void step() override;
  // NotImplementedError: the shards are cut once, from the constructor's groups (make a new
  // ZeroOptimizer over every group instead).
  void add_param_group(optim::ParamGroup group) override;
  // The norm over every rank's shard of the averaged gradients (collective).
  Tensor clip_grad_norm_(double max_norm) override;
  bool steps_param_grads() const override { return false; }
  // The unsharded optimizer's state (collective: all-gathers the shards).
  optim::StateDict state_dict() const override;
  // Takes this rank's shards of an unsharded state (any world size wrote it).
  void load_state_dict(const optim::StateDict& state) override;
  // Elements of optimizer-stepped parameters this rank owns.
  int64_t shard_numel() const;

  struct Piece;   // one parameter's slice inside this rank's shard of a bucket
  struct Shards;  // the pieces and the optimizer that steps them

 protected:
  void update(const Tensor& param, const Tensor& grad, const optim::Options& options,
              optim::ParamState& state) override;
  void check_options(const optim::Options& options) const override {}

 private:
  // Cuts this rank's pieces from DDP's buckets and makes their optimizer.
  void build_shards(const Factory& make_optimizer);
  void all_gather_parameters();

  DistributedDataParallel& ddp_;
  std::unique_ptr<Shards> shards_;
};

}  // namespace tessera::dist
