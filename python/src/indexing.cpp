// Python indexing, t[key] and t[key] = value, with numpy/torch semantics: ints, slices, None,
// Ellipsis, bool masks and integer index tensors (advanced indexing). Basic items become views
// (select/slice/unsqueeze); advanced indices are folded into one linear index over the indexed
// dims, so the gather is a single index_select (and the assignment a single scatter), both
// differentiable.
#include <pybind11/numpy.h>

#include "bind.h"

namespace tessera::python {

namespace {

// An advanced index: an int64 tensor indexing `dim` of the view (`source_dim` of the tensor).
struct AdvancedIndex {
  int64_t dim;
  Tensor index;
  int64_t source_dim;
};

// The index `key` after the basic items: a view of the tensor and the advanced indices.
struct Indexed {
  Tensor view;
  std::vector<AdvancedIndex> advanced;
};

// Coordinates of the true elements of a mask, one int64 tensor per mask dim (numpy's nonzero).
TensorList nonzero(const Tensor& mask) {
  Tensor m = ne(mask, wrap_scalar(0)).to(kCPU).contiguous();
  const bool* p = m.data_ptr<bool>();
  std::vector<std::vector<int64_t>> coords(m.dim());
  for (int64_t i = 0; i < m.numel(); ++i) {
    if (!p[i]) continue;
    int64_t rest = i;
    for (int64_t d = m.dim() - 1; d >= 0; --d) {
      coords[d].push_back(rest % m.size(d));
      rest /= m.size(d);
    }
  }
  TensorList out;
  for (auto& c : coords) {
    const int64_t n = static_cast<int64_t>(c.size());
    out.push_back(tensor(c, Shape{n}).to(mask.device()));
  }
  return out;
}

bool is_index_tensor_like(py::handle h) {
  if (py::isinstance<Tensor>(h) || py::isinstance<py::list>(h) || py::isinstance<py::array>(h))
    return true;
  // A numpy integer scalar has __array_interface__ too, but indexes as an int (a view), as in
  // torch.
  return !PyIndex_Check(h.ptr()) && py::hasattr(h, "__array_interface__");
}

Tensor as_index_tensor(py::handle h) {
  Tensor t = py::isinstance<Tensor>(h) ? h.cast<Tensor>() : to_tensor(h);
  TESSERA_CHECK(is_integral(t.dtype(), true), IndexError,
                "[index] expected index tensors of integer or bool dtype, got ", t.dtype());
  return t.detach();
}

Indexed apply_basic(const Tensor& t, py::handle key) {
  std::vector<py::handle> items;
  if (py::isinstance<py::tuple>(key)) {
    for (py::handle h : py::reinterpret_borrow<py::tuple>(key)) items.push_back(h);
  } else {
    items.push_back(key);
  }
  // Dims the items consume, so Ellipsis knows how many it stands for.
  int64_t consumed = 0, ellipses = 0;
  std::vector<Tensor> tensors(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle h = items[i];
    if (h.is_none() || PyBool_Check(h.ptr())) continue;
    if (h.ptr() == Py_Ellipsis) {
      ++ellipses;
    } else if (is_index_tensor_like(h)) {
      tensors[i] = as_index_tensor(h);
      const bool mask = tensors[i].dtype() == kBool || tensors[i].dtype() == kUInt8;
      consumed += mask ? tensors[i].dim() : 1;
    } else {
      ++consumed;
    }
  }
  TESSERA_CHECK(ellipses <= 1, IndexError, "[index] expected at most one Ellipsis, got ", ellipses);
  TESSERA_CHECK(consumed <= t.dim(), IndexError, "[index] expected at most ", t.dim(),
                " indices for a tensor of dimension ", t.dim(), ", got ", consumed);

  Indexed out{t, {}};
  Tensor& v = out.view;
  int64_t dim = 0, source_dim = 0;  // dim of the view, and of t, that the next item indexes
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle h = items[i];
    if (h.is_none()) {
      v = unsqueeze(v, dim++);
    } else if (PyBool_Check(h.ptr())) {
      // numpy: True adds a unit dim, False an empty one.
      v = unsqueeze(v, dim);
      if (h.ptr() == Py_False) v = slice(v, dim, 0, 0);
      ++dim;
    } else if (h.ptr() == Py_Ellipsis) {
      dim += t.dim() - consumed;
      source_dim += t.dim() - consumed;
    } else if (PySlice_Check(h.ptr())) {
      ++source_dim;
      auto bound = [&](const char* name) -> std::optional<int64_t> {
        py::object b = h.attr(name);
        if (b.is_none()) return std::nullopt;
        return b.cast<int64_t>();
      };
      v = slice(v, dim++, bound("start"), bound("stop"), bound("step").value_or(1));
    } else if (tensors[i].defined()) {
      const Tensor& idx = tensors[i];
      if (idx.dtype() == kBool || idx.dtype() == kUInt8) {
        const int64_t k = std::max<int64_t>(idx.dim(), 1);
        if (idx.dim() > 0) {  // (a 0-d mask covers no dim: there may be none left, x[True])
          Shape covered(v.sizes().begin() + dim, v.sizes().begin() + dim + k);
          TESSERA_CHECK(idx.sizes() == covered, IndexError, "[index] expected a mask of shape ",
                        covered, " at dim ", dim, ", got ", idx.sizes());
        }
        TensorList coords = nonzero(idx.dim() == 0 ? idx.unsqueeze(0) : idx);
        if (idx.dim() == 0) v = unsqueeze(v, dim);  // a 0-d mask acts on a new unit dim
        for (int64_t j = 0; j < k; ++j)
          out.advanced.push_back({dim + j, coords[j], source_dim + (idx.dim() > 0 ? j : 0)});
        dim += k;
        source_dim += idx.dim();
      } else {
        out.advanced.push_back({dim++, idx.to(kInt64), source_dim++});
      }
    } else {
      const std::string got = py::str(py::type::handle_of(h).attr("__name__"));
      // torch: a float index is an IndexError, anything else not index-like a TypeError.
      TESSERA_CHECK(!PyFloat_Check(h.ptr()), IndexError,
                    "[index] expected int, slice, None, Ellipsis or a tensor, got ", got);
      TESSERA_CHECK(PyIndex_Check(h.ptr()), TypeError,
                    "[index] expected int, slice, None, Ellipsis or a tensor, got ", got);
      const int64_t n = v.size(dim), i_val = h.cast<int64_t>();
      TESSERA_CHECK(i_val >= -n && i_val < n, IndexError, "[index] index ", i_val,
                    " is out of bounds for dimension ", source_dim, " with size ", n);
      v = select(v, dim, i_val);
      ++source_dim;
    }
  }
  return out;
}

// The advanced part of an index: how to gather from (or scatter into) the view.
struct Advanced {
  Shape perm;             // indexed dims first, then the others in order
  Shape lead_shape;       // broadcast shape of the index tensors
  Shape rest_shape;       // sizes of the other dims
  Tensor linear;          // [N] int64: row of the flattened indexed dims for each index position
  int64_t lead = 0;       // product of the indexed dims' sizes
  int64_t insert_at = 0;  // where the lead dims land in the result (numpy's adjacency rule)
};

Advanced plan(const Tensor& v, const std::vector<AdvancedIndex>& advanced) {
  Advanced a;
  bool adjacent = true;
  for (size_t i = 0; i < advanced.size(); ++i) {
    a.lead_shape = broadcast_shapes(a.lead_shape, advanced[i].index.sizes(), "index");
    if (i > 0 && advanced[i].dim != advanced[i - 1].dim + 1) adjacent = false;
  }
  Tensor linear = zeros({}, TensorOptions(kInt64).with_device(v.device()));
  a.lead = 1;
  for (const AdvancedIndex& ix : advanced) {
    const int64_t n = v.size(ix.dim);
    a.perm.push_back(ix.dim);
    if (ix.index.numel() > 0) {
      const int64_t lo = amin(ix.index).item<int64_t>(), hi = amax(ix.index).item<int64_t>();
      TESSERA_CHECK(lo >= -n && hi < n, IndexError, "[index] index ", lo < -n ? lo : hi,
                    " is out of bounds for dimension ", ix.source_dim, " with size ", n);
    }
    // Row-major position within the indexed dims: linear = linear * n + index (wrapped).
    Tensor wrapped = where(lt(ix.index, wrap_scalar(0)), add(ix.index, wrap_scalar(n)), ix.index);
    linear = add(mul(linear, wrap_scalar(n)), wrapped);
    a.lead *= n;
  }
  for (int64_t d = 0; d < v.dim(); ++d) {
    if (std::find(a.perm.begin(), a.perm.end(), d) != a.perm.end()) continue;
    a.perm.push_back(d);
    a.rest_shape.push_back(v.size(d));
  }
  a.linear = reshape(expand(linear, a.lead_shape), {-1}).contiguous();
  a.insert_at = adjacent ? advanced.front().dim : 0;
  return a;
}

// Dims of [lead..., rest...] reordered so the lead dims sit at insert_at, and the inverse.
Shape result_order(const Advanced& a, bool inverse) {
  const int64_t nl = static_cast<int64_t>(a.lead_shape.size());
  const int64_t nr = static_cast<int64_t>(a.rest_shape.size());
  Shape order;
  for (int64_t i = 0; i < a.insert_at; ++i) order.push_back(nl + i);
  for (int64_t i = 0; i < nl; ++i) order.push_back(i);
  for (int64_t i = a.insert_at; i < nr; ++i) order.push_back(nl + i);
  if (!inverse) return order;
  Shape inv(order.size());
  for (size_t i = 0; i < order.size(); ++i) inv[order[i]] = static_cast<int64_t>(i);
  return inv;
}

Shape concat(Shape a, const Shape& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Tensor getitem(const Tensor& t, py::handle key) {
  Indexed ix = apply_basic(t, key);
  if (ix.advanced.empty()) return ix.view;
  Advanced a = plan(ix.view, ix.advanced);
  Tensor rows = reshape(permute(ix.view, a.perm), concat({a.lead}, a.rest_shape));
  Tensor out = reshape(index_select(rows, 0, a.linear), concat(a.lead_shape, a.rest_shape));
  return a.insert_at == 0 ? out : permute(out, result_order(a, false));
}

// t[key] = value writing through views: fill/copy a basic view, or scatter the advanced rows
// and copy them back into the view. Autograd follows the writes into t's history (CopySlices).
void assign_in_place(const Tensor& t, py::handle key, const std::optional<Scalar>& scalar,
                     const Tensor& src) {
  Indexed ix = apply_basic(t, key);
  if (ix.advanced.empty()) {
    if (scalar)
      fill_(ix.view, *scalar);
    else
      copy_(ix.view, src);
    return;
  }
  Advanced a = plan(ix.view, ix.advanced);
  Tensor target = permute(ix.view, a.perm);
  Tensor rows = reshape(target, concat({a.lead}, a.rest_shape));
  const int64_t n = a.linear.numel();
  Shape index_shape = concat({n}, a.rest_shape), unit(a.rest_shape.size(), 1);
  Tensor index = expand(reshape(a.linear, concat({n}, unit)), index_shape).contiguous();
  Tensor updated;
  if (scalar) {
    updated = scatter(rows, 0, index, *scalar);
  } else {
    // value broadcasts to the getitem result, whose dims are reordered back to [lead, rest].
    Shape result = concat(a.lead_shape, a.rest_shape);
    if (a.insert_at != 0) {
      Shape ordered;
      for (int64_t d : result_order(a, false)) ordered.push_back(result[d]);
      result = ordered;
    }
    Tensor values = expand(cast(src, t.dtype()), result);
    if (a.insert_at != 0) values = permute(values, result_order(a, true));
    updated = scatter(rows, 0, index, reshape(values, index_shape));
  }
  copy_(target, reshape(updated, target.sizes()));
}

void setitem(Tensor& t, py::handle key, py::handle value) {
  std::optional<Scalar> scalar;
  Tensor src;
  pybind11::detail::make_caster<Scalar> sc;
  if (!py::isinstance<Tensor>(value) && sc.load(value, true))
    scalar = pybind11::detail::cast_op<Scalar&>(sc);
  else
    src = to_tensor(value);
  assign_in_place(t, key, scalar, src);
}

}  // namespace

void init_indexing(py::module_& m) {
  tensor_class(m)
      .def("__getitem__", &getitem, py::arg("key"))
      .def(
          "__setitem__",
          [](Tensor& t, py::handle key, py::handle value) { setitem(t, key, value); },
          py::arg("key"), py::arg("value"));
}

}  // namespace tessera::python
