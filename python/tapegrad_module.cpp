// The Python bindings (pybind11): tapegrad._C, re-exported by the package
// tapegrad (python/tapegrad/__init__.py). Tensors exchange memory with NumPy,
// PyTorch and JAX through DLPack (__dlpack__ / __dlpack_device__ /
// from_dlpack); functions passed to the functional API are Python callables;
// tg::Error surfaces as tapegrad.Error (a RuntimeError) with the C++ message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlpack/dlpack.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace py = pybind11;
using tg::Tensor;
namespace ag = tg::autograd;

namespace {

tg::ScalarType dtype_from(const std::string& s) {
  if (s == "float32" || s == "float") return tg::kFloat32;
  if (s == "float64" || s == "double") return tg::kFloat64;
  if (s == "bfloat16") return tg::kBFloat16;
  if (s == "float16" || s == "half") return tg::kFloat16;
  if (s == "int64" || s == "long") return tg::kInt64;
  if (s == "bool") return tg::kBool;
  throw tg::Error("tapegrad: unknown dtype '" + s + "' (float32, float64, bfloat16, float16, int64, bool)");
}

std::string dtype_name(tg::ScalarType t) {
  switch (t) {
    case tg::kFloat32: return "float32";
    case tg::kFloat64: return "float64";
    case tg::kBFloat16: return "bfloat16";
    case tg::kFloat16: return "float16";
    case tg::kInt64: return "int64";
    case tg::kBool: return "bool";
  }
  return "?";
}

tg::Device device_from(const std::string& s) {
  if (s == "cpu") return tg::Device(tg::kCPU);
  if (s == "cuda") return tg::Device(tg::kCUDA, 0);
  if (s.rfind("cuda:", 0) == 0) return tg::Device(tg::kCUDA, std::stoi(s.substr(5)));
  throw tg::Error("tapegrad: unknown device '" + s + "' (cpu, cuda, cuda:N)");
}

std::string device_name(tg::Device d) { return d.is_cuda() ? "cuda:" + std::to_string(d.index()) : "cpu"; }

tg::IntList int_list(const py::object& o) {
  if (py::isinstance<py::int_>(o)) return tg::IntList{o.cast<int64_t>()};
  return tg::IntList(o.cast<std::vector<int64_t>>());
}

// `shape` may be given as *sizes or as one sequence.
tg::IntList sizes_of(const py::args& args) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return int_list(args[0]);
  tg::IntList s;
  for (const auto& a : args)
    s.push_back(a.cast<int64_t>());
  return s;
}

tg::TensorOptions options(const std::string& dtype, const std::string& device) {
  return tg::TensorOptions().dtype(dtype_from(dtype)).device(device_from(device));
}

// The exported capsule's destructor: a capsule nobody consumed ("dltensor"
// still) releases its tensor.
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  } else {
    PyErr_Clear();
  }
}

py::capsule to_capsule(DLManagedTensor* m) {
  PyObject* c = PyCapsule_New(m, "dltensor", &capsule_destructor);
  if (!c) {
    m->deleter(m);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(c);
}

Tensor from_capsule(const py::capsule& cap) {
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor"))
    throw tg::Error("from_dlpack: the capsule is not an unconsumed 'dltensor' (was it used already?)");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  PyCapsule_SetName(cap.ptr(), "used_dltensor");  // tapegrad owns it now
  return tg::from_dlpack(m);
}

// The stream argument of __dlpack__ for a consumer whose current stream on
// `device` is ours: the protocol's 1 for the legacy default stream.
py::object consumer_stream(int device) {
  void* h = tg::cuda::current_stream(device).handle();
  return h ? py::int_(reinterpret_cast<uintptr_t>(h)) : py::int_(1);
}

Tensor from_dlpack(const py::object& obj) {
  if (py::isinstance<py::capsule>(obj)) return from_capsule(obj.cast<py::capsule>());
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (!py::hasattr(obj, "__dlpack__"))
    throw tg::Error(
        "from_dlpack: the object has no __dlpack__ (give a DLPack capsule, or an array of NumPy, "
        "PyTorch, JAX, CuPy ...)");
  py::tuple dev = obj.attr("__dlpack_device__")();
  const int type = dev[0].cast<int>(), index = dev[1].cast<int>();
  py::object cap;
  if (type == kDLCUDA || type == kDLCUDAManaged)
    cap = obj.attr("__dlpack__")(py::arg("stream") = consumer_stream(index));  // the producer makes it wait
  else cap = obj.attr("__dlpack__")();
  return from_capsule(cap.cast<py::capsule>());
}

// __dlpack__(stream=None): the protocol's stream values for CUDA are None
// or 1 (the legacy default stream), 2 (per-thread default), -1 (no
// synchronization) or a cudaStream_t as an integer.
py::capsule dlpack(const Tensor& t, const py::object& stream) {
  if (t.requires_grad()) throw tg::Error("__dlpack__: can't export a tensor that requires grad; use tensor.detach()");
  std::optional<tg::cuda::Stream> consumer;
  if (t.is_cuda()) {
    const int64_t s = stream.is_none() ? 1 : stream.cast<int64_t>();
    if (s != -1)
      consumer = tg::cuda::Stream(t.device().index(), s == 1 ? nullptr : reinterpret_cast<void*>(uintptr_t(s)));
  }
  return to_capsule(tg::to_dlpack(t, consumer));
}

// A CPU tensor as a NumPy array sharing its memory (it keeps the tensor alive).
py::array to_numpy(const Tensor& t) {
  if (!t.defined()) throw tg::Error("numpy: undefined tensor");
  if (t.is_cuda()) throw tg::Error("numpy: the tensor is on " + device_name(t.device()) + "; call .cpu() first");
  if (t.requires_grad()) throw tg::Error("numpy: the tensor requires grad; use tensor.detach().numpy()");
  py::dtype dt;
  switch (t.dtype()) {
    case tg::kFloat32: dt = py::dtype::of<float>(); break;
    case tg::kFloat64: dt = py::dtype::of<double>(); break;
    case tg::kFloat16: dt = py::dtype("float16"); break;
    case tg::kInt64: dt = py::dtype::of<int64_t>(); break;
    case tg::kBool: dt = py::dtype::of<bool>(); break;
    default: throw tg::Error("numpy: NumPy has no " + dtype_name(t.dtype()) + "; convert with .to('float32')");
  }
  const int64_t es = int64_t(tg::element_size(t.dtype()));
  std::vector<py::ssize_t> shape(t.sizes().begin(), t.sizes().end()), strides;
  for (int64_t s : t.strides())
    strides.push_back(py::ssize_t(s * es));
  auto* keep = new Tensor(t);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dt, shape, strides, t.data_ptr(), owner);
}

// tapegrad.tensor(data): a copy of array-like data; Python floats become
// float32 and ints int64 (as torch.tensor), NumPy arrays keep their dtype.
Tensor make_tensor(const py::object& data, const std::optional<std::string>& dtype, const std::string& device,
                   bool requires_grad) {
  py::module_ np = py::module_::import("numpy");
  const bool is_array = py::isinstance(data, np.attr("ndarray"));
  py::object arr = np.attr("ascontiguousarray")(data);
  if (!is_array && arr.attr("dtype").attr("kind").cast<std::string>() == "f") arr = arr.attr("astype")("float32");
  const std::string kind = arr.attr("dtype").attr("kind").cast<std::string>();
  if (kind == "i" || kind == "u" || kind == "b") arr = arr.attr("astype")("int64");  // NumPy < 1.25: no bool in DLPack
  Tensor t = from_dlpack(arr).clone();
  if (kind == "b") t = t.to(tg::kBool);
  if (dtype) t = t.to(dtype_from(*dtype));
  t = t.to(device_from(device));
  if (requires_grad) t.requires_grad_(true);
  return t;
}

std::vector<Tensor> tensor_list(const py::object& o) {
  if (py::isinstance<Tensor>(o)) return {o.cast<Tensor>()};
  std::vector<Tensor> v;
  for (const auto& x : o)
    v.push_back(x.is_none() ? Tensor() : x.cast<Tensor>());
  return v;
}

py::object or_none(const Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

// A scalar or tensor right-hand side.
template <class F, class G> py::object binary(const Tensor& a, const py::object& b, F tensor_op, G scalar_op) {
  if (py::isinstance<Tensor>(b)) return py::cast(tensor_op(a, b.cast<Tensor>()));
  if (py::isinstance(b, py::module_::import("numpy").attr("ndarray")))  // as PyTorch: a tensor on a's device
    return py::cast(tensor_op(a, make_tensor(b, std::nullopt, device_name(a.device()), false)));
  if (py::isinstance<py::float_>(b) || py::isinstance<py::int_>(b) || py::isinstance<py::bool_>(b))
    return py::cast(scalar_op(a, b.cast<double>()));
  return py::reinterpret_borrow<py::object>(Py_NotImplemented);
}

// t[key] as NumPy and PyTorch index: integers (negative from the end; past
// the end: IndexError, so iteration stops), slices (views, steps > 0), None
// (a new dim), Ellipsis, and tuples of them. Every result is a view.
// An integer index: Python's int, NumPy's integers, anything with __index__.
bool is_integer_key(const py::object& k) { return PyIndex_Check(k.ptr()) != 0; }

Tensor index_tensor(const Tensor& t, const py::object& key) {
  std::vector<py::object> items;
  if (py::isinstance<py::tuple>(key)) {
    for (const py::handle& h : key.cast<py::tuple>())
      items.push_back(py::reinterpret_borrow<py::object>(h));
  } else {
    items.push_back(key);
  }
  int64_t consumed = 0, ellipses = 0;
  for (const py::object& k : items) {
    if (k.is_none()) continue;
    if (py::isinstance<py::ellipsis>(k)) {
      ++ellipses;
      continue;
    }
    if (!is_integer_key(k) && !py::isinstance<py::slice>(k))
      throw py::type_error("tapegrad indexing takes integers, slices, None and ... (got " +
                           py::str(py::type::of(k)).cast<std::string>() + "); index tensors: index_select");
    ++consumed;
  }
  if (ellipses > 1) throw py::index_error("an index can only have a single ellipsis ('...')");
  if (consumed > t.dim())
    throw py::index_error("too many indices for a tensor of dimension " + std::to_string(t.dim()));
  Tensor r = t;
  int64_t d = 0;  // the dim of r the next item applies to
  for (const py::object& k : items) {
    if (k.is_none()) {
      r = r.unsqueeze(d++);
    } else if (py::isinstance<py::ellipsis>(k)) {
      d += t.dim() - consumed;
    } else if (is_integer_key(k)) {
      const int64_t size = r.size(d);
      const int64_t i = py::int_(k).cast<int64_t>();
      if (i < -size || i >= size)
        throw py::index_error("index " + std::to_string(i) + " is out of bounds for dimension " + std::to_string(d) +
                              " with size " + std::to_string(size));
      r = r.select(d, i < 0 ? i + size : i);
    } else {
      py::ssize_t start = 0, stop = 0, step = 0, length = 0;
      if (!k.cast<py::slice>().compute(py::ssize_t(r.size(d)), &start, &stop, &step, &length))
        throw py::error_already_set();
      if (step <= 0) throw py::value_error("tapegrad slices take a positive step");
      r = length == 0
              ? r.narrow(d, std::min<int64_t>(start, r.size(d)), 0)
              : r.slice(d, int64_t(start), int64_t(start) + int64_t(step) * (int64_t(length) - 1) + 1, int64_t(step));
      ++d;
    }
  }
  return r;
}

// The NumPy array interface of a CPU tensor (zero copy; NumPy keeps the
// tensor's Python object alive as the array's base).
py::dict array_interface(const Tensor& t) {
  if (!t.defined() || t.is_cuda() || t.requires_grad())
    throw py::attribute_error("__array_interface__: only CPU tensors that do not require grad");
  std::string typestr;
  switch (t.dtype()) {
    case tg::kFloat32: typestr = "<f4"; break;
    case tg::kFloat64: typestr = "<f8"; break;
    case tg::kFloat16: typestr = "<f2"; break;
    case tg::kInt64: typestr = "<i8"; break;
    case tg::kBool: typestr = "|b1"; break;
    default: throw py::attribute_error("__array_interface__: NumPy has no " + dtype_name(t.dtype()));
  }
  const int64_t es = int64_t(tg::element_size(t.dtype()));
  py::list strides;
  for (int64_t st : t.strides())
    strides.append(st * es);
  py::dict d;
  d["version"] = 3;
  d["shape"] = py::tuple(py::cast(std::vector<int64_t>(t.sizes())));
  d["typestr"] = typestr;
  d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(t.data_ptr()), false);
  d["strides"] = py::tuple(strides);
  return d;
}

ag::HessianStrategy strategy_from(const std::string& s) {
  if (s == "batched_cotangents") return ag::HessianStrategy::BatchedCotangents;
  if (s == "rows") return ag::HessianStrategy::Rows;
  if (s == "forward_over_reverse") return ag::HessianStrategy::ForwardOverReverse;
  if (s == "taylor") return ag::HessianStrategy::Taylor;
  throw tg::Error("per_sample_hessian: unknown strategy '" + s +
                  "' (batched_cotangents, rows, forward_over_reverse, taylor)");
}

ag::JacobianMode mode_from(const std::string& s) {
  if (s == "reverse") return ag::JacobianMode::Reverse;
  if (s == "forward") return ag::JacobianMode::Forward;
  throw tg::Error("unknown mode '" + s + "' (reverse, forward)");
}

// A Python exception raised by a callable the engine calls (fn of the
// functional API): carried through the engine's C++ frames as this type of
// the module's own, then raised again unchanged where the binding returns
// (no pybind11 exception object unwinds through libtapegrad).
struct CallbackError {
  std::shared_ptr<py::error_already_set> error;
};

// fn as a TensorFn (called with the GIL held: the functional API calls fn
// on the calling thread).
ag::TensorFn tensor_fn(const py::function& fn) {
  return [fn](const Tensor& x) -> Tensor {
    try {
      py::object y = fn(x);
      if (!py::isinstance<Tensor>(y))
        throw tg::Error("the function returned " + py::str(py::type::of(y)).cast<std::string>() +
                        ", not a tapegrad.Tensor");
      return y.cast<Tensor>();
    } catch (py::error_already_set& e) {
      throw CallbackError{std::make_shared<py::error_already_set>(std::move(e))};
    }
  };
}

// Runs body (a call that may call Python callables), raising a callable's
// exception again as it was.
template <class F> auto calling_python(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (CallbackError& e) {
    e.error->restore();
    throw py::error_already_set();
  }
}

// A grad-mode scope for `with tapegrad.no_grad():`.
struct GradMode {
  bool enabled;
  bool previous = true;
};

// `with tapegrad.cuda.graph(g):` — capture into g on a side stream.
struct GraphCapture {
  tg::cuda::CUDAGraph* graph;
  std::unique_ptr<tg::cuda::Graph> scope;
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "tapegrad: higher-order autograd on CPU and CUDA (C++ engine)";
  py::register_exception<tg::Error>(m, "Error", PyExc_RuntimeError);

  py::class_<Tensor>(m, "Tensor")
      .def_property_readonly("shape",
                             [](const Tensor& t) { return py::tuple(py::cast(std::vector<int64_t>(t.sizes()))); })
      .def("size", [](const Tensor& t, int64_t d) { return t.size(d); })
      .def_property_readonly("ndim", [](const Tensor& t) { return t.dim(); })
      .def("dim", [](const Tensor& t) { return t.dim(); })
      .def("numel", [](const Tensor& t) { return t.numel(); })
      .def("stride", [](const Tensor& t) { return std::vector<int64_t>(t.strides()); })
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_name(t.dtype()); })
      .def_property_readonly("device", [](const Tensor& t) { return device_name(t.device()); })
      .def_property_readonly("is_cuda", [](const Tensor& t) { return t.is_cuda(); })
      .def_property_readonly("is_leaf", [](const Tensor& t) { return t.is_leaf(); })
      .def_property(
          "requires_grad", [](const Tensor& t) { return t.requires_grad(); },
          [](Tensor& t, bool r) { t.requires_grad_(r); })
      .def_property_readonly("grad", [](const Tensor& t) { return or_none(t.grad()); })
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); })
      .def(
          "requires_grad_",
          [](Tensor& t, bool r) {
            t.requires_grad_(r);
            return t;
          },
          py::arg("requires_grad") = true)
      .def("detach", &Tensor::detach)
      .def("clone", [](const Tensor& t) { return t.clone(); })
      .def("contiguous", [](const Tensor& t) { return t.contiguous(); })
      .def("item", [](const Tensor& t) { return t.detach().to(tg::kFloat64).item<double>(); })
      .def("tolist",
           [](const Tensor& t) {
             return to_numpy(t.detach().to(tg::Device(tg::kCPU)).to(tg::kFloat64).contiguous()).attr("tolist")();
           })
      .def("numpy", &to_numpy)
      .def("cpu", [](const Tensor& t) { return t.to(tg::Device(tg::kCPU)); })
      .def(
          "cuda", [](const Tensor& t, int index) { return t.to(tg::Device(tg::kCUDA, index)); }, py::arg("device") = 0)
      .def("to",
           [](const Tensor& t, const std::string& what) {
             if (what == "cpu" || what.rfind("cuda", 0) == 0) return t.to(device_from(what));
             return t.to(dtype_from(what));
           })
      .def(
          "backward",
          [](const Tensor& t, const std::optional<Tensor>& gradient, std::optional<bool> retain_graph,
             bool create_graph) {
            std::vector<Tensor> g;
            if (gradient) g.push_back(*gradient);
            ag::backward({t}, g, retain_graph, create_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = py::none(), py::arg("create_graph") = false)
      .def(
          "sum",
          [](const Tensor& t, const py::object& dim, bool keepdim) {
            return dim.is_none() ? tg::sum(t) : tg::sum(t, int_list(dim), keepdim);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(
          "mean",
          [](const Tensor& t, const py::object& dim, bool keepdim) {
            return dim.is_none() ? tg::mean(t) : tg::mean(t, int_list(dim), keepdim);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("reshape", [](const Tensor& t, const py::args& s) { return t.reshape(sizes_of(s)); })
      .def("view", [](const Tensor& t, const py::args& s) { return t.view(sizes_of(s)); })
      .def("transpose", [](const Tensor& t, int64_t a, int64_t b) { return t.transpose(a, b); })
      .def_property_readonly("T", [](const Tensor& t) { return t.t(); })
      .def("select", [](const Tensor& t, int64_t d, int64_t i) { return t.select(d, i); })
      .def("narrow", [](const Tensor& t, int64_t d, int64_t s, int64_t n) { return t.narrow(d, s, n); })
      .def("__getitem__", &index_tensor)
      .def_property_readonly("__array_interface__", &array_interface)
      .def(
          "__array__",
          [](const Tensor& t, const py::object& dtype, const py::object& /*copy*/) {
            py::object a = to_numpy(t);
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def_property_readonly_static("__array_priority__", [](const py::object&) { return 1000; })
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw tg::Error("len() of a 0-d tensor");
             return t.size(0);
           })
      .def("__add__",
           [](const Tensor& a, const py::object& b) {
             return binary(
                 a, b, [](const Tensor& x, const Tensor& y) { return x + y; },
                 [](const Tensor& x, double s) { return x + s; });
           })
      .def("__radd__",
           [](const Tensor& a, const py::object& b) {
             return binary(
                 a, b, [](const Tensor& x, const Tensor& y) { return y + x; },
                 [](const Tensor& x, double s) { return s + x; });
           })
      .def("__sub__",
           [](const Tensor& a, const py::object& b) {
             return binary(
                 a, b, [](const Tensor& x, const Tensor& y) { return x - y; },
                 [](const Tensor& x, double s) { return x - s; });
           })
      .def("__rsub__",
           [](const Tensor& a, const py::object& b) {
             return binary(
                 a, b, [](const Tensor& x, const Tensor& y) { return y - x; },
                 [](const Tensor& x, double s) { return s - x; });
           })
      .def("__mul__",
           [](const Tensor& a, const py::object& b) {
             return binary(
                 a, b, [](const Tensor& x, const Tensor& y) { return x * y; },
                 [](const Tensor& x, double s) { return x * s; });
           })
      .def("__rmul__",
           [](const Tensor& a, const py::object& b) {
             return binary(
                 a, b, [](const Tensor& x, const Tensor& y) { return y * x; },
                 [](const Tensor& x, double s) { return s * x; });
           })
      .def("__truediv__",
           [](const Tensor& a, const py::object& b) {
             return binary(
                 a, b, [](const Tensor& x, const Tensor& y) { return x / y; },
                 [](const Tensor& x, double s) { return x / s; });
           })
      .def("__rtruediv__",
           [](const Tensor& a, const py::object& b) {
             return binary(
                 a, b, [](const Tensor& x, const Tensor& y) { return y / x; },
                 [](const Tensor& x, double s) { return s / x; });
           })
      .def("__pow__",
           [](const Tensor& a, const py::object& b) {
             return binary(
                 a, b, [](const Tensor& x, const Tensor& y) { return tg::pow(x, y); },
                 [](const Tensor& x, double s) { return tg::pow(x, s); });
           })
      .def("__neg__", [](const Tensor& a) { return -a; })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return tg::matmul(a, b); })
      .def("__repr__",
           [](const Tensor& t) {
             std::string s = "tapegrad.Tensor(shape=" +
                             py::str(py::tuple(py::cast(std::vector<int64_t>(t.sizes())))).cast<std::string>() +
                             ", dtype=" + dtype_name(t.dtype()) + ", device=" + device_name(t.device());
             if (t.requires_grad()) s += ", requires_grad=True";
             return s + ")";
           })
      .def(
          "__dlpack__",
          [](const Tensor& t, const py::object& stream, const py::object&, const py::object&, const py::object&) {
            return dlpack(t, stream);
          },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const Tensor& t) {
        return py::make_tuple(t.is_cuda() ? int(kDLCUDA) : int(kDLCPU), t.is_cuda() ? t.device().index() : 0);
      });

  // Creation and exchange.
  m.def("from_dlpack", &from_dlpack, py::arg("obj"),
        "A tensor viewing a DLPack producer's memory (NumPy, PyTorch, JAX ... or a capsule), no copy");
  m.def(
      "to_dlpack", [](const Tensor& t) { return dlpack(t, py::none()); }, "A DLPack capsule viewing t (no copy)");
  m.def("tensor", &make_tensor, py::arg("data"), py::arg("dtype") = py::none(), py::arg("device") = "cpu",
        py::arg("requires_grad") = false, "A tensor holding a copy of array-like data");
  auto factory = [&](const char* name, Tensor (*f)(const tg::IntList&, tg::TensorOptions)) {
    m.def(
        name,
        [f](const py::args& shape, const std::string& dtype, const std::string& device, bool requires_grad) {
          Tensor t = f(sizes_of(shape), options(dtype, device));
          if (requires_grad) t.requires_grad_(true);
          return t;
        },
        py::kw_only(), py::arg("dtype") = "float32", py::arg("device") = "cpu", py::arg("requires_grad") = false);
  };
  factory("zeros", [](const tg::IntList& s, tg::TensorOptions o) { return tg::zeros(s, o); });
  factory("ones", [](const tg::IntList& s, tg::TensorOptions o) { return tg::ones(s, o); });
  factory("randn", [](const tg::IntList& s, tg::TensorOptions o) { return tg::randn(s, o); });
  factory("rand", [](const tg::IntList& s, tg::TensorOptions o) { return tg::rand(s, o); });
  m.def(
      "eye",
      [](int64_t n, const std::string& dtype, const std::string& device) { return tg::eye(n, options(dtype, device)); },
      py::arg("n"), py::arg("dtype") = "float32", py::arg("device") = "cpu");
  m.def("manual_seed", [](uint64_t s) { tg::manual_seed(s); });

  // Ops.
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, Tensor (*)(const Tensor&)>>{
#define TG_UNARY(name, ...) {#name, [](const Tensor& x) { return tg::name(x); }},
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
           {"gelu", [](const Tensor& x) { return tg::gelu(x); }},
           {"softplus", [](const Tensor& x) { return tg::softplus(x); }},
       })
    m.def(name, fn);
  m.def("matmul", [](const Tensor& a, const Tensor& b) { return tg::matmul(a, b); });
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, const std::optional<Tensor>& b) {
        return tg::linear(x, w, b ? *b : Tensor());
      },
      py::arg("x"), py::arg("w"), py::arg("b") = py::none());
  m.def("maximum", [](const Tensor& a, const Tensor& b) { return tg::maximum(a, b); });
  m.def("minimum", [](const Tensor& a, const Tensor& b) { return tg::minimum(a, b); });
  m.def("where", [](const Tensor& c, const Tensor& a, const Tensor& b) { return tg::where(c, a, b); });
  m.def(
      "sum",
      [](const Tensor& t, const py::object& dim, bool keepdim) {
        return dim.is_none() ? tg::sum(t) : tg::sum(t, int_list(dim), keepdim);
      },
      py::arg("x"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def(
      "mean",
      [](const Tensor& t, const py::object& dim, bool keepdim) {
        return dim.is_none() ? tg::mean(t) : tg::mean(t, int_list(dim), keepdim);
      },
      py::arg("x"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def(
      "cat", [](const std::vector<Tensor>& ts, int64_t dim) { return tg::cat(ts, dim); }, py::arg("tensors"),
      py::arg("dim") = 0);
  m.def(
      "stack", [](const std::vector<Tensor>& ts, int64_t dim) { return tg::stack(ts, dim); }, py::arg("tensors"),
      py::arg("dim") = 0);
  m.def(
      "allclose",
      [](const Tensor& a, const Tensor& b, double rtol, double atol) { return tg::allclose(a, b, rtol, atol); },
      py::arg("a"), py::arg("b"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8);

  // Autograd.
  m.def(
      "grad",
      [](const py::object& outputs, const py::object& inputs, const py::object& grad_outputs,
         std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
        std::vector<Tensor> gos = grad_outputs.is_none() ? std::vector<Tensor>{} : tensor_list(grad_outputs);
        std::vector<Tensor> g =
            ag::grad(tensor_list(outputs), tensor_list(inputs), gos, retain_graph, create_graph, allow_unused);
        py::list out;
        for (const Tensor& t : g)
          out.append(or_none(t));
        return py::tuple(out);
      },
      py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = py::none(), py::arg("retain_graph") = py::none(),
      py::arg("create_graph") = false, py::arg("allow_unused") = false,
      "Gradients of outputs with respect to inputs (torch.autograd.grad); a tuple");
  m.def(
      "backward",
      [](const py::object& tensors, const py::object& grad_tensors, std::optional<bool> retain_graph,
         bool create_graph) {
        ag::backward(tensor_list(tensors), grad_tensors.is_none() ? std::vector<Tensor>{} : tensor_list(grad_tensors),
                     retain_graph, create_graph);
      },
      py::arg("tensors"), py::arg("grad_tensors") = py::none(), py::arg("retain_graph") = py::none(),
      py::arg("create_graph") = false);
  m.def("is_grad_enabled", &ag::is_grad_enabled);
  py::class_<GradMode>(m, "_GradMode")
      .def(py::init([](bool enabled) { return GradMode{enabled}; }))
      .def("__enter__",
           [](GradMode& g) {
             g.previous = ag::is_grad_enabled();
             ag::set_grad_enabled(g.enabled);
           })
      .def("__exit__", [](GradMode& g, const py::args&) { ag::set_grad_enabled(g.previous); });

  // The functional API (fn: a Python callable Tensor -> Tensor).
  m.def(
      "jacobian",
      [](const py::function& fn, const Tensor& x, bool create_graph, const std::string& mode) {
        return calling_python([&] { return ag::jacobian(tensor_fn(fn), x, create_graph, mode_from(mode)); });
      },
      py::arg("fn"), py::arg("x"), py::arg("create_graph") = false, py::arg("mode") = "reverse");
  m.def(
      "hessian",
      [](const py::function& fn, const Tensor& x, bool create_graph, const std::string& mode) {
        return calling_python([&] { return ag::hessian(tensor_fn(fn), x, create_graph, mode_from(mode)); });
      },
      py::arg("fn"), py::arg("x"), py::arg("create_graph") = false, py::arg("mode") = "reverse");
  // vjp, jvp, hvp: {fn(x), the product with v}.
  using Product = std::pair<Tensor, Tensor> (*)(const ag::TensorFn&, const Tensor&, const Tensor&, bool);
  for (auto [name, product] :
       std::initializer_list<std::pair<const char*, Product>>{{"vjp", &ag::vjp}, {"jvp", &ag::jvp}, {"hvp", &ag::hvp}})
    m.def(
        name,
        [product = product](const py::function& fn, const Tensor& x, const Tensor& v, bool create_graph) {
          return calling_python([&] { return product(tensor_fn(fn), x, v, create_graph); });
        },
        py::arg("fn"), py::arg("x"), py::arg("v"), py::arg("create_graph") = false);
  m.def(
      "per_sample_hessian",
      [](const py::function& fn, const Tensor& x, const std::string& strategy, bool create_graph) {
        return calling_python(
            [&] { return ag::per_sample_hessian(tensor_fn(fn), x, strategy_from(strategy), create_graph); });
      },
      py::arg("fn"), py::arg("x"), py::arg("strategy") = "batched_cotangents", py::arg("create_graph") = false);
  m.def(
      "laplacian",
      [](const py::function& fn, const Tensor& x, bool create_graph) {
        return calling_python([&] { return ag::laplacian(tensor_fn(fn), x, create_graph); });
      },
      py::arg("fn"), py::arg("x"), py::arg("create_graph") = false);

  // CUDA.
  py::module_ cuda = m.def_submodule("cuda", "CUDA devices, streams and graphs");
  cuda.def("is_available", &tg::cuda::is_available);
  cuda.def("device_count", &tg::cuda::device_count);
  cuda.def(
      "synchronize", [](int device) { tg::cuda::synchronize(device); }, py::arg("device") = -1);
  cuda.def(
      "current_stream",
      [](int device) { return reinterpret_cast<uintptr_t>(tg::cuda::current_stream(device).handle()); },
      py::arg("device") = -1, "This thread's current cudaStream_t (an int; 0: the legacy default stream)");
  cuda.def(
      "set_stream",
      [](uintptr_t handle, int device) {
        tg::cuda::set_current_stream(tg::cuda::Stream(device, reinterpret_cast<void*>(handle)));
      },
      py::arg("stream"), py::arg("device") = 0, "Makes a cudaStream_t (an int) the current stream of `device`");
  py::class_<tg::cuda::CUDAGraph>(cuda, "CUDAGraph")
      .def(py::init<bool>(), py::arg("keep_graph") = false)
      .def("replay", &tg::cuda::CUDAGraph::replay)
      .def("reset", &tg::cuda::CUDAGraph::reset);
  py::class_<GraphCapture>(cuda, "graph")
      .def(py::init([](tg::cuda::CUDAGraph& g) {
             return GraphCapture{&g, nullptr};
           }),
           py::keep_alive<1, 2>())
      .def("__enter__", [](GraphCapture& c) { c.scope = std::make_unique<tg::cuda::Graph>(*c.graph); })
      .def("__exit__", [](GraphCapture& c, const py::args&) { c.scope.reset(); });
}
