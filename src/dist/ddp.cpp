#include "tessera/dist/ddp.h"

#include "dist/reducer.h"
#include "tessera/autograd/grad_mode.h"

namespace tessera::dist {

DistributedDataParallel::DistributedDataParallel(nn::Module& module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DDPOptions options)
    : module_(module), group_(std::move(group)), options_(options) {
  TESSERA_CHECK(group_ != nullptr, ValueError,
                "[DistributedDataParallel] expected a process group, got null");
  TESSERA_CHECK(options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0, ValueError,
                "[DistributedDataParallel] expected positive bucket caps, got bucket_cap_mb ",
                options_.bucket_cap_mb, " and first_bucket_cap_mb ", options_.first_bucket_cap_mb);
  TensorList params;
  std::vector<std::string> names;
  for (const auto& [name, p] : module_.named_parameters()) {
    if (!p.requires_grad()) continue;
    TESSERA_CHECK(p.is_contiguous(), ValueError,
                  "[DistributedDataParallel] expected contiguous parameters, got '", name,
                  "' with strides ", p.strides());
    params.push_back(p);
    names.push_back(name);
  }
  TESSERA_CHECK(!params.empty(), ValueError,
                "[DistributedDataParallel] expected a module with parameters that require grad, "
                "got none");
  broadcast_from_rank0();
  reducer_ = std::make_shared<Reducer>(std::move(params), std::move(names), group_, options_);
  const TensorList& ps = reducer_->params();
  for (size_t i = 0; i < ps.size(); ++i) {
    ps[i].register_post_accumulate_grad_hook(
        [weak = std::weak_ptr<Reducer>(reducer_), i](const Tensor&) {
          if (auto reducer = weak.lock()) reducer->on_grad_ready(static_cast<int64_t>(i));
        });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::broadcast_from_rank0() {
  autograd::NoGradGuard no_grad;
  std::vector<WorkHandle> works;
  for (const Tensor& p : module_.parameters()) works.push_back(group_->broadcast(p, 0));
  for (const Tensor& b : module_.buffers()) works.push_back(group_->broadcast(b, 0));
  for (const WorkHandle& w : works) w->wait();
  for (const Tensor& p : module_.parameters()) p.bump_version();
}

const TensorList& DistributedDataParallel::parameters() const { return reducer_->params(); }
const std::vector<std::string>& DistributedDataParallel::parameter_names() const {
  return reducer_->names();
}
const std::vector<GradBucket>& DistributedDataParallel::buckets() const {
  return reducer_->buckets();
}
int64_t DistributedDataParallel::bucket_layout_version() const {
  return reducer_->layout_version();
}
void DistributedDataParallel::freeze_bucket_layout() { reducer_->freeze_layout(); }
void DistributedDataParallel::set_require_gradient_sync(bool sync) {
  reducer_->require_sync = sync;
}
bool DistributedDataParallel::require_gradient_sync() const { return reducer_->require_sync; }
DistributedDataParallel::Timing DistributedDataParallel::last_timing() const {
  return reducer_->timing;
}

}  // namespace tessera::dist
