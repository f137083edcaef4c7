// tessera._C.data: datasets (subclassable from Python via __len__/__getitem__), samplers and the
// prefetching DataLoader. The GIL is released while the loader waits for a batch.
#include "bind.h"

namespace tessera::python {

namespace {

class PyDataset : public data::Dataset {
 public:
  int64_t size() const override {
    PYBIND11_OVERRIDE_PURE_NAME(int64_t, data::Dataset, "__len__", size);
  }
  // __getitem__ may return a tensor, a number or a tuple of them.
  data::Example get(int64_t index) const override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const data::Dataset*>(this), "__getitem__");
    TESSERA_CHECK(f, NotImplementedError, "[Dataset] expected the subclass to define __getitem__");
    py::object item = f(index);
    if (!py::isinstance<py::tuple>(item) && !py::isinstance<py::list>(item))
      return {to_tensor(item)};
    data::Example out;
    for (py::handle field : item) out.push_back(to_tensor(field));
    return out;
  }
};

py::list batch_list(const data::Batch& b) {
  py::list out;
  for (const Tensor& t : b) out.append(t);
  return out;
}

void bind_samplers(py::module_& m) {
  using data::Sampler;
  py::class_<Sampler, std::shared_ptr<Sampler>>(m, "Sampler")
      .def("indices", &Sampler::indices)
      .def("__len__", &Sampler::size)
      .def("__iter__", [](const Sampler& s) { return py::iter(py::cast(s.indices())); })
      .def("set_epoch", &Sampler::set_epoch, py::arg("epoch"));
  py::class_<data::SequentialSampler, Sampler, std::shared_ptr<data::SequentialSampler>>(
      m, "SequentialSampler")
      .def(py::init<int64_t>(), py::arg("n"));
  py::class_<data::RandomSampler, Sampler, std::shared_ptr<data::RandomSampler>>(m, "RandomSampler")
      .def(py::init<int64_t, uint64_t>(), py::arg("n"), py::arg("seed") = 0);
  py::class_<data::DistributedSampler, Sampler, std::shared_ptr<data::DistributedSampler>>(
      m, "DistributedSampler")
      .def(py::init<int64_t, int64_t, int64_t, bool, uint64_t, bool>(), py::arg("n"),
           py::arg("rank"), py::arg("world"), py::arg("shuffle") = true, py::arg("seed") = 0,
           py::arg("drop_last") = false);
}

}  // namespace

void init_data(py::module_& m) {
  py::module_ d = m.def_submodule("data", "Datasets, samplers and the DataLoader.");
  py::class_<data::Dataset, PyDataset, std::shared_ptr<data::Dataset>>(
      d, "Dataset", "Subclass with __len__ and __getitem__ (returning tensors or tuples of them).")
      .def(py::init<>())
      .def("__len__", &data::Dataset::size)
      .def("__getitem__", [](const data::Dataset& ds, int64_t i) {
        data::check_index(i, ds.size(), "Dataset");
        return py::tuple(batch_list(ds.get(i)));
      });
  py::class_<data::TensorDataset, data::Dataset, std::shared_ptr<data::TensorDataset>>(
      d, "TensorDataset", "Example i is (t[i] for t in tensors).")
      .def(py::init([](const py::args& tensors) {
        std::vector<Tensor> ts;
        for (py::handle t : tensors) ts.push_back(to_tensor(t));
        return std::make_shared<data::TensorDataset>(std::move(ts));
      }));
  bind_samplers(d);

  py::class_<data::DataLoader>(d, "DataLoader",
                               "Batches of a dataset, prefetched in the background.")
      .def(py::init([](std::shared_ptr<data::Dataset> ds, int64_t batch_size, bool shuffle,
                       uint64_t seed, bool drop_last, int64_t prefetch,
                       std::shared_ptr<data::Sampler> sampler) {
             data::DataLoaderOptions o;
             o.batch_size = batch_size;
             o.shuffle = shuffle;
             o.seed = seed;
             o.drop_last = drop_last;
             // A Python dataset needs the GIL in get(): load on the calling thread, which then
             // holds no lock a prefetch thread could wait on.
             o.prefetch = dynamic_cast<PyDataset*>(ds.get()) ? 0 : prefetch;
             return std::make_unique<data::DataLoader>(std::move(ds), o, std::move(sampler));
           }),
           py::arg("dataset"), py::arg("batch_size") = 1, py::arg("shuffle") = false, py::kw_only(),
           py::arg("seed") = 0, py::arg("drop_last") = false, py::arg("prefetch") = 2,
           py::arg("sampler") = nullptr, py::keep_alive<1, 2>())
      .def("__len__", &data::DataLoader::num_batches)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](data::DataLoader& l) {
             std::optional<data::Batch> b;
             {
               py::gil_scoped_release release;
               b = l.next();
             }
             if (!b) throw py::stop_iteration();
             return batch_list(*b);
           })
      .def("set_epoch", &data::DataLoader::set_epoch, py::arg("epoch"))
      .def_property_readonly("epoch", [](const data::DataLoader& l) { return l.state().epoch; })
      .def_property_readonly("next_batch",
                             [](const data::DataLoader& l) { return l.state().batch; });
}

}  // namespace tessera::python
