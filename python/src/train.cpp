// tessera._C.train: the library Trainer with a Python loss function. The model, optimizer,
// scheduler and loader are the C++ objects behind the Python ones; keep_alive ties them to it.
#include "bind.h"
#include "tessera/train/trainer.h"

namespace tessera::python {

namespace {

py::dict result_dict(const train::StepResult& r) {
  py::dict d;
  d["loss"] = r.loss;
  d["grad_norm"] = r.grad_norm;
  d["lr"] = r.lr;
  d["skipped"] = r.skipped;
  return d;
}

}  // namespace

void init_train(py::module_& m) {
  py::module_ t = m.def_submodule("train", "The training step and loop state (train::Trainer).");
  py::class_<train::Trainer>(t, "Trainer",
                             "Trainer(model, loss_fn, optimizer, scheduler=None, loader=None, "
                             "grad_accum=1, grad_clip=1.0, autocast_dtype=None)")
      .def(py::init([](std::shared_ptr<nn::Module> model, py::function loss_fn,
                       optim::Optimizer& optimizer, optim::LRScheduler* scheduler,
                       data::DataLoader* loader, int64_t grad_accum, double grad_clip,
                       py::object autocast_dtype) {
             train::TrainerOptions options;
             options.grad_accum = grad_accum;
             options.grad_clip = grad_clip;
             if (!autocast_dtype.is_none()) options.autocast_dtype = to_dtype(autocast_dtype);
             train::LossFn loss = [loss_fn](const data::Batch& batch) {
               py::gil_scoped_acquire gil;
               return loss_fn(*py::cast(batch)).cast<Tensor>();
             };
             return std::make_unique<train::Trainer>(*model, std::move(loss), optimizer, scheduler,
                                                     loader, options);
           }),
           py::arg("model"), py::arg("loss_fn"), py::arg("optimizer"),
           py::arg("scheduler") = nullptr, py::arg("loader") = nullptr, py::arg("grad_accum") = 1,
           py::arg("grad_clip") = 1.0, py::arg("autocast_dtype") = py::none(),
           py::keep_alive<1, 2>(), py::keep_alive<1, 4>(), py::keep_alive<1, 5>(),
           py::keep_alive<1, 6>())
      .def(
          "step",
          [](train::Trainer& trainer, py::object next_batch) {
            if (next_batch.is_none()) return result_dict(trainer.step());
            return result_dict(trainer.step([&next_batch] {
              py::gil_scoped_acquire gil;
              return next_batch().cast<data::Batch>();
            }));
          },
          py::arg("next_batch") = py::none(),
          "One optimizer step over grad_accum micro-batches (from next_batch() or the loader); "
          "returns {loss, grad_norm, lr, skipped}.")
      .def("evaluate", &train::Trainer::evaluate, py::arg("loader"), py::arg("max_batches") = -1)
      .def_property_readonly("step_count", &train::Trainer::step_count);
}

}  // namespace tessera::python
