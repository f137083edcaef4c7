// The tessera._C extension module: maps tessera's exceptions onto Python's, registers the types
// every binding file uses, then lets each file add its part (one file per C++ module).
#include "bind.h"
#include "tessera/ops/op_info.h"
#include "tessera/runtime/threads.h"

namespace tessera::python {

namespace {

// Each tessera exception becomes the Python exception of the same name, with the same message.
void translate_exceptions() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
}

py::list registry_entries() {
  py::list out;
  for (const OpInfo& op : op_registry()) {
    py::list dtypes;
    for (int d = 0; d < kNumDTypes; ++d)
      if (op.dtypes & dtype_bit(static_cast<DType>(d)))
        dtypes.append(dtype_object(static_cast<DType>(d)));
    out.append(py::make_tuple(std::string(op.name), std::string(op.family), py::tuple(dtypes),
                              op.differentiable));
  }
  return out;
}

}  // namespace

}  // namespace tessera::python

PYBIND11_MODULE(_C, m) {
  using namespace tessera::python;
  m.doc() = "Tessera's C++ core (tensors, ops, autograd, nn, optim, data).";
  translate_exceptions();
  init_types(m);
  init_tensor(m);
  init_indexing(m);
  init_interop(m);
  init_io(m);
  init_ops(m);
  init_ops_shape(m);
  init_ops_nn(m);
  init_ops_paged(m);
  init_autograd(m);
  init_nn(m);
  init_optim(m);
  init_data(m);
  init_runtime(m);
  init_cuda(m);
  init_memory(m);
  init_context(m);
  init_train(m);
  init_distributed(m);
  init_llm(m);

  // Submodules become importable (from tessera._C.nn import Linear).
  py::dict modules = py::module_::import("sys").attr("modules");
  for (const char* name :
       {"nn", "optim", "data", "autograd", "functional", "cuda", "memory", "context", "distributed",
        "io", "llm"})
    modules[py::str(std::string("tessera._C.") + name)] = m.attr(name);
  modules["tessera._C.nn.init"] = m.attr("nn").attr("init");

  m.def("ops_registry", &registry_entries,
        "Every public C++ op as (name, family, dtypes, differentiable), sorted by family.");
  m.def(
      "manual_seed", [](uint64_t seed) { tessera::manual_seed(seed); }, py::arg("seed"),
      "Seeds the default generator (dropout masks, rand, randn, random_sample).");
  m.def("initial_seed", [] { return tessera::default_generator().seed(); });
  m.def("set_num_threads", &tessera::set_num_threads, py::arg("n"),
        "The CPU threads the kernels use, from the calling thread on (torch.set_num_threads).");
  m.def("get_num_threads", &tessera::get_num_threads);
}
