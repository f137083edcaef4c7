// tessera._C.nn's containers with torch's Python protocol: Sequential and ModuleList (len,
// indexing with ints and slices, iteration, append, extend) and ModuleDict (a mapping of names
// to modules). Each element's Python object is kept alive by its container, so a Python-defined
// module inside one keeps its forward.
#include "bind.h"

namespace tessera::python {

namespace {

std::shared_ptr<nn::UnaryModule> as_unary(py::handle h, const char* container) {
  TESSERA_CHECK(py::isinstance<nn::Module>(h), TypeError, "[", container,
                "] expected a tessera.nn.Module, got ",
                std::string(py::str(py::type::handle_of(h).attr("__name__"))));
  auto m = std::dynamic_pointer_cast<nn::UnaryModule>(h.cast<std::shared_ptr<nn::Module>>());
  TESSERA_CHECK(m != nullptr, TypeError, "[", container,
                "] expected modules mapping one tensor to one tensor, got ",
                h.cast<nn::Module&>().type_name());
  return m;
}

std::shared_ptr<nn::Module> as_module(py::handle h, const char* container) {
  TESSERA_CHECK(py::isinstance<nn::Module>(h), TypeError, "[", container,
                "] expected a tessera.nn.Module, got ",
                std::string(py::str(py::type::handle_of(h).attr("__name__"))));
  return h.cast<std::shared_ptr<nn::Module>>();
}

// Element i of a container of n (negative counts from the end); IndexError outside.
size_t checked_index(int64_t i, size_t size, const char* container) {
  const int64_t n = static_cast<int64_t>(size);
  TESSERA_CHECK(i >= -n && i < n, IndexError, "[", container, "] expected an index in [", -n, ", ",
                n - 1, "], got ", i);
  return static_cast<size_t>(i < 0 ? i + n : i);
}

// Binds len, int/slice indexing (a slice makes a new container of the same class, sharing the
// modules, as torch), iteration, append and extend (through add(self, module)) for a container
// whose operator[] returns a module.
template <class C, class Cls, class Add>
void bind_sequence(Cls& cls, const char* name, Add add) {
  cls.def("append",
          [add](py::object self, py::object module) {
            add(self, module);
            return self;
          })
      .def("extend",
           [add](py::object self, py::iterable modules) {
             for (py::handle m : modules) add(self, m);
             return self;
           })
      .def("__len__", &C::size)
      .def("__getitem__",
           [name](const C& c, int64_t i) {
             return std::static_pointer_cast<nn::Module>(c[checked_index(i, c.size(), name)]);
           })
      .def("__getitem__",
           [](py::object self, const py::slice& s) {
             const C& c = self.cast<const C&>();
             size_t start = 0, stop = 0, step = 0, count = 0;
             if (!s.compute(c.size(), &start, &stop, &step, &count)) throw py::error_already_set();
             py::list items;
             for (size_t k = 0; k < count; ++k)
               items.append(std::static_pointer_cast<nn::Module>(c[start + k * step]));
             return std::is_same_v<C, nn::Sequential> ? py::type::of(self)(*items)
                                                      : py::type::of(self)(items);
           })
      .def("__iter__", [](const C& c) {
        py::list out;
        for (const auto& m : c) out.append(std::static_pointer_cast<nn::Module>(m));
        return py::iter(out);
      });
}

void bind_sequential(py::module_& nn_m) {
  using Seq = nn::Sequential;
  auto add = [](py::handle self, py::handle module) {
    self.cast<Seq&>().push_back(as_unary(module, "Sequential"));
    py::detail::keep_alive_impl(self, module);
  };
  py::class_<Seq, nn::Module, std::shared_ptr<Seq>> cls(nn_m, "Sequential", py::dynamic_attr(),
                                                        "Chains modules that take one tensor.");
  cls.def(py::init<>())
      .def("__init__",
           [add, cls](py::handle self, const py::args& modules) {
             cls.attr("__init__")(self);
             for (py::handle m : modules) add(self, m);
           })
      .def(
          "forward", [](Seq& s, const Tensor& x) { return s.forward(x); }, py::arg("input"));
  bind_sequence<Seq>(cls, "Sequential", add);
}

void bind_module_list(py::module_& nn_m) {
  using List = nn::ModuleList;
  auto add = [](py::handle self, py::handle module) {
    self.cast<List&>().push_back(as_module(module, "ModuleList"));
    py::detail::keep_alive_impl(self, module);
  };
  py::class_<List, nn::Module, std::shared_ptr<List>> cls(nn_m, "ModuleList", py::dynamic_attr(),
                                                          "Modules registered as '0', '1', ...");
  cls.def(py::init<>())
      .def(
          "__init__",
          [add, cls](py::handle self, py::object modules) {
            cls.attr("__init__")(self);
            if (!modules.is_none())
              for (py::handle m : py::reinterpret_borrow<py::iterable>(modules)) add(self, m);
          },
          py::arg("modules"));
  bind_sequence<List>(cls, "ModuleList", add);
}

void bind_module_dict(py::module_& nn_m) {
  using Dict = nn::ModuleDict;
  // Module.__setattr__ registers (or replaces) the child and keeps its Python object.
  auto set = [](py::handle self, py::handle key, py::handle module) {
    TESSERA_CHECK(py::isinstance<py::str>(key), TypeError, "[ModuleDict] expected a str key, got ",
                  std::string(py::str(py::type::handle_of(key).attr("__name__"))));
    as_module(module, "ModuleDict");
    self.attr("__setattr__")(key, module);
  };
  // torch's update(): a mapping, or an iterable of (key, module) pairs.
  auto update = [set](py::handle self, py::handle modules) {
    py::object pairs = py::isinstance<py::dict>(modules) || py::hasattr(modules, "items")
                           ? modules.attr("items")()
                           : py::reinterpret_borrow<py::object>(modules);
    for (py::handle kv : pairs) {
      py::tuple pair = py::reinterpret_borrow<py::object>(kv).cast<py::tuple>();
      TESSERA_CHECK(pair.size() == 2, ValueError,
                    "[ModuleDict] expected (key, module) pairs, got a sequence of length ",
                    pair.size());
      set(self, pair[0], pair[1]);
    }
  };
  auto get = [](const Dict& d, const std::string& key) -> std::shared_ptr<nn::Module> {
    if (!d.contains(key)) throw py::key_error(key);
    return d[key];
  };
  py::class_<Dict, nn::Module, std::shared_ptr<Dict>> cls(nn_m, "ModuleDict", py::dynamic_attr(),
                                                          "Named modules in insertion order.");
  cls.def(py::init<>())
      .def(
          "__init__",
          [update, cls](py::handle self, py::object modules) {
            cls.attr("__init__")(self);
            if (!modules.is_none()) update(self, modules);
          },
          py::arg("modules"))
      .def("__getitem__", get)
      .def("__setitem__", set)
      .def("__len__", &Dict::size)
      .def("__contains__", &Dict::contains)
      .def("__iter__", [](const Dict& d) { return py::iter(py::cast(d.keys())); })
      .def("keys", &Dict::keys)
      .def("values",
           [](const Dict& d) {
             py::list out;
             for (const auto& [_, m] : d) out.append(m);
             return out;
           })
      .def("items",
           [](const Dict& d) {
             py::list out;
             for (const auto& [k, m] : d) out.append(py::make_tuple(k, m));
             return out;
           })
      .def("update", update, py::arg("modules"));
}

}  // namespace

void init_nn_containers(py::module_& nn_m) {
  bind_sequential(nn_m);
  bind_module_list(nn_m);
  bind_module_dict(nn_m);
}

}  // namespace tessera::python
