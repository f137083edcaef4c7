// tessera._C.distributed: process groups and their Work handles, DistributedDataParallel and the
// ZeRO optimizer, for tessera.distributed (torch.distributed's functions, in Python) and
// tessera.nn.parallel. ProcessGroupMPI and its world group exist only in builds with MPI
// (TESSERA_WITH_MPI, from tessera_dist); DDP and ZeRO take any ProcessGroup.
//
// Blocking calls (wait, barrier, the launches, which wait in debug mode) release the GIL, so other
// Python threads run while a rank waits for its peers.
#include <pybind11/chrono.h>

#include <cmath>
#include <mutex>

#include "bind.h"
#include "tessera/dist/ddp.h"
#include "tessera/dist/zero.h"
#if TESSERA_WITH_MPI
#include "tessera/dist/process_group_mpi.h"
#endif

namespace tessera::python {

namespace {

using dist::ProcessGroup;
using dist::ReduceOp;
using dist::Work;
using dist::WorkHandle;
using Release = py::call_guard<py::gil_scoped_release>;

// A timeout from a datetime.timedelta or a number of seconds.
std::chrono::milliseconds to_timeout(py::handle h, const char* op) {
  double seconds = 0;
  if (py::hasattr(h, "total_seconds"))
    seconds = h.attr("total_seconds")().cast<double>();
  else if (py::isinstance<py::int_>(h) || py::isinstance<py::float_>(h))
    seconds = h.cast<double>();
  else
    throw TypeError(detail::str("[", op, "] expected a datetime.timedelta or seconds, got ",
                                std::string(py::str(py::type::handle_of(h).attr("__name__")))));
  TESSERA_CHECK(std::isfinite(seconds) && seconds > 0, ValueError, "[", op,
                "] expected a positive timeout, got ", seconds, " s");
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

// A Work that runs `then` once, when its operation has completed: all_gather's list form copies
// the gathered blocks out of its flat buffer.
class ThenWork : public Work {
 public:
  ThenWork(WorkHandle inner, std::function<void()> then)
      : inner_(std::move(inner)), then_(std::move(then)) {}
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_ && inner_->is_completed()) finish();
    return done_;
  }
  void wait() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    inner_->wait();
    finish();
  }

 private:
  void finish() {
    then_();
    done_ = true;
  }
  std::mutex mutex_;
  WorkHandle inner_;
  std::function<void()> then_;
  bool done_ = false;
};

// torch's all_gather(tensor_list, tensor): one flat all_gather, then block r into outputs[r].
WorkHandle all_gather_list(ProcessGroup& pg, const TensorList& outputs, const Tensor& input) {
  TESSERA_CHECK(static_cast<int>(outputs.size()) == pg.size(), ValueError,
                "[all_gather] expected a tensor_list of ", pg.size(),
                " tensors (the group size), got ", outputs.size());
  for (const Tensor& o : outputs) {
    TESSERA_CHECK(o.dtype() == input.dtype(), TypeError,
                  "[all_gather] expected tensor_list entries of the input's dtype ", input.dtype(),
                  ", got ", o.dtype());
    TESSERA_CHECK(o.sizes() == input.sizes(), ValueError,
                  "[all_gather] expected tensor_list entries of the input's shape ", input.sizes(),
                  ", got ", o.sizes());
  }
  Tensor flat =
      empty({pg.size() * input.numel()}, TensorOptions(input.dtype()).with_device(input.device()));
  WorkHandle work = pg.all_gather(flat, input);
  return std::make_shared<ThenWork>(std::move(work), [outputs, flat, n = input.numel()] {
    autograd::NoGradGuard no_grad;
    for (size_t r = 0; r < outputs.size(); ++r) {
      Tensor o = outputs[r];
      o.copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(o.sizes()));
    }
  });
}

void bind_process_group(py::module_& d) {
  py::enum_<ReduceOp>(d, "ReduceOp", "How all_reduce and reduce_scatter combine the ranks' values.")
      .value("SUM", ReduceOp::Sum)
      .value("AVG", ReduceOp::Avg)
      .value("MAX", ReduceOp::Max)
      .value("MIN", ReduceOp::Min);

  py::class_<Work, std::shared_ptr<Work>>(
      d, "Work", "An operation in flight; its tensors hold the result once wait() returns.")
      .def(
          "wait",
          [](Work& w) {
            w.wait();
            return true;
          },
          Release(), "Blocks until completion (DistributedError past the group's timeout).")
      .def("is_completed", &Work::is_completed, Release(), "Polls once, without blocking.");

  // dynamic_attr: tessera.distributed records the job ranks of the groups new_group() made.
  py::class_<ProcessGroup, std::shared_ptr<ProcessGroup>>(
      d, "ProcessGroup", py::dynamic_attr(),
      "Collectives among a fixed set of ranks, each returning a Work.")
      .def("rank", &ProcessGroup::rank)
      .def("size", &ProcessGroup::size)
      .def_property_readonly("name", &ProcessGroup::name)
      .def_property(
          "timeout", &ProcessGroup::timeout,
          [](ProcessGroup& pg, py::handle t) { pg.set_timeout(to_timeout(t, "timeout")); },
          "The deadline of every wait (a timedelta; set it from a timedelta or seconds).")
      .def_property("debug", &ProcessGroup::debug, &ProcessGroup::set_debug,
                    "Whether ranks check that they all call the same collective.")
      .def("all_reduce", &ProcessGroup::all_reduce, py::arg("tensor"),
           py::arg("op") = ReduceOp::Sum, Release())
      .def("all_gather", &ProcessGroup::all_gather, py::arg("output"), py::arg("input"), Release(),
           "Every rank's input into output, rank-major (size() * input.numel() elements).")
      .def("all_gather", &all_gather_list, py::arg("tensor_list"), py::arg("input"), Release(),
           "Rank r's input into tensor_list[r].")
      .def("reduce_scatter", &ProcessGroup::reduce_scatter, py::arg("output"), py::arg("input"),
           py::arg("op") = ReduceOp::Sum, Release())
      .def("broadcast", &ProcessGroup::broadcast, py::arg("tensor"), py::arg("root"), Release())
      .def("send", &ProcessGroup::send, py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0,
           Release())
      .def("recv", &ProcessGroup::recv, py::arg("tensor"), py::arg("src"), py::arg("tag") = 0,
           Release())
      .def("barrier", &ProcessGroup::barrier, Release())
      .def("__repr__", [](const ProcessGroup& pg) {
        return detail::str("ProcessGroup('", pg.name(), "', rank=", pg.rank(), ", size=", pg.size(),
                           ")");
      });

  d.def(
      "default_timeout", [] { return dist::default_timeout(); },
      "The deadline new groups get: TESSERA_DIST_TIMEOUT seconds, or 10 minutes.");
}

#if TESSERA_WITH_MPI
void bind_mpi(py::module_& d) {
  using dist::ProcessGroupMPI;
  py::class_<ProcessGroupMPI, ProcessGroup, std::shared_ptr<ProcessGroupMPI>>(
      d, "ProcessGroupMPI", "The CPU process group, over MPI.")
      .def("new_group", &ProcessGroupMPI::new_group, py::arg("ranks"), py::arg("name") = "",
           Release(),
           "A subgroup of `ranks` (ascending); None on the ranks left out. Every rank calls it.")
      .def("split", &ProcessGroupMPI::split, py::arg("color"), py::arg("key"), py::arg("name"),
           Release(), "One subgroup per color, ranks ordered by key. Every rank calls it.");
  d.def("world", &ProcessGroupMPI::world, Release(),
        "The group of every process; initialises MPI on the first call.");
  d.def("finalize", &dist::finalize, Release(), "Finalises MPI if tessera initialised it.");
}
#endif

// tessera.nn.parallel.DistributedDataParallel: a Module whose one child, "module", is the wrapped
// model (so its state_dict keys read "module.<name>", as torch's), with the C++ DDP that averages
// the model's gradients over the group in backward.
class DDPModule : public nn::Module {
 public:
  DDPModule(const std::shared_ptr<nn::Module>& module, std::shared_ptr<ProcessGroup> group,
            const dist::DDPOptions& options) {
    register_module("module", module);
    ddp_ = std::make_unique<dist::DistributedDataParallel>(*module, std::move(group), options);
  }
  std::string type_name() const override { return "DistributedDataParallel"; }
  dist::DistributedDataParallel& ddp() { return *ddp_; }

 private:
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
};

// `with ddp.no_sync():` gradients accumulate locally until a backward outside it.
struct NoSyncContext {
  std::shared_ptr<DDPModule> ddp;
  bool previous = true;
};

std::shared_ptr<ProcessGroup> group_or_default(py::object group) {
  if (group.is_none())
    group = py::module_::import("tessera.distributed").attr("_get_default_group")();
  return group.cast<std::shared_ptr<ProcessGroup>>();
}

void bind_ddp(py::module_& d) {
  py::class_<NoSyncContext>(d, "_NoSync")
      .def("__enter__",
           [](NoSyncContext& c) {
             c.previous = c.ddp->ddp().require_gradient_sync();
             c.ddp->ddp().set_require_gradient_sync(false);
           })
      .def("__exit__", [](NoSyncContext& c, py::args) {
        c.ddp->ddp().set_require_gradient_sync(c.previous);
        return false;
      });

  py::class_<DDPModule, nn::Module, std::shared_ptr<DDPModule>>(
      d, "DistributedDataParallel", py::dynamic_attr(),
      "Wraps a module so that backward leaves every rank with the gradients averaged over the "
      "group (rank 0's parameters and buffers are broadcast first). Calls go to the module.")
      .def(py::init([](const std::shared_ptr<nn::Module>& module, py::object process_group,
                       double bucket_cap_mb, bool gradient_as_bucket_view,
                       bool find_unused_parameters, double first_bucket_cap_mb,
                       bool reduce_scatter) {
             dist::DDPOptions options;
             options.bucket_cap_mb = bucket_cap_mb;
             options.first_bucket_cap_mb = first_bucket_cap_mb;
             options.gradient_as_bucket_view = gradient_as_bucket_view;
             options.find_unused_parameters = find_unused_parameters;
             options.reduce_scatter = reduce_scatter;
             return std::make_shared<DDPModule>(module, group_or_default(process_group), options);
           }),
           py::arg("module"), py::arg("process_group") = py::none(), py::kw_only(),
           py::arg("bucket_cap_mb") = 25.0, py::arg("gradient_as_bucket_view") = false,
           py::arg("find_unused_parameters") = false, py::arg("first_bucket_cap_mb") = 1.0,
           py::arg("reduce_scatter") = false,
           // The C++ DDP refers to the module: its Python object (and a Python-defined
           // forward) lives as long as the wrapper.
           py::keep_alive<1, 2>())
      .def("forward", [](py::object self, py::args args,
                         py::kwargs kwargs) { return self.attr("module")(*args, **kwargs); })
      .def(
          "no_sync", [](std::shared_ptr<DDPModule> self) { return NoSyncContext{std::move(self)}; },
          "Context manager: backward passes inside it accumulate gradients without reducing them.")
      .def_property(
          "require_backward_grad_sync",
          [](DDPModule& m) { return m.ddp().require_gradient_sync(); },
          [](DDPModule& m, bool sync) { m.ddp().set_require_gradient_sync(sync); })
      .def_property_readonly("process_group", [](DDPModule& m) { return m.ddp().group_ptr(); })
      .def_property_readonly("gradient_as_bucket_view",
                             [](DDPModule& m) { return m.ddp().options().gradient_as_bucket_view; })
      .def_property_readonly("find_unused_parameters",
                             [](DDPModule& m) { return m.ddp().options().find_unused_parameters; })
      .def(
          "_bucket_parameter_names",
          [](DDPModule& m) {
            std::vector<std::vector<std::string>> out;
            for (const dist::GradBucket& b : m.ddp().buckets()) {
              out.emplace_back();
              for (int64_t i : b.params) out.back().push_back(m.ddp().parameter_names()[i]);
            }
            return out;
          },
          "The parameters of each gradient bucket, in launch order.");
}

// ZeroOptimizer makes its shards' optimizer with a factory. From Python it copies a prototype:
// optimizer_class(params, **defaults) checks the arguments as the class does, and the factory
// makes the same C++ class with the prototype's defaults.
dist::ZeroOptimizer::Factory factory_like(const std::shared_ptr<optim::Optimizer>& proto) {
  const optim::Options d = proto->defaults();
  auto flag = [&d](const char* key) { return d.at(key) != 0.0; };
  if (dynamic_cast<optim::Adam*>(proto.get())) {
    const optim::AdamOptions o{d.at("lr"),           d.at("beta1"),   d.at("beta2"),   d.at("eps"),
                               d.at("weight_decay"), flag("amsgrad"), flag("maximize")};
    if (dynamic_cast<optim::AdamW*>(proto.get()))
      return [o](std::vector<optim::ParamGroup> g) {
        return std::make_unique<optim::AdamW>(std::move(g), o);
      };
    return [o](std::vector<optim::ParamGroup> g) {
      return std::make_unique<optim::Adam>(std::move(g), o);
    };
  }
  TESSERA_CHECK(dynamic_cast<optim::SGD*>(proto.get()) != nullptr, TypeError,
                "[ZeroRedundancyOptimizer] expected optimizer_class SGD, Adam or AdamW, got ",
                proto->name());
  const optim::SGDOptions o{d.at("lr"),           d.at("momentum"), d.at("dampening"),
                            d.at("weight_decay"), flag("nesterov"), flag("maximize")};
  return [o](std::vector<optim::ParamGroup> g) {
    return std::make_unique<optim::SGD>(std::move(g), o);
  };
}

void bind_zero(py::module_& d) {
  py::class_<dist::ZeroOptimizer, optim::Optimizer, std::shared_ptr<dist::ZeroOptimizer>>(
      d, "ZeroRedundancyOptimizer",
      "ZeRO over a DistributedDataParallel's buckets: each rank keeps optimizer state for, and "
      "steps, its shard of the parameters, then the ranks all-gather them. Stage 2 (gradients "
      "reduce-scattered) when the DDP was made with reduce_scatter=True, else stage 1.")
      .def(py::init([](py::handle params, py::object optimizer_class, DDPModule& ddp,
                       const py::kwargs& defaults) {
             py::list materialised(py::reinterpret_borrow<py::iterable>(params));
             py::object proto = optimizer_class(materialised, **defaults);
             TESSERA_CHECK(py::isinstance<optim::Optimizer>(proto), TypeError,
                           "[ZeroRedundancyOptimizer] expected optimizer_class SGD, Adam or AdamW, "
                           "got one that makes a ",
                           std::string(py::str(py::type::handle_of(proto).attr("__name__"))));
             return std::make_shared<dist::ZeroOptimizer>(
                 ddp.ddp(), param_groups_of(materialised),
                 factory_like(proto.cast<std::shared_ptr<optim::Optimizer>>()));
           }),
           py::arg("params"), py::arg("optimizer_class"), py::kw_only(), py::arg("ddp"),
           py::keep_alive<1, 4>())
      .def_property_readonly("stage", &dist::ZeroOptimizer::stage)
      .def_property_readonly("shard_numel", &dist::ZeroOptimizer::shard_numel,
                             "Parameter elements this rank steps.");
}

}  // namespace

void init_distributed(py::module_& m) {
  py::module_ d = m.def_submodule("distributed", "Process groups, DDP and ZeRO (tessera.dist).");
  // Tried before the translator of module.cpp (pybind11 tries the newest first), so it wins
  // over the RuntimeError that DistributedError derives from.
  py::register_exception<DistributedError>(d, "DistributedError", PyExc_RuntimeError);
#if TESSERA_WITH_MPI
  d.def(
      "is_available", [] { return true; }, "Whether this build has an MPI process group.");
#else
  d.def(
      "is_available", [] { return false; }, "Whether this build has an MPI process group.");
#endif
  bind_process_group(d);
#if TESSERA_WITH_MPI
  bind_mpi(d);
#endif
  bind_ddp(d);
  bind_zero(d);
  init_model_parallel(d);
}

}  // namespace tessera::python
