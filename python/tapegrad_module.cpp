// The Python bindings (pybind11): tapegrad._C, re-exported by the package
// tapegrad (python/tapegrad/__init__.py). Tensors exchange memory with NumPy,
// PyTorch and JAX through DLPack (__dlpack__ / __dlpack_device__ /
// from_dlpack); functions passed to the functional API are Python callables;
// tg::Error surfaces as tapegrad.Error (a RuntimeError) with the C++ message.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlpack/dlpack.h>

#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace py = pybind11;
using tg::Tensor;
namespace ag = tg::autograd;

namespace {

// A dtype argument of the factories: a name ("float32", a tapegrad.dtype)
// or a NumPy dtype or type (np.float64, np.dtype("float32")), held as its
// name (the type_caster below).
struct DtypeName {
  std::string name;
  operator const std::string&() const { return name; }
};

// The dtype list's Python names (tg::python_name), and PyTorch's aliases.
tg::ScalarType dtype_from(const std::string& s) {
  if (s == "float") return tg::kFloat32;
  if (s == "double") return tg::kFloat64;
  if (s == "half") return tg::kFloat16;
  if (s == "long") return tg::kInt64;
  for (int i = 0; i < tg::kNumScalarTypes; ++i)
    if (s == tg::python_name(tg::ScalarType(i))) return tg::ScalarType(i);
  std::string names;
  for (int i = 0; i < tg::kNumScalarTypes; ++i)
    names += std::string(i ? ", " : "") + tg::python_name(tg::ScalarType(i));
  throw tg::Error("tapegrad: unknown dtype '" + s + "' (" + names + ")");
}

std::string dtype_name(tg::ScalarType t) { return tg::python_name(t); }

// NumPy's typestr of a dtype (the list's numpy column); nullptr: NumPy has none.
const char* numpy_typestr(tg::ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, DlCode, DlBits, CudaType, NcclType, py, st, numpy, \
                 ...)                                                                                              \
  case tg::ScalarType::Name:                                                                                       \
    return numpy;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return nullptr;
}

tg::Device device_from(const std::string& s) {
  if (s == "cpu" || s == "cpu:0") return tg::Device(tg::kCPU);
  if (s == "cuda") return tg::Device(tg::kCUDA, 0);
  if (s.rfind("cuda:", 0) == 0) return tg::Device(tg::kCUDA, std::stoi(s.substr(5)));
  throw tg::Error("tapegrad: unknown device '" + s + "' (cpu, cuda, cuda:N)");
}

std::string device_name(tg::Device d) { return d.is_cuda() ? "cuda:" + std::to_string(d.index()) : "cpu"; }

[[noreturn]] void raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

// o (a Python int, or anything with __index__: NumPy's integers) as int64
// in v, exactly; false when it does not fit (Python ints are unbounded).
bool fits_int64(const py::handle& o, int64_t& v) {
  auto i = py::reinterpret_steal<py::object>(PyNumber_Index(o.ptr()));
  if (!i) throw py::error_already_set();  // TypeError: not an integer
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  v = int64_t(x);
  return overflow == 0;
}

// An integer argument of `op` (`what`: "size", "index", "dim" ...); one beyond
// int64 raises `type`: OverflowError for sizes, IndexError for indices and
// dims (as Python's sequences), never wraps.
int64_t int64_arg(const py::handle& o, const char* op, const char* what, PyObject* type = PyExc_OverflowError) {
  int64_t v = 0;
  if (!fits_int64(o, v))
    raise(type, std::string(op) + ": " + what + " " + py::str(o).cast<std::string>() +
                    " does not fit in int64 (the range is -2**63 .. 2**63-1)");
  return v;
}

tg::IntList int_list(const py::object& o, const char* op, const char* what = "size",
                     PyObject* type = PyExc_OverflowError) {
  if (PyIndex_Check(o.ptr())) return tg::IntList{int64_arg(o, op, what, type)};
  if (py::isinstance<Tensor>(o)) {  // torch.zeros(torch.tensor(3)): a 0-d or 1-d integer tensor's values
    const Tensor t = o.cast<Tensor>();
    if ((t.dtype() != tg::kInt64) || t.dim() > 1)
      throw py::type_error(std::string(op) + ": a tensor as the " + what + " must be a 0-d or 1-d int64 tensor, got " +
                           dtype_name(t.dtype()) + " " + tg::shape_str(t.sizes()));
    const Tensor c = t.detach().to(tg::Device(tg::kCPU)).contiguous();
    return tg::IntList(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  }
  tg::IntList l;
  for (const py::handle& x : o)
    l.push_back(int64_arg(x, op, what, type));
  return l;
}

// `shape` may be given as *sizes or as one sequence.
tg::IntList sizes_of(const py::args& args, const char* op) {
  if (args.size() == 1 && !PyIndex_Check(args[0].ptr())) return int_list(args[0], op);
  tg::IntList s;
  for (const auto& a : args)
    s.push_back(int64_arg(a, op, "size"));
  return s;
}

// A Python number as the Scalar operand of `op`: bools as bool, ints (and
// NumPy's integers) exactly as int64, floats as double; nullopt for anything
// else. An int beyond int64 becomes a double where the other side is
// floating (`floating`), and raises OverflowError where it is an integer or
// Bool tensor, as PyTorch's (no silent wrap or rounding).
std::optional<tg::Scalar> scalar_of(const py::handle& o, bool floating, const char* op) {
  if (PyBool_Check(o.ptr())) return tg::Scalar(o.ptr() == Py_True);
  if (PyFloat_Check(o.ptr())) return tg::Scalar(PyFloat_AsDouble(o.ptr()));
  py::module_ np = py::module_::import("numpy");  // NumPy's bool_ and float32 are no Python bool or float
  if (py::isinstance(o, np.attr("bool_"))) return tg::Scalar(o.cast<bool>());
  if (py::isinstance(o, np.attr("floating"))) return tg::Scalar(o.cast<double>());
  if (!PyIndex_Check(o.ptr())) return std::nullopt;
  int64_t v = 0;
  if (fits_int64(o, v)) return tg::Scalar(static_cast<long long>(v));
  if (!floating)
    raise(PyExc_OverflowError, std::string(op) + ": the integer " + py::str(o).cast<std::string>() +
                                   " does not fit in int64; use a float (or a floating tensor) for it");
  const double d = PyLong_AsDouble(py::reinterpret_steal<py::object>(PyNumber_Index(o.ptr())).ptr());
  if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();  // OverflowError beyond double
  return tg::Scalar(d);
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
  const char* typestr = numpy_typestr(t.dtype());
  if (!typestr) throw tg::Error("numpy: NumPy has no " + dtype_name(t.dtype()) + "; convert with .to('float32')");
  py::dtype dt(typestr);
  std::vector<py::ssize_t> shape(t.sizes().begin(), t.sizes().end()), strides;
  if (t.numel() == 0) return py::array(dt, shape);  // no memory to share (and maybe no pointer)
  const int64_t es = int64_t(tg::element_size(t.dtype()));
  for (int64_t s : t.strides())
    strides.push_back(py::ssize_t(s * es));
  auto* keep = new Tensor(t);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dt, shape, strides, t.data_ptr(), owner);
}

// tapegrad.tensor(data): a copy of array-like data, of its shape (a number
// gives a 0-d tensor); Python floats become float32, complex numbers
// complex64, bools bool and ints
// int64, exactly (as torch.tensor; an int beyond int64 raises
// OverflowError); NumPy arrays and scalars keep their dtype, unsigned ones
// become int64 (exactly: uint64 values beyond int64 raise OverflowError).
Tensor make_tensor(const py::object& data, const std::optional<DtypeName>& dtype, const std::string& device,
                   bool requires_grad) {
  py::module_ np = py::module_::import("numpy");
  const bool is_array = py::isinstance(data, np.attr("ndarray")) || py::isinstance(data, np.attr("generic"));
  py::object arr = np.attr("asarray")(data);
  if (arr.attr("ndim").cast<int64_t>() > 0) arr = np.attr("ascontiguousarray")(arr);  // that one makes 0-d 1-d
  if (!arr.attr("flags").attr("writeable").cast<bool>()) arr = arr.attr("copy")();    // NumPy exports no read-only one
  std::string kind = arr.attr("dtype").attr("kind").cast<std::string>();
  if (!is_array && (kind == "u" || kind == "O")) {  // NumPy's types for ints beyond int64
    for (const py::handle& x : arr.attr("ravel")())
      if (PyLong_Check(x.ptr()) || py::isinstance(x, np.attr("unsignedinteger")))
        (void)int64_arg(x, "tensor", "the integer");
  }
  if (kind == "u" && arr.attr("dtype").attr("itemsize").cast<int64_t>() == 8 && arr.attr("size").cast<int64_t>() > 0) {
    py::object top = arr.attr("max")();
    if (top.cast<uint64_t>() > uint64_t(INT64_MAX))
      raise(PyExc_OverflowError, "tensor: the uint64 value " + py::str(top).cast<std::string>() +
                                     " does not fit in int64, tapegrad's integer type; convert the array with "
                                     ".astype(numpy.float64) (or keep its values below 2**63)");
  }
  // Python floats: float32 unless a dtype is asked for (then read at float64
  // precision and converted once: 0.1 as float64 stays 0.1).
  if (kind != "f" && kind != "i" && kind != "u" && kind != "b" && kind != "c")
    throw py::type_error("tensor: cannot make a tensor from " + py::str(py::type::of(data)).cast<std::string>() +
                         " (NumPy reads it as dtype " + py::str(arr.attr("dtype")).cast<std::string>() +
                         "); give numbers, nested lists of numbers, an ndarray or a tensor");
  if (!is_array && kind == "f" && !dtype) arr = arr.attr("astype")("float32");
  if (!is_array && kind == "c" && !dtype) arr = arr.attr("astype")("complex64");     // torch's default complex
  if (kind == "i" || kind == "u" || kind == "b") arr = arr.attr("astype")("int64");  // NumPy < 1.25: no bool in DLPack
  Tensor t = from_dlpack(arr).clone();
  if (kind == "b") t = t.to(tg::kBool);
  if (dtype) t = t.to(dtype_from(*dtype));
  t = t.to(device_from(device));
  if (requires_grad) t.requires_grad_(true);
  return t;
}

// Tensors from a tensor or an iterable of tensors (None: undefined); a
// TypeError naming the item otherwise (not pybind11's cast message).
std::vector<Tensor> tensor_list(const py::object& o) {
  if (py::isinstance<Tensor>(o)) return {o.cast<Tensor>()};
  if (!py::isinstance<py::iterable>(o) || py::isinstance(o, py::module_::import("numpy").attr("ndarray")))
    throw py::type_error("expected a tapegrad.Tensor or a sequence of them, got " +
                         py::str(py::type::of(o)).cast<std::string>());
  std::vector<Tensor> v;
  size_t i = 0;
  for (const auto& x : o) {
    if (!x.is_none() && !py::isinstance<Tensor>(x))
      throw py::type_error("expected tapegrad.Tensor items, got " + py::str(py::type::of(x)).cast<std::string>() +
                           " at position " + std::to_string(i));
    v.push_back(x.is_none() ? Tensor() : x.cast<Tensor>());
    ++i;
  }
  return v;
}

py::object or_none(const Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

// A scalar or tensor right-hand side (`op` names the operator in errors);
// NotImplemented for anything else (so `t == None` is False).
template <class F, class G>
py::object binary(const Tensor& a, const py::object& b, const char* op, F tensor_op, G scalar_op) {
  if (py::isinstance<Tensor>(b)) return py::cast(tensor_op(a, b.cast<Tensor>()));
  if (py::isinstance(b, py::module_::import("numpy").attr("ndarray")))  // as PyTorch: a tensor on a's device
    return py::cast(tensor_op(a, make_tensor(b, std::nullopt, device_name(a.device()), false)));
  if (auto s = scalar_of(b, a.defined() && tg::is_floating_point(a.dtype()), op)) return py::cast(scalar_op(a, *s));
  return py::reinterpret_borrow<py::object>(Py_NotImplemented);
}
// The same with one (generic) op for both forms.
template <class F> py::object binary(const Tensor& a, const py::object& b, const char* op, F f) {
  return binary(a, b, op, f, f);
}

// A one-element tensor (float(t), int(t)), else an error as PyTorch's.
Tensor one_element(const Tensor& t, const char* what) {
  if (tg::is_complex(t.dtype()))
    throw py::type_error(std::string(what) + "(): a complex tensor has no real value; take .real or abs() first");
  if (t.numel() != 1)
    throw tg::Error(std::string(what) + "(): only a one-element tensor converts to a Python number, got " +
                    tg::shape_str(t.sizes()));
  return t.detach();
}

// The other operand of a binary operator: a tensor, a NumPy array (a
// tensor on a's device) or a number (a 0-d tensor of a's dtype when a is
// floating, as PyTorch's type promotion of a Python scalar).
Tensor as_operand(const py::object& b, const Tensor& a, const char* op) {
  if (py::isinstance<Tensor>(b)) return b.cast<Tensor>();
  if (py::isinstance(b, py::module_::import("numpy").attr("ndarray")))
    return make_tensor(b, std::nullopt, device_name(a.device()), false);
  auto s = scalar_of(b, tg::is_floating_point(a.dtype()), op);
  if (!s) throw py::type_error(std::string(op) + ": the operand must be a tensor, an ndarray or a number");
  // A float with an integer tensor: a float32 0-d operand (torch's default
  // dtype), so the result promotes to float32 as torch's.
  const bool promote = !s->is_integral() && !tg::is_floating_point(a.dtype()) && !tg::is_complex(a.dtype());
  return tg::full({}, *s, tg::TensorOptions().dtype(promote ? tg::kFloat32 : a.dtype()).device(a.device()));
}

// f(a, b) with b as a tensor operand (a tensor, an ndarray, a number: as_operand); NotImplemented
// for another type, so that Python tries the reflected form.
bool is_bool_key(const py::object& k);  // below: a Python or NumPy bool
template <class F> py::object with_operand(const Tensor& a, const py::object& b, const char* op, F f) {
  if (!py::isinstance<Tensor>(b) && !py::isinstance(b, py::module_::import("numpy").attr("ndarray")) &&
      !PyNumber_Check(b.ptr()))
    return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  if (a.dtype() == tg::kBool && !py::isinstance<Tensor>(b) &&
      !py::isinstance(b, py::module_::import("numpy").attr("ndarray")) && !is_bool_key(b)) {
    auto s = scalar_of(b, false, op);
    if (!s) throw py::type_error(std::string(op) + ": the operand must be a tensor, an ndarray or a number");
    return py::cast(f(
        a.to(s->is_integral() ? tg::kInt64 : tg::kFloat32),
        tg::full({}, *s, tg::TensorOptions().dtype(s->is_integral() ? tg::kInt64 : tg::kFloat32).device(a.device()))));
  }
  return py::cast(f(a, as_operand(b, a, op)));
}

// a // b as torch.floor_divide: floor(a / b), for Int64 operands exact
// integers ((a - a mod b) / b; division by zero raises, as the remainder's).
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  if (a.dtype() == tg::kInt64 && b.dtype() == tg::kInt64) {
    // (a - a mod b) / b is an exact multiple; its quotient is exact in
    // float64 up to 2^53 in magnitude. Beyond, refused rather than rounded.
    const Tensor r = tg::remainder(a, b);   // raises for a zero divisor
    const double big = 9007199254740992.0;  // 2^53
    if (a.numel() > 0 && b.numel() > 0 &&
        (tg::amax(tg::abs(a.to(tg::kFloat64))).item<double>() > big ||
         tg::amax(tg::abs(b.to(tg::kFloat64))).item<double>() > big))
      throw tg::Error(
          "floor_divide: Int64 operands beyond 2^53 in magnitude would be rounded (the quotient is "
          "computed in float64); use smaller values or a % b with (a - a % b)");
    return tg::round(tg::div(tg::sub(a, r).to(tg::kFloat64), b.to(tg::kFloat64))).to(tg::kInt64);
  }
  // Python's and torch's: q = (a - fmod(a, b)) / b, one less where fmod's sign
  // differs from b's, then rounded to the nearest integer (floor, up where
  // the rest exceeds 1/2); a / b (inf, nan) for a zero divisor.
  const Tensor mod = tg::fmod(a, b);
  Tensor q = tg::div(tg::sub(a, mod), b);
  const Tensor zero = tg::zeros_like(mod);
  const Tensor off = tg::logical_and(tg::ne(mod, zero), tg::ne(tg::lt(b, zero), tg::lt(mod, zero)));
  q = tg::where(off, tg::sub(q, 1.0), q);
  Tensor f = tg::floor(q);
  f = tg::where(tg::gt(tg::sub(q, f), 0.5), tg::add(f, 1.0), f);
  const Tensor ratio = tg::div(a, b);
  f = tg::where(tg::eq(q, zero), tg::mul(ratio, 0.0), f);  // a signed zero, the quotient's sign
  return tg::where(tg::eq(b, tg::zeros_like(b)), ratio, f);
}

// self op= b: the in-place method on self's storage (0 add_, 1 sub_, 2
// mul_, 3 div_), self returned.
bool is_bool_key(const py::object& k);  // below: a Python or NumPy bool

py::object in_place(py::object self, const py::object& b, const char* op, int which) {
  Tensor& a = self.cast<Tensor&>();
  const Tensor o = as_operand(b, a, op);
  const bool number = !py::isinstance<Tensor>(b) && !py::isinstance(b, py::module_::import("numpy").attr("ndarray"));
  if (a.dtype() == tg::kBool && (o.dtype() != tg::kBool || (number && !is_bool_key(b))))
    throw tg::Error(std::string(op) + ": a " + dtype_name(o.dtype()) +
                    " operand would be cast into a Bool tensor; convert the tensor first (t.to(\"int64\"))");
  switch (which) {
    case 0: a.add_(o); break;
    case 1: a.sub_(o); break;
    case 2: a.mul_(o); break;
    default: a.div_(o); break;
  }
  return self;
}

// self's storage takes r (an out-of-place result of self op b), as an in-place
// operator; a result of another dtype or shape is refused.
py::object write_back(py::object self, const py::object& result, const char* op) {
  if (result.ptr() == Py_NotImplemented) throw py::type_error(std::string(op) + ": unsupported operand");
  Tensor& a = self.cast<Tensor&>();
  const Tensor r = result.cast<Tensor>();
  if (r.dtype() != a.dtype())
    throw tg::Error(std::string(op) + ": the result is " + dtype_name(r.dtype()) + " but the tensor is " +
                    dtype_name(a.dtype()) + "; in place cannot change the dtype: write t = t op x, or convert t first");
  if (r.sizes() != a.sizes())
    throw tg::Error(std::string(op) + ": the result's shape " + tg::shape_str(r.sizes()) + " is not the tensor's " +
                    tg::shape_str(a.sizes()) + " (the other operand broadcasts it larger)");
  a.copy_(r);
  return self;
}

void bool_operand(const Tensor& t, const char* op) {
  if (t.dtype() != tg::kBool)
    throw tg::Error(std::string(op) + ": tapegrad's &, |, ^ and ~ take Bool tensors (logical), got " +
                    dtype_name(t.dtype()) + "; compare first (t > 0) or use logical_and/or/xor/not");
}

// a op b for Bool a and a Bool tensor, bool or Bool ndarray b.
Tensor logical(const Tensor& a, const py::object& b, const char* op, Tensor (*f)(const Tensor&, const Tensor&)) {
  bool_operand(a, op);
  // A number must be a bool: PyTorch's `mask & 2` is an integer bitwise op
  // (Int64 zeros), which tapegrad lacks; casting 2 to True would be wrong.
  if (!py::isinstance<Tensor>(b) && !py::isinstance(b, py::module_::import("numpy").attr("ndarray")) &&
      !is_bool_key(b) && PyNumber_Check(b.ptr()))
    throw tg::Error(std::string(op) + ": tapegrad's &, |, ^ take Bool operands (logical), got the number " +
                    py::str(b).cast<std::string>() +
                    " (PyTorch would do an integer bitwise op, which tapegrad lacks); use True/False or compare first");
  const Tensor o = as_operand(b, a, op);  // a Python bool: a 0-d Bool tensor (a's dtype)
  bool_operand(o, op);
  return f(a, o);
}

// t[key] as NumPy and PyTorch index: integers (negative from the end; past
// the end or beyond int64: IndexError, so iteration stops), slices (views,
// steps > 0), None (a new dim), True and False (a new dim of size 1 or 0;
// as PyTorch's, integers are not advanced indices beside them, so NumPy
// differs where one stands apart from a bool), Ellipsis, and tuples of them.
// Every result is a view.
bool is_bool_key(const py::object& k) {
  return PyBool_Check(k.ptr()) || py::isinstance(k, py::module_::import("numpy").attr("bool_"));
}
// An integer index: Python's int, NumPy's integers, anything with __index__.
bool is_integer_key(const py::object& k) { return PyIndex_Check(k.ptr()) != 0 && !is_bool_key(k); }

// Whether key (or an item of a tuple key) is a slice with a negative step.
bool has_negative_step(const py::object& key) {
  auto negative = [](const py::handle& k) {
    if (!py::isinstance<py::slice>(k)) return false;
    py::object step = k.attr("step");
    return !step.is_none() && PyIndex_Check(step.ptr()) && step.cast<int64_t>() < 0;
  };
  if (!py::isinstance<py::tuple>(key)) return negative(key);
  for (const py::handle& h : key.cast<py::tuple>())
    if (negative(h)) return true;
  return false;
}

// An advanced key: a tensor, an ndarray or a list (of ints or bools).
bool is_advanced_key(const py::object& k) {
  return py::isinstance<Tensor>(k) || py::isinstance(k, py::module_::import("numpy").attr("ndarray")) ||
         py::isinstance<py::list>(k);
}

// t[key] for one advanced key, as NumPy and PyTorch: a Bool mask over t's
// dims from `dim` on picks the True positions (flattened into one dim),
// integers (negative from the end) pick along `dim` (their shape replaces
// it); the result is a copy.
// An advanced key as a tensor on t's device (an empty list: no positions).
Tensor key_tensor(const Tensor& t, const py::object& key) {
  const bool empty_list = py::isinstance<py::list>(key) && py::len(key) == 0;  // NumPy's: no positions
  Tensor k = py::isinstance<Tensor>(key) ? key.cast<Tensor>()
             : empty_list                ? tg::zeros({0}, tg::TensorOptions().dtype(tg::kInt64))
                                         : make_tensor(key, std::nullopt, device_name(t.device()), false);
  return k.device() != t.device() ? k.to(t.device()) : k;
}

Tensor advanced_index(const Tensor& t, const py::object& key, int64_t dim = 0) {
  const Tensor k = key_tensor(t, key);
  if (t.dim() == 0) throw py::index_error("a 0-d tensor takes no index tensor");
  if (k.dtype() == tg::kBool) {
    const int64_t kd = k.dim();
    if (kd == 0 || dim + kd > t.dim() ||
        k.sizes() != tg::IntList(std::vector<int64_t>(t.sizes().begin() + dim, t.sizes().begin() + dim + kd)))
      throw py::index_error("the Bool mask " + tg::shape_str(k.sizes()) + " must match the dims of the tensor " +
                            tg::shape_str(t.sizes()) + " from dim " + std::to_string(dim) + " on");
    tg::IntList flat(t.sizes().begin(), t.sizes().begin() + dim);
    flat.push_back(-1);
    for (int64_t d = dim + kd; d < t.dim(); ++d)
      flat.push_back(t.size(d));
    const Tensor where = tg::nonzero(k.reshape({-1})).reshape({-1});
    return tg::index_select(t.reshape(flat), dim, where);
  }
  if (k.dtype() != tg::kInt64)
    throw py::index_error("tensors used as indices must be Int64 or Bool, got " + dtype_name(k.dtype()));
  const int64_t n = t.size(dim);
  if (k.numel() > 0) {
    const int64_t lo = tg::amin(k).item<int64_t>(), hi = tg::amax(k).item<int64_t>();
    if (lo < -n || hi >= n)
      throw py::index_error("index " + std::to_string(lo < -n ? lo : hi) + " is out of bounds for dimension " +
                            std::to_string(dim) + " with size " + std::to_string(n));
  }
  const Tensor idx = tg::where(tg::lt(k, tg::full({}, tg::Scalar(0LL), k.options())),
                               tg::add(k, tg::full({}, tg::Scalar(static_cast<long long>(n)), k.options())), k);
  tg::IntList shape(t.sizes().begin(), t.sizes().begin() + dim);
  for (int64_t s : k.sizes())
    shape.push_back(s);
  for (int64_t d = dim + 1; d < t.dim(); ++d)
    shape.push_back(t.size(d));
  return tg::index_select(t, dim, idx.reshape({-1})).reshape(shape);
}

// A key as PyTorch reads it: a range is a list of its integers, a 0-d Bool
// tensor or array a bool.
py::object normal_key(const py::object& k) {
  if (PyRange_Check(k.ptr())) return py::list(k);
  const bool zero_d_bool =
      (py::isinstance<Tensor>(k) && k.cast<Tensor>().dim() == 0 && k.cast<Tensor>().dtype() == tg::kBool) ||
      (py::isinstance(k, py::module_::import("numpy").attr("ndarray")) && k.attr("ndim").cast<int64_t>() == 0 &&
       k.attr("dtype").attr("kind").cast<std::string>() == "b");
  return zero_d_bool ? py::bool_(k.attr("item")().cast<bool>()) : k;
}

// The items of a key (a tuple's, or the key alone), each normal_key'd.
std::vector<py::object> key_items(const py::object& key) {
  std::vector<py::object> items;
  if (py::isinstance<py::tuple>(key)) {
    for (const py::handle& h : key.cast<py::tuple>())
      items.push_back(normal_key(py::reinterpret_borrow<py::object>(h)));
  } else {
    items.push_back(normal_key(key));
  }
  return items;
}

// The key as LibTorch's index list (Tensor::index / index_put_, which take
// several index tensors at once; a bool is a 0-d Bool mask).
std::vector<tg::TensorIndex> tensor_indices(const Tensor& t, const std::vector<py::object>& items) {
  std::vector<tg::TensorIndex> out;
  auto bound = [](const py::object& b, const char* what) -> std::optional<int64_t> {
    if (b.is_none()) return std::nullopt;
    return int64_arg(b, "index", what, PyExc_IndexError);
  };
  for (const py::object& k : items) {
    if (k.is_none()) {
      out.emplace_back(tg::indexing::None);
    } else if (is_bool_key(k)) {
      out.emplace_back(
          tg::full({}, tg::Scalar(py::cast<bool>(k)), tg::TensorOptions().dtype(tg::kBool).device(t.device())));
    } else if (py::isinstance<py::ellipsis>(k)) {
      out.emplace_back(tg::indexing::Ellipsis);
    } else if (is_advanced_key(k)) {
      out.emplace_back(key_tensor(t, k));
    } else if (is_integer_key(k)) {
      out.emplace_back(int64_arg(k, "index", "index", PyExc_IndexError));
    } else if (py::isinstance<py::slice>(k)) {
      out.emplace_back(tg::indexing::Slice(bound(k.attr("start"), "a slice's start"),
                                           bound(k.attr("stop"), "a slice's stop"),
                                           bound(k.attr("step"), "a slice's step")));
    } else {
      throw py::type_error(
          "tapegrad indexing takes integers, slices, None, ..., bools and index tensors, arrays or lists (got " +
          py::str(py::type::of(k)).cast<std::string>() + ")");
    }
  }
  return out;
}

size_t advanced_items(const std::vector<py::object>& items) {
  size_t n = 0;
  for (const py::object& k : items)
    n += is_advanced_key(k);
  return n;
}

Tensor index_tensor(const Tensor& t, const py::object& key) {
  std::vector<py::object> items = key_items(key);
  if (!py::isinstance<py::tuple>(key) && is_advanced_key(items[0])) return advanced_index(t, items[0]);
  if (advanced_items(items) > 1) {  // several index tensors: LibTorch's index picks with them together
    if (has_negative_step(key))
      throw py::type_error("tapegrad indexing takes no negative step beside several index tensors; flip first");
    return t.index(tensor_indices(t, items));
  }
  // One advanced key among basic ones, as PyTorch's: the integers and
  // slices apply first (views), then the key picks along the dim it stands
  // for (a Bool mask over the dims from there). It stands in as a full
  // slice (a Bool mask as one per dim it covers) until then.
  py::object advanced;
  size_t advanced_at = items.size();
  for (size_t i = 0; i < items.size(); ++i)
    if (is_advanced_key(items[i])) advanced_at = i;
  int64_t mask_dims = 1;
  if (advanced_at != items.size()) {
    advanced = items[advanced_at];
    if (py::isinstance<Tensor>(advanced) && advanced.cast<Tensor>().dtype() == tg::kBool)
      mask_dims = std::max<int64_t>(1, advanced.cast<Tensor>().dim());
    else if (py::isinstance(advanced, py::module_::import("numpy").attr("ndarray")) &&
             advanced.attr("dtype").attr("kind").cast<std::string>() == "b")
      mask_dims = std::max<int64_t>(1, advanced.attr("ndim").cast<int64_t>());
    const py::slice all{py::none(), py::none(), py::none()};
    items[advanced_at] = all;
    for (int64_t j = 1; j < mask_dims; ++j)
      items.insert(items.begin() + std::ptrdiff_t(advanced_at) + 1, all);
  }
  int64_t consumed = 0, ellipses = 0;
  for (const py::object& k : items) {
    if (k.is_none() || is_bool_key(k)) continue;
    if (py::isinstance<py::ellipsis>(k)) {
      ++ellipses;
      continue;
    }
    if (!is_integer_key(k) && !py::isinstance<py::slice>(k))
      throw py::type_error(
          "tapegrad indexing takes integers, slices, None, ..., bools and one index tensor, array or list (got " +
          py::str(py::type::of(k)).cast<std::string>() + " in a tuple)");
    ++consumed;
  }
  if (ellipses > 1) throw py::index_error("an index can only have a single ellipsis ('...')");
  if (consumed > t.dim())
    throw py::index_error("too many indices for a tensor of dimension " + std::to_string(t.dim()));
  Tensor r = t;
  int64_t d = 0;               // the dim of r the next item applies to
  std::vector<int64_t> bools;  // the dims (of size 1) the bools added
  bool all_true = true;
  int64_t advanced_dim = -1;  // the dim of r the advanced key picks along
  for (size_t i = 0; i < items.size(); ++i) {
    const py::object& k = items[i];
    if (i == advanced_at) advanced_dim = d;
    if (k.is_none()) {
      r = r.unsqueeze(d++);
    } else if (is_bool_key(k)) {
      all_true = all_true && py::cast<bool>(k);
      bools.push_back(d);
      r = r.unsqueeze(d++);
    } else if (py::isinstance<py::ellipsis>(k)) {
      d += t.dim() - consumed;
    } else if (is_integer_key(k)) {
      const int64_t size = r.size(d);
      const int64_t i = int64_arg(k, "index", "index", PyExc_IndexError);
      if (i < -size || i >= size)
        throw py::index_error("index " + std::to_string(i) + " is out of bounds for dimension " + std::to_string(d) +
                              " with size " + std::to_string(size));
      r = r.select(d, i < 0 ? i + size : i);
    } else {
      py::ssize_t start = 0, stop = 0, step = 0, length = 0;
      if (!k.cast<py::slice>().compute(py::ssize_t(r.size(d)), &start, &stop, &step, &length))
        throw py::error_already_set();
      if (length == 0) {
        r = r.narrow(d, std::min<int64_t>(std::max<int64_t>(start, 0), r.size(d)), 0);
      } else if (step > 0) {
        r = r.slice(d, int64_t(start), int64_t(start) + int64_t(step) * (int64_t(length) - 1) + 1, int64_t(step));
      } else {  // a negative step, as NumPy: the forward slice of the same elements, flipped (a copy)
        const int64_t last = int64_t(start) + int64_t(step) * (int64_t(length) - 1);
        r = r.slice(d, last, int64_t(start) + 1, -int64_t(step)).flip({d});
      }
      ++d;
    }
  }
  if (advanced) {
    if (!bools.empty()) throw py::type_error("tapegrad indexing takes no bools beside an index tensor, array or list");
    return advanced_index(r, advanced, advanced_dim);
  }
  if (bools.empty()) return r;
  // The bools are 0-d index arrays: together one dim, of size 1 (all True)
  // or 0, where the first stands if they are adjacent, else first of all.
  int64_t at = bools[0];
  if (bools.size() > 1) {
    if (bools.back() - bools.front() + 1 != int64_t(bools.size())) at = 0;
    for (size_t i = bools.size(); i-- > 0;)
      r = r.squeeze(bools[i]);
    r = r.unsqueeze(at);
  }
  return all_true ? r : r.narrow(at, 0, 0);
}

// The NumPy array interface of a CPU tensor (zero copy; NumPy keeps the
// tensor's Python object alive as the array's base).
py::dict array_interface(const Tensor& t) {
  // (an empty tensor may have no pointer to give, NumPy takes __array__'s array)
  if (!t.defined() || t.is_cuda() || t.requires_grad() || t.numel() == 0)
    throw py::attribute_error("__array_interface__: only nonempty CPU tensors that do not require grad");
  const char* typestr_or_null = numpy_typestr(t.dtype());
  if (!typestr_or_null) throw py::attribute_error("__array_interface__: NumPy has no " + dtype_name(t.dtype()));
  const std::string typestr = typestr_or_null;
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

// tapegrad.Error, the Python type of tg::Error (set where it is registered).
PyObject* g_error_type = nullptr;

// A Python callable kept by C++ (a hook, a functional API's fn), released
// with the GIL held (the last owner may be an engine worker thread); copies
// of what holds it (std::function copies, made with the GIL released)
// touch no Python reference count.
std::shared_ptr<py::function> keep_callable(const py::function& fn) {
  return std::shared_ptr<py::function>(new py::function(fn), [](py::function* f) {
    if (!Py_IsInitialized()) return;  // at exit: leaked, not touched
    py::gil_scoped_acquire gil;
    delete f;
  });
}

// fn as a TensorFn (each call takes the GIL: the functional API runs with
// it released, calling_python). A tapegrad.Error raised inside fn (an op of fn
// refusing its input) goes on as the tg::Error it was, so the engine's
// fallbacks see it as in C++: per_sample_hessian probing fn on fewer rows
// than it closes over, say.
ag::TensorFn tensor_fn(const py::function& fn) {
  return [f = keep_callable(fn)](const Tensor& x) -> Tensor {
    py::gil_scoped_acquire gil;  // the body runs with the GIL released (calling_python)
    try {
      py::object y = (*f)(x);
      if (!py::isinstance<Tensor>(y))
        throw tg::Error("the function returned " + py::str(py::type::of(y)).cast<std::string>() +
                        ", not a tapegrad.Tensor");
      return y.cast<Tensor>();
    } catch (py::error_already_set& e) {
      if (g_error_type && e.matches(g_error_type)) throw tg::Error(py::str(e.value()).cast<std::string>());
      throw CallbackError{std::make_shared<py::error_already_set>(std::move(e))};
    }
  };
}

// Runs body(f), f the Python callable fn as a TensorFn, with the GIL
// released (so that the engine's device workers may run Python hooks; f
// takes the GIL for each call of fn), raising fn's exception again as it
// was. f is made and destroyed with the GIL held.
// body(), a Python callback's exception (CallbackError) raised again as it was.
template <class F> auto raising_callback_errors(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (CallbackError& e) {
    e.error->restore();
    throw py::error_already_set();
  }
}
template <class Made, class F> auto run_released(const Made& f, F&& body) -> decltype(body(f)) {
  return raising_callback_errors([&] {
    py::gil_scoped_release nogil;
    return body(f);
  });
}
template <class F> auto calling_python(const py::function& fn, F&& body) -> decltype(body(ag::TensorFn())) {
  const ag::TensorFn f = tensor_fn(fn);
  return run_released(f, std::forward<F>(body));
}

// fn(*inputs) -> a tensor or a sequence of tensors, as a TensorsFn
// (gradcheck's), taking the GIL for each call.
ag::TensorsFn tensors_fn(const py::function& fn) {
  return [f = keep_callable(fn)](const ag::variable_list& xs) -> ag::variable_list {
    py::gil_scoped_acquire gil;
    try {
      py::tuple args(xs.size());
      for (size_t i = 0; i < xs.size(); ++i)
        args[i] = py::cast(xs[i]);
      py::object y = (*f)(*args);
      if (py::isinstance<Tensor>(y)) return {y.cast<Tensor>()};
      if (py::isinstance<py::sequence>(y) && !py::isinstance<py::str>(y) &&
          !py::isinstance(y, py::module_::import("numpy").attr("ndarray")))
        return tensor_list(y);
      throw tg::Error("gradcheck: the function returned " + py::str(py::type::of(y)).cast<std::string>() +
                      ", not a tapegrad.Tensor or a sequence of them");
    } catch (py::error_already_set& e) {
      if (g_error_type && e.matches(g_error_type)) throw tg::Error(py::str(e.value()).cast<std::string>());
      throw CallbackError{std::make_shared<py::error_already_set>(std::move(e))};
    }
  };
}

// Tensor.register_hook's hook: fn(grad) -> None or a tensor replacing it,
// called with the GIL (from whichever thread the engine runs the node on).
// An exception in fn becomes a tapegrad.Error naming it.
std::function<Tensor(const Tensor&)> tensor_hook(const py::function& fn) {
  std::shared_ptr<py::function> f = keep_callable(fn);
  return [f](const Tensor& g) -> Tensor {
    py::gil_scoped_acquire gil;
    try {
      py::object r = (*f)(g);
      if (r.is_none()) return Tensor();
      if (!py::isinstance<Tensor>(r))
        throw tg::Error("register_hook: the hook returned " + py::str(py::type::of(r)).cast<std::string>() +
                        "; return None or a tapegrad.Tensor");
      return r.cast<Tensor>();
    } catch (py::error_already_set& e) {
      throw tg::Error(std::string("register_hook: the hook raised ") + e.what());
    }
  };
}

// A grad-mode scope for `with tapegrad.no_grad():`.
struct GradMode {
  bool enabled;
  bool previous = true;
};

// `with forward_ad.dual_level():` and `with forward_ad.taylor_level(K, k):`
// (the level lives from __enter__ to __exit__, on the calling thread).
struct DualLevel {
  int64_t batch = 0;
  std::unique_ptr<ag::forward_ad::dual_level> level;
};
struct TaylorLevel {
  int order = 1;
  int64_t directions = 1;
  std::unique_ptr<ag::forward_ad::taylor_level> level;
};

// An optimizer's params argument, as torch.optim's: tensors, or parameter
// groups (dicts with "params" and optionally "lr" and "weight_decay").
std::vector<tg::optim::ParamGroup> param_groups(const py::object& params) {
  std::vector<tg::optim::ParamGroup> groups;
  std::vector<Tensor> plain;
  for (const py::handle& h : params) {
    if (py::isinstance<py::dict>(h)) {
      py::dict d = py::reinterpret_borrow<py::dict>(h);
      if (!d.contains("params")) throw tg::Error("optimizer: a parameter group needs \"params\"");
      tg::optim::ParamGroup g;
      g.params = tensor_list(d["params"]);
      auto number = [&](const char* k) {
        py::object v = d[k];
        if (!PyNumber_Check(v.ptr()) || py::isinstance<Tensor>(v))
          throw py::type_error(std::string("optimizer: a parameter group's \"") + k + "\" must be a number, got " +
                               py::str(py::type::of(v)).cast<std::string>());
        return py::float_(v).cast<double>();
      };
      if (d.contains("lr")) g.lr = number("lr");
      if (d.contains("weight_decay")) g.weight_decay = number("weight_decay");
      for (const auto& kv : d) {
        const std::string k = py::str(kv.first);
        if (k != "params" && k != "lr" && k != "weight_decay")
          throw tg::Error("optimizer: a parameter group sets params, lr and weight_decay only, got \"" + k + "\"");
      }
      groups.push_back(std::move(g));
    } else {
      if (!py::isinstance<Tensor>(h))
        throw py::type_error("optimizer: params must be tensors or parameter groups (dicts), got " +
                             py::str(py::type::of(h)).cast<std::string>());
      plain.push_back(h.cast<Tensor>());
    }
  }
  if (!groups.empty() && !plain.empty())
    throw tg::Error("optimizer: give tensors or parameter groups (dicts), not both");
  if (groups.empty()) groups.push_back(tg::optim::ParamGroup{plain, std::nullopt, std::nullopt});
  return groups;
}

// A state dict (optimizers', schedulers') as a Python dict of tensors, and back.
py::dict state_to_dict(const tg::optim::NamedTensors& state) {
  py::dict d;
  for (const auto& [k, v] : state)
    d[py::str(k)] = v;
  return d;
}
tg::optim::NamedTensors state_from_dict(const py::dict& d) {
  tg::optim::NamedTensors s;
  for (const auto& kv : d) {
    if (!py::isinstance<Tensor>(kv.second))
      throw py::type_error("load_state_dict: entry '" + py::str(kv.first).cast<std::string>() + "' is " +
                           py::str(py::type::of(kv.second)).cast<std::string>() +
                           "; a state dict maps names to tensors (give what state_dict() returned)");
    s.emplace_back(py::str(kv.first), kv.second.cast<Tensor>());
  }
  return s;
}

// step(closure=None) of an optimizer that needs no closure, as torch.optim's:
// the closure (if given) runs first with recording on, then the update; its
// loss is returned.
py::object step_with_closure(tg::optim::Optimizer& o, const py::object& closure) {
  py::object loss = py::none();
  if (!closure.is_none()) {
    ag::AutoGradMode grad(true);
    loss = closure();
  }
  o.step();
  return loss;
}

// `with tapegrad.cuda.graph(g):` — capture into g on a side stream.
struct GraphCapture {
  tg::cuda::CUDAGraph* graph;
  std::unique_ptr<tg::cuda::Graph> scope;
  tg::cuda::MempoolId pool{0, 0};
  std::optional<tg::cuda::Stream> stream;
};

// `with tapegrad.cuda.stream(s):` — s current for the scope (torch.cuda.stream).
struct StreamScope {
  std::optional<tg::cuda::Stream> stream;  // None: no change, as torch's stream(None)
  std::unique_ptr<tg::cuda::StreamGuard> guard;
};

// A graphed callable or function's result: one tensor, or a tuple of them
// (as the Python function returned at capture).
py::object graphed_result(const std::vector<Tensor>& out, bool single) {
  if (single && out.size() == 1) return py::cast(out[0]);
  py::tuple t(out.size());
  for (size_t i = 0; i < out.size(); ++i)
    t[i] = py::cast(out[i]);
  return t;
}

std::vector<Tensor> tensor_args(const py::args& args, const char* what) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!py::isinstance<Tensor>(args[i]))
      throw tg::Error(std::string(what) + ": argument " + std::to_string(i) + " is " +
                      py::str(py::type::of(args[i])).cast<std::string>() + "; pass tapegrad.Tensor arguments");
    xs.push_back(args[i].cast<Tensor>());
  }
  return xs;
}

tg::cuda::MempoolId pool_from(const py::object& pool) {
  if (pool.is_none()) return {0, 0};
  auto t = pool.cast<std::pair<uint64_t, uint64_t>>();
  return {t.first, t.second};
}

// A GraphedCallable with whether its function returned one tensor.
struct PyGraphedCallable {
  tg::cuda::GraphedCallable callable;
  bool single = true;
};

// A GraphedFunction; single as above, known after its first call.
struct PyGraphedFunction {
  std::shared_ptr<tg::cuda::GraphedFunction> function;
  std::shared_ptr<bool> single = std::make_shared<bool>(true);
};

}  // namespace

// The op lists' argument types as Python values (the generated bindings,
// ops_generated.inc): IntList from an int or a sequence of ints, Scalar from
// a Python or NumPy number (never a tensor: a Tensor overload goes first),
// ScalarType from a dtype name, a NumPy dtype or type, Device from "cpu",
// "cuda", "cuda:N".
namespace pybind11::detail {

template <> struct type_caster<tg::IntList> {
  PYBIND11_TYPE_CASTER(tg::IntList, const_name("Sequence[int]"));
  bool load(handle src, bool) {
    int64_t v = 0;
    if (hasattr(src, "__array_interface__") && hasattr(src, "tolist") && !isinstance<Tensor>(src)) {
      const std::string kind = src.attr("dtype").attr("kind").cast<std::string>();  // an ndarray of integers
      if (kind != "i" && kind != "u") return false;
      return load(src.attr("tolist")(), false);
    }
    if (PyIndex_Check(src.ptr()) && !PyBool_Check(src.ptr())) {
      if (!fits_int64(src, v)) return false;
      value = tg::IntList{v};
      return true;
    }
    if (!PySequence_Check(src.ptr()) || PyUnicode_Check(src.ptr()) || PyBytes_Check(src.ptr()) ||
        isinstance<Tensor>(src))
      return false;
    tg::IntList l;
    for (const handle& x : reinterpret_borrow<sequence>(src)) {
      if (!PyIndex_Check(x.ptr()) || PyBool_Check(x.ptr()) || !fits_int64(x, v)) return false;
      l.push_back(v);
    }
    value = std::move(l);
    return true;
  }
  static handle cast(const tg::IntList& l, return_value_policy, handle) {
    list out;
    for (int64_t v : l)
      out.append(v);
    return out.release();
  }
};

template <> struct type_caster<tg::Scalar> {
  PYBIND11_TYPE_CASTER(tg::Scalar, const_name("Number"));
  type_caster() : value(0.0) {}
  bool load(handle src, bool) {
    if (isinstance<Tensor>(src)) return false;
    std::optional<tg::Scalar> s = scalar_of(src, true, "tapegrad");
    if (!s) return false;
    value = *s;
    return true;
  }
  static handle cast(const tg::Scalar& v, return_value_policy, handle) {
    if (v.is_integral()) return PyLong_FromLongLong(static_cast<long long>(v.to_int()));
    return PyFloat_FromDouble(v.to_double());
  }
};

template <> struct type_caster<DtypeName> {
  PYBIND11_TYPE_CASTER(DtypeName, const_name("dtype"));
  bool load(handle src, bool) {
    if (PyUnicode_Check(src.ptr())) {
      value.name = src.cast<std::string>();
      return true;
    }
    module_ np = module_::import("numpy");
    if (!isinstance(src, np.attr("dtype")) && !PyType_Check(src.ptr())) return false;
    try {
      value.name = np.attr("dtype")(src).attr("name").cast<std::string>();
    } catch (error_already_set&) {
      return false;
    }
    return true;
  }
  static handle cast(const DtypeName& d, return_value_policy, handle) { return str(d.name).release(); }
};

template <> struct type_caster<tg::ScalarType> {
  PYBIND11_TYPE_CASTER(tg::ScalarType, const_name("dtype"));
  bool load(handle src, bool) {
    std::string name;
    if (PyUnicode_Check(src.ptr())) {
      name = src.cast<std::string>();
    } else {
      module_ np = module_::import("numpy");
      if (!isinstance(src, np.attr("dtype")) && !PyType_Check(src.ptr())) return false;
      try {
        name = np.attr("dtype")(src).attr("name").cast<std::string>();
      } catch (error_already_set&) {
        return false;
      }
    }
    value = dtype_from(name);  // an unknown name: tapegrad.Error listing the dtypes
    return true;
  }
  static handle cast(tg::ScalarType t, return_value_policy, handle) { return str(dtype_name(t)).release(); }
};

template <> struct type_caster<tg::Device> {
  PYBIND11_TYPE_CASTER(tg::Device, const_name("device"));
  bool load(handle src, bool) {
    if (!PyUnicode_Check(src.ptr())) return false;
    value = device_from(src.cast<std::string>());
    return true;
  }
  static handle cast(tg::Device d, return_value_policy, handle) { return str(device_name(d)).release(); }
};

}  // namespace pybind11::detail

namespace {
using tg::Device;
using tg::IntList;
using tg::Scalar;
using tg::ScalarType;
using tg::TensorPair;
using tg::TensorQuad;
using tg::TensorTriple;
#include "ops_generated.inc"
}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "tapegrad: higher-order autograd on CPU and CUDA (C++ engine)";
  g_error_type = py::register_exception<tg::Error>(m, "Error", PyExc_RuntimeError).ptr();

  py::class_<Tensor>(m, "Tensor")
      .def_property_readonly("shape",
                             [](const Tensor& t) { return py::tuple(py::cast(std::vector<int64_t>(t.sizes()))); })
      .def(
          "size",
          [](const Tensor& t, const py::object& d) -> py::object {
            if (d.is_none()) return py::tuple(py::cast(std::vector<int64_t>(t.sizes())));  // the shape
            return py::int_(t.size(int64_arg(d, "size", "dim", PyExc_IndexError)));
          },
          py::arg("dim") = py::none())
      .def_property_readonly("ndim", [](const Tensor& t) { return t.dim(); })
      .def("dim", [](const Tensor& t) { return t.dim(); })
      .def("numel", [](const Tensor& t) { return t.numel(); })
      .def(
          "stride",
          [](const Tensor& t, const py::object& d) -> py::object {
            if (d.is_none()) return py::tuple(py::cast(std::vector<int64_t>(t.strides())));  // a tuple, as torch's
            return py::int_(t.stride(int64_arg(d, "stride", "dim", PyExc_IndexError)));
          },
          py::arg("dim") = py::none())
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_name(t.dtype()); })
      .def_property_readonly("device", [](const Tensor& t) { return device_name(t.device()); })
      .def_property_readonly("is_cuda", [](const Tensor& t) { return t.is_cuda(); })
      .def_property_readonly("is_leaf", [](const Tensor& t) { return t.is_leaf(); })
      .def(
          "retain_grad", [](Tensor& t) { t.retain_grad(); },
          "Keep .grad of a non-leaf after backward (torch's retain_grad)")
      .def_property_readonly("retains_grad", [](const Tensor& t) { return t.retains_grad(); })
      .def(
          "register_hook", [](Tensor& t, const py::function& fn) { return t.register_hook(tensor_hook(fn)); },
          py::arg("hook"),
          "hook(grad) runs when this tensor's gradient is computed; a tensor it returns replaces the gradient. "
          "Returns a handle whose remove() unregisters it")
      .def_property_readonly(
          "grad_fn",
          [](const Tensor& t) -> py::object {
            if (t.is_leaf()) return py::none();
            return py::cast(t.grad_fn());
          },
          "The node that computed the tensor (None for a leaf)")
      .def_property(
          "requires_grad", [](const Tensor& t) { return t.requires_grad(); },
          [](Tensor& t, bool r) { t.requires_grad_(r); })
      .def_property(
          "grad",
          [](const Tensor& t) {  // None for a non-leaf, as PyTorch's (C++ throws there)
            return t.is_leaf() || t.retains_grad() ? or_none(t.grad()) : or_none(Tensor());
          },
          [](Tensor& t, const py::object& value) {  // t.grad = g or None, as PyTorch's checks
            if (!value.is_none() && !py::isinstance<Tensor>(value))
              throw py::type_error("grad: assigned grad expected to be a tapegrad.Tensor or None, got " +
                                   py::str(py::type::of(value)).cast<std::string>() +
                                   " (convert an ndarray with tapegrad.tensor(a, dtype=t.dtype))");
            const std::optional<Tensor> g =
                value.is_none() ? std::nullopt : std::optional<Tensor>(value.cast<Tensor>());
            if (!t.is_leaf() && !t.retains_grad())
              throw tg::Error(
                  "grad: only a leaf (or a tensor that retains its gradient) holds one; this tensor is "
                  "computed from others");
            if (g && g->is_same(t))
              throw tg::Error("grad: a tensor cannot be its own gradient (assign t.detach().clone())");
            if (g && (g->sizes() != t.sizes() || g->dtype() != t.dtype() || g->device() != t.device()))
              throw tg::Error("grad: the assigned gradient " + tg::shape_str(g->sizes()) + " " +
                              dtype_name(g->dtype()) + " on " + device_name(g->device()) + " must match the tensor, " +
                              tg::shape_str(t.sizes()) + " " + dtype_name(t.dtype()) + " on " +
                              device_name(t.device()));
            t.mutable_grad() = g ? *g : Tensor();
          })
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
      .def("item",  // int for Int64 (exact), bool for Bool, float otherwise (as PyTorch)
           [](const Tensor& t) -> py::object {
             if (t.dtype() == tg::kInt64) return py::int_(t.detach().item<int64_t>());
             if (t.dtype() == tg::kBool) return py::bool_(t.detach().item<bool>());
             if (tg::is_complex(t.dtype()))  // a Python complex, both parts (not the real part alone)
               return to_numpy(t.detach().to(tg::Device(tg::kCPU)).contiguous()).attr("item")();
             return py::float_(t.detach().to(tg::kFloat64).item<double>());
           })
      .def("tolist",
           [](const Tensor& t) {
             Tensor c = t.detach().to(tg::Device(tg::kCPU));
             if (t.dtype() != tg::kInt64 && t.dtype() != tg::kBool && !tg::is_complex(t.dtype()))
               c = c.to(tg::kFloat64);
             return to_numpy(c.contiguous()).attr("tolist")();
           })
      .def("numpy", &to_numpy)
      .def("cpu", [](const Tensor& t) { return t.to(tg::Device(tg::kCPU)); })
      .def(
          "cuda", [](const Tensor& t, int index) { return t.to(tg::Device(tg::kCUDA, index)); }, py::arg("device") = 0)
      .def("to",
           [](const Tensor& t, const std::string& what) {
             if (what.rfind("cpu", 0) == 0 || what.rfind("cuda", 0) == 0) return t.to(device_from(what));
             return t.to(dtype_from(what));
           })
      .def(
          "to", [](const Tensor& t, const Tensor& other) { return t.to(other.device(), other.dtype()); },
          py::arg("other"), "Converted to other's device and dtype (torch's to(other))")
      .def(
          "backward",
          [](const Tensor& t, const std::optional<Tensor>& gradient, std::optional<bool> retain_graph,
             bool create_graph, const py::object& inputs) {
            std::vector<Tensor> g;
            if (gradient) g.push_back(*gradient);
            const std::vector<Tensor> in = inputs.is_none() ? std::vector<Tensor>{} : tensor_list(inputs);
            py::gil_scoped_release nogil;  // the engine's workers may run Python hooks
            ag::backward({t}, g, retain_graph, create_graph, in);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = py::none(), py::arg("create_graph") = false,
          py::arg("inputs") = py::none(), "As torch's; inputs: accumulate into these tensors' .grad only")
      .def(
          "sum",
          [](const Tensor& t, const py::object& dim, bool keepdim) {
            return dim.is_none() ? tg::sum(t) : tg::sum(t, int_list(dim, "sum", "dim", PyExc_IndexError), keepdim);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(
          "mean",
          [](const Tensor& t, const py::object& dim, bool keepdim) {
            return dim.is_none() ? tg::mean(t) : tg::mean(t, int_list(dim, "mean", "dim", PyExc_IndexError), keepdim);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("reshape", [](const Tensor& t, const py::args& s) { return t.reshape(sizes_of(s, "reshape")); })
      .def("view", [](const Tensor& t, const py::args& s) { return t.view(sizes_of(s, "view")); })
      // torch's *sizes forms beside the generated sequence ones
      .def("expand", [](const Tensor& t, const py::args& s) { return t.expand(sizes_of(s, "expand")); })
      .def("permute", [](const Tensor& t, const py::args& s) { return t.permute(sizes_of(s, "permute")); })
      .def("repeat", [](const Tensor& t, const py::args& s) { return t.repeat(sizes_of(s, "repeat")); })
      .def("tile", [](const Tensor& t, const py::args& s) { return tg::tile(t, sizes_of(s, "tile")); })
      .def("transpose",
           [](const Tensor& t, const py::object& a, const py::object& b) {
             return t.transpose(int64_arg(a, "transpose", "dim", PyExc_IndexError),
                                int64_arg(b, "transpose", "dim", PyExc_IndexError));
           })
      .def_property_readonly("T", [](const Tensor& t) { return t.t(); })
      .def("select",
           [](const Tensor& t, const py::object& d, const py::object& i) {
             return t.select(int64_arg(d, "select", "dim", PyExc_IndexError),
                             int64_arg(i, "select", "index", PyExc_IndexError));
           })
      .def("narrow",
           [](const Tensor& t, const py::object& d, const py::object& s, const py::object& n) {
             return t.narrow(int64_arg(d, "narrow", "dim", PyExc_IndexError),
                             int64_arg(s, "narrow", "start", PyExc_IndexError), int64_arg(n, "narrow", "length"));
           })
      .def("fill_",
           [](Tensor& t, const py::object& v) {
             auto s = scalar_of(v, t.defined() && tg::is_floating_point(t.dtype()), "fill_");
             if (!s) throw py::type_error("fill_: the value must be a number (bool, int or float)");
             t.fill_(*s);
             return t;
           })
      .def("all", [](const Tensor& t) { return tg::all(t); })
      .def("any", [](const Tensor& t) { return tg::any(t); })
      // copy.deepcopy and pickle (the bytes, shape, dtype, device and
      // requires_grad; restored on the same device), as PyTorch's leaves.
      .def("__deepcopy__",
           [](const Tensor& t, const py::object&) {
             if (!t.is_leaf())
               throw tg::Error(
                   "deepcopy: only graph leaves (tensors made by the user) copy, as PyTorch's; use "
                   "t.detach().clone()");
             Tensor c = t.detach().clone();
             if (t.requires_grad()) c.requires_grad_(true);
             if (t.grad().defined()) c.mutable_grad() = t.grad().detach().clone();  // as PyTorch's: .grad too
             return c;
           })
      .def("__reduce__",
           [](const Tensor& t) {
             if (!t.is_leaf())
               throw tg::Error("pickle: only graph leaves (tensors made by the user) pickle; use t.detach()");
             const Tensor c = t.detach().to(tg::Device(tg::kCPU)).contiguous();
             const py::bytes data(static_cast<const char*>(c.data_ptr()),
                                  size_t(c.numel()) * tg::element_size(c.dtype()));
             return py::make_tuple(py::module_::import("tapegrad").attr("_rebuild_tensor"),
                                   py::make_tuple(data, std::vector<int64_t>(t.sizes()), dtype_name(t.dtype()),
                                                  device_name(t.device()), t.requires_grad()));
           })
      .def("__getitem__", &index_tensor)
      .def("__setitem__",
           [](Tensor& t, const py::object& key, const py::object& value) {
             if (has_negative_step(key))
               throw py::type_error(
                   "tapegrad assigns through no negative step (it gives a copy): flip the value and use the "
                   "positive-step slice of the same elements");
             const std::vector<py::object> items = key_items(key);
             // Index tensors, arrays, lists and masks: LibTorch's index_put_
             // (broadcast value, each position given once).
             const bool advanced = advanced_items(items) > 0;
             std::optional<Tensor> o;
             if (py::isinstance<Tensor>(value) || py::isinstance(value, py::module_::import("numpy").attr("ndarray"))) {
               o = as_operand(value, t, "__setitem__");
               if (tg::is_complex(o->dtype()) && !tg::is_complex(t.dtype()))
                 throw tg::Error("__setitem__: a complex value into a " + dtype_name(t.dtype()) +
                                 " tensor would drop its imaginary part");
             }
             std::optional<tg::Scalar> s;
             if (!o) {
               s = scalar_of(value, tg::is_floating_point(t.dtype()), "__setitem__");
               if (!s) throw py::type_error("__setitem__: the value must be a tensor, an ndarray or a number");
             }
             if (advanced) {
               const std::vector<tg::TensorIndex> idx = tensor_indices(t, items);
               if (o) t.index_put_(idx, *o);
               else t.index_put_(idx, *s);
               return;
             }
             Tensor v = index_tensor(t, key);
             if (o) v.copy_(o->sizes() == v.sizes() ? *o : o->expand(v.sizes()));
             else v.fill_(*s);
           })
      .def_property_readonly("__array_interface__", &array_interface)
      .def(
          "__array__",
          [](const Tensor& t, const py::object& dtype, const py::object& /*copy*/) {
            py::object a = to_numpy(t);
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def_property_readonly_static("__array_priority__", [](const py::object&) { return 1000; })
      .def("__bool__",  // as PyTorch: a one-element tensor's truth value, else an error
           [](const Tensor& t) {
             if (t.numel() != 1)
               throw tg::Error("bool(): the truth value of a tensor with " + std::to_string(t.numel()) +
                               " elements is ambiguous; use .any() or .all()");
             return t.detach().to(tg::kBool).item<bool>();
           })
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw tg::Error("len() of a 0-d tensor");
             return t.size(0);
           })
      .def("__add__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "add", [](const auto& x, const auto& y) { return x + y; });
           })
      .def("__radd__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "add", [](const auto& x, const auto& y) { return y + x; });
           })
      .def("__sub__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "sub", [](const auto& x, const auto& y) { return x - y; });
           })
      .def("__rsub__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "sub", [](const auto& x, const auto& y) { return y - x; });
           })
      .def("__mul__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "mul", [](const auto& x, const auto& y) { return x * y; });
           })
      .def("__rmul__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "mul", [](const auto& x, const auto& y) { return y * x; });
           })
      .def("__truediv__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "div", [](const auto& x, const auto& y) { return x / y; });
           })
      .def("__rtruediv__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "div", [](const auto& x, const auto& y) { return y / x; });
           })
      .def("__pow__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "pow", [](const auto& x, const auto& y) { return tg::pow(x, y); });
           })
      .def("__rpow__",
           [](const Tensor& a, const py::object& b) {
             return with_operand(a, b, "pow", [](const Tensor& x, const Tensor& y) { return tg::pow(y, x); });
           })
      .def("__mod__",
           [](const Tensor& a, const py::object& b) {  // Python's and torch's: the sign of the divisor
             return with_operand(a, b, "remainder",
                                 [](const Tensor& x, const Tensor& y) { return tg::remainder(x, y); });
           })
      .def("__rmod__",
           [](const Tensor& a, const py::object& b) {
             return with_operand(a, b, "remainder",
                                 [](const Tensor& x, const Tensor& y) { return tg::remainder(y, x); });
           })
      .def("__floordiv__",
           [](const Tensor& a, const py::object& b) {
             return with_operand(a, b, "floor_divide",
                                 [](const Tensor& x, const Tensor& y) { return floor_divide(x, y); });
           })
      .def("__rfloordiv__",
           [](const Tensor& a, const py::object& b) {
             return with_operand(a, b, "floor_divide",
                                 [](const Tensor& x, const Tensor& y) { return floor_divide(y, x); });
           })
      .def(
          "__divmod__",
          [](const Tensor& a, const py::object& b) {
            return py::make_tuple(
                with_operand(a, b, "floor_divide", [](const Tensor& x, const Tensor& y) { return floor_divide(x, y); }),
                with_operand(a, b, "remainder", [](const Tensor& x, const Tensor& y) { return tg::remainder(x, y); }));
          })
      .def("__pos__", [](const Tensor& a) { return a; })
      .def("__neg__", [](const Tensor& a) { return -a; })
      .def("__abs__", [](const Tensor& a) { return tg::abs(a); })
      .def("__float__", [](const Tensor& t) { return one_element(t, "float").to(tg::kFloat64).item<double>(); })
      .def("__int__",
           [](const Tensor& t) -> py::object {  // exact for Int64; a float truncates, NaN and inf raise (Python's)
             const Tensor e = one_element(t, "int");
             if (e.dtype() == tg::kInt64) return py::int_(e.item<int64_t>());
             if (e.dtype() == tg::kBool) return py::int_(int(e.item<bool>()));
             PyObject* r = PyLong_FromDouble(e.to(tg::kFloat64).item<double>());
             if (!r) throw py::error_already_set();
             return py::reinterpret_steal<py::object>(r);
           })
      // In-place operators on the same storage, returning the same object
      // (Python would otherwise rebind the name to a new tensor).
      .def("__iadd__", [](py::object self, const py::object& b) { return in_place(self, b, "add_", 0); })
      .def("__isub__", [](py::object self, const py::object& b) { return in_place(self, b, "sub_", 1); })
      .def("__imul__", [](py::object self, const py::object& b) { return in_place(self, b, "mul_", 2); })
      .def("__itruediv__", [](py::object self, const py::object& b) { return in_place(self, b, "div_", 3); })
      // **=, &=, |=, ^=: the result written back into the same storage (its
      // dtype must be the tensor's, as PyTorch's "can't be cast").
      .def("__ipow__",
           [](py::object self, const py::object& b) { return write_back(self, self.attr("__pow__")(b), "**="); })
      .def("__iand__",
           [](py::object self, const py::object& b) { return write_back(self, self.attr("__and__")(b), "&="); })
      .def("__ior__",
           [](py::object self, const py::object& b) { return write_back(self, self.attr("__or__")(b), "|="); })
      .def("__ixor__",
           [](py::object self, const py::object& b) { return write_back(self, self.attr("__xor__")(b), "^="); })
      // &, |, ^ and ~ of Bool tensors (logical, as PyTorch's on Bool).
      .def("__and__", [](const Tensor& a, const py::object& b) { return logical(a, b, "&", &tg::logical_and); })
      .def("__rand__", [](const Tensor& a, const py::object& b) { return logical(a, b, "&", &tg::logical_and); })
      .def("__or__", [](const Tensor& a, const py::object& b) { return logical(a, b, "|", &tg::logical_or); })
      .def("__ror__", [](const Tensor& a, const py::object& b) { return logical(a, b, "|", &tg::logical_or); })
      .def("__xor__", [](const Tensor& a, const py::object& b) { return logical(a, b, "^", &tg::logical_xor); })
      .def("__rxor__", [](const Tensor& a, const py::object& b) { return logical(a, b, "^", &tg::logical_xor); })
      .def("__invert__",
           [](const Tensor& a) {
             bool_operand(a, "~");
             return tg::logical_not(a);
           })
      .def("__rmatmul__", [](const Tensor& a, const py::object& b) { return tg::matmul(as_operand(b, a, "@"), a); })
      // Elementwise comparisons giving Bool tensors, as PyTorch's (the
      // reflected forms are Python's: 2 < t is t > 2).
      .def("__eq__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "eq", [](const auto& x, const auto& y) { return x == y; });
           })
      .def("__ne__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "ne", [](const auto& x, const auto& y) { return x != y; });
           })
      .def("__lt__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "lt", [](const auto& x, const auto& y) { return x < y; });
           })
      .def("__le__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "le", [](const auto& x, const auto& y) { return x <= y; });
           })
      .def("__gt__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "gt", [](const auto& x, const auto& y) { return x > y; });
           })
      .def("__ge__",
           [](const Tensor& a, const py::object& b) {
             return binary(a, b, "ge", [](const auto& x, const auto& y) { return x >= y; });
           })
      .def("__matmul__", [](const Tensor& a, const py::object& b) { return tg::matmul(a, as_operand(b, a, "@")); })
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
  // __eq__ compares elements, so a tensor hashes by identity (as PyTorch's):
  // tensors stay usable as dict keys and set members.
  m.attr("Tensor").attr("__hash__") = py::module_::import("builtins").attr("object").attr("__hash__");

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
        [f, name](const py::args& shape, const DtypeName& dtype, const std::string& device, bool requires_grad) {
          Tensor t = f(sizes_of(shape, name), options(dtype, device));
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
      [](const py::object& n, const DtypeName& dtype, const std::string& device) {
        return tg::eye(int64_arg(n, "eye", "size"), options(dtype, device));
      },
      py::arg("n"), py::arg("dtype") = "float32", py::arg("device") = "cpu");
  // full(shape, value): the dtype of the value's type where none is given
  // (bool, int64 or float32, as torch.full); ints exactly.
  m.def(
      "full",
      [](const py::object& shape, const py::object& value, const std::optional<DtypeName>& dtype,
         const std::string& device, bool requires_grad) {
        auto s = scalar_of(value, dtype && tg::is_floating_point(dtype_from(dtype->name)), "full");
        if (!s) throw py::type_error("full: the fill value must be a number (bool, int or float)");
        const tg::ScalarType dt = dtype                ? dtype_from(dtype->name)
                                  : !s->is_integral()  ? tg::kFloat32
                                  : is_bool_key(value) ? tg::kBool
                                                       : tg::kInt64;
        Tensor t = tg::full(int_list(shape, "full"), *s, options(dtype_name(dt), device));
        if (requires_grad) t.requires_grad_(true);
        return t;
      },
      py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = "cpu",
      py::arg("requires_grad") = false);
  factory("empty", [](const tg::IntList& s, tg::TensorOptions o) { return tg::empty(s, o); });
  // The *_like factories: t's shape, and its dtype and device unless given.
  auto like_options = [](const Tensor& t, const std::optional<DtypeName>& dtype,
                         const std::optional<std::string>& device) {
    return options(dtype ? dtype->name : dtype_name(t.dtype()), device ? *device : device_name(t.device()));
  };
  using Like = Tensor (*)(const Tensor&, tg::TensorOptions);
  for (auto [name, f] : std::initializer_list<std::pair<const char*, Like>>{
           {"zeros_like", [](const Tensor&t, tg::TensorOptions o) { return tg::zeros_like(t, o); }},
           {"ones_like", [](const Tensor&t, tg::TensorOptions o) { return tg::ones_like(t, o); }},
           {"empty_like", [](const Tensor&t, tg::TensorOptions o) { return tg::empty_like(t, o); }},
           {"rand_like", [](const Tensor&t, tg::TensorOptions o) { return tg::rand_like(t, o); }},
           {"randn_like", [](const Tensor&t, tg::TensorOptions o) { return tg::randn_like(t, o); }}})
    m.def(
        name,
        [f = f, like_options](const Tensor& t, const std::optional<DtypeName>& dtype,
                              const std::optional<std::string>& device, bool requires_grad) {
          Tensor r = f(t, like_options(t, dtype, device));
          if (requires_grad) r.requires_grad_(true);
          return r;
        },
        py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("requires_grad") = false);
  m.def(
      "full_like",
      [like_options](const Tensor& t, const py::object& value, const std::optional<DtypeName>& dtype,
                     const std::optional<std::string>& device, bool requires_grad) {
        const tg::TensorOptions o = like_options(t, dtype, device);
        auto s = scalar_of(value, tg::is_floating_point(o.dtype()), "full_like");
        if (!s) throw py::type_error("full_like: the fill value must be a number (bool, int or float)");
        Tensor r = tg::full_like(t, *s, o);
        if (requires_grad) r.requires_grad_(true);
        return r;
      },
      py::arg("input"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none(), py::arg("requires_grad") = false);
  // arange(end) / arange(start, end, step), as torch.arange: Int64 when every
  // bound is an integer and no dtype is given, else float32.
  m.def(
      "arange",
      [](const py::object& start, const py::object& end, const py::object& step, const std::optional<DtypeName>& dtype,
         const std::string& device, bool requires_grad) {
        const bool ints = is_integer_key(start) && (end.is_none() || is_integer_key(end)) && is_integer_key(step);
        const std::string dt = dtype ? dtype->name : ints ? "int64" : "float32";
        const bool fl = tg::is_floating_point(dtype_from(dt));
        auto number = [&](const py::object& v) {
          auto s = scalar_of(v, fl || !ints, "arange");
          if (!s) throw py::type_error("arange: the bounds and the step must be numbers");
          return *s;
        };
        Tensor t = end.is_none() ? tg::arange(number(start), options(dt, device))
                                 : tg::arange(number(start), number(end), number(step), options(dt, device));
        if (requires_grad) t.requires_grad_(true);
        return t;
      },
      py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1, py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("device") = "cpu", py::arg("requires_grad") = false);
  m.def(
      "linspace",
      [](double start, double end, int64_t steps, const DtypeName& dtype, const std::string& device,
         bool requires_grad) {
        Tensor t = tg::linspace(start, end, steps, options(dtype, device));
        if (requires_grad) t.requires_grad_(true);
        return t;
      },
      py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(), py::arg("dtype") = "float32",
      py::arg("device") = "cpu", py::arg("requires_grad") = false);
  // randint(high, size) / randint(low, high, size), as torch.randint.
  m.def(
      "randint",
      [](int64_t a, const py::object& b, const py::object& c, const DtypeName& dtype, const std::string& device) {
        if (b.is_none() && c.is_none()) throw py::type_error("randint: give (high, size) or (low, high, size)");
        if (c.is_none() && PyIndex_Check(b.ptr()))
          throw py::type_error("randint(" + std::to_string(a) + ", " + py::str(b).cast<std::string>() +
                               "): the size is missing (a tuple): randint(low, high, size) or randint(high, size), "
                               "as torch.randint");
        if (c.is_none()) return tg::randint(a, int_list(b, "randint"), options(dtype, device));  // (high, size)
        if (b.is_none()) return tg::randint(a, int_list(c, "randint"), options(dtype, device));  // (high, size=...)
        return tg::randint(a, int64_arg(b, "randint", "high"), int_list(c, "randint"), options(dtype, device));
      },
      py::arg("low"), py::arg("high") = py::none(), py::arg("size") = py::none(), py::kw_only(),
      py::arg("dtype") = "int64", py::arg("device") = "cpu");
  m.def(
      "randperm",
      [](int64_t n, const DtypeName& dtype, const std::string& device) {
        return tg::randperm(n, options(dtype, device));
      },
      py::arg("n"), py::kw_only(), py::arg("dtype") = "int64", py::arg("device") = "cpu");
  m.def("get_rng_state", &tg::get_rng_state,
        "The generator's state (a CPU Int64 tensor [2]: seed, offset); one generator serves every device");
  m.def("set_rng_state", &tg::set_rng_state, py::arg("new_state"));
  m.def(
      "manual_seed",
      [](const py::int_& seed) {
        // torch's range: [-2^63, 2^64); a negative seed is taken modulo 2^64
        unsigned long long u = PyLong_AsUnsignedLongLong(seed.ptr());
        if (PyErr_Occurred()) {
          PyErr_Clear();
          const long long v = PyLong_AsLongLong(seed.ptr());
          if (PyErr_Occurred()) {
            PyErr_Clear();
            raise(PyExc_ValueError,
                  "manual_seed: the seed must be in [-2**63, 2**64), got " + py::repr(seed).cast<std::string>());
          }
          u = static_cast<unsigned long long>(v);
        }
        tg::manual_seed(uint64_t(u));
      },
      py::arg("seed"), "Seeds the one generator of every device (a negative seed modulo 2**64, as torch's)");
  m.def(
      "_rebuild_tensor",
      [](const py::bytes& data, const std::vector<int64_t>& shape, const std::string& dtype, const std::string& device,
         bool requires_grad) {
        const std::string bytes = data;  // an untrusted pickle: its sizes are checked against the bytes
        Tensor c = tg::empty(tg::IntList(shape), options(dtype, "cpu"));
        if (size_t(c.numel()) * tg::element_size(c.dtype()) != bytes.size())
          throw tg::Error("unpickle: " + std::to_string(bytes.size()) + " bytes for a " + dtype + " tensor " +
                          tg::shape_str(c.sizes()));
        if (c.dtype() == tg::kBool)
          for (char b : bytes)
            if (b != 0 && b != 1) throw tg::Error("unpickle: a Bool tensor's bytes must be 0 or 1");
        if (!bytes.empty()) std::memcpy(c.data_ptr(), bytes.data(), bytes.size());
        Tensor t = c.to(device_from(device));
        if (requires_grad) t.requires_grad_(true);
        return t;
      },
      "Rebuilds a pickled tensor (Tensor.__reduce__)");

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
        return dim.is_none() ? tg::sum(t) : tg::sum(t, int_list(dim, "sum", "dim", PyExc_IndexError), keepdim);
      },
      py::arg("x"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def(
      "mean",
      [](const Tensor& t, const py::object& dim, bool keepdim) {
        return dim.is_none() ? tg::mean(t) : tg::mean(t, int_list(dim, "mean", "dim", PyExc_IndexError), keepdim);
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
  py::class_<tg::HookHandle>(m, "RemovableHandle", "A hook's handle (torch.utils.hooks.RemovableHandle)")
      .def("remove", &tg::HookHandle::remove, "Unregisters the hook (once)");
  py::class_<ag::Node, std::shared_ptr<ag::Node>>(m, "Node", "A recorded op's backward (a tensor's grad_fn)")
      .def("name", &ag::Node::name)
      .def_property_readonly("next_functions",
                             [](const ag::Node& n) {
                               py::list out;
                               for (const ag::Edge& e : n.next_edges())
                                 out.append(py::make_tuple(e.function ? py::cast(e.function) : py::none(), e.input_nr));
                               return py::tuple(out);
                             })
      .def("__repr__", [](const ag::Node& n) { return "<" + n.name() + ">"; });
  m.def(
      "grad",
      [](const py::object& outputs, const py::object& inputs, const py::object& grad_outputs,
         std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
        std::vector<Tensor> gos = grad_outputs.is_none() ? std::vector<Tensor>{} : tensor_list(grad_outputs);
        std::vector<Tensor> outs = tensor_list(outputs), ins = tensor_list(inputs), g;
        {
          py::gil_scoped_release nogil;  // the engine's workers may run Python hooks
          g = ag::grad(outs, ins, gos, retain_graph, create_graph, allow_unused);
        }
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
      [](const py::object& tensors, const py::object& grad_tensors, std::optional<bool> retain_graph, bool create_graph,
         const py::object& inputs) {
        std::vector<Tensor> ts = tensor_list(tensors),
                            gs = grad_tensors.is_none() ? std::vector<Tensor>{} : tensor_list(grad_tensors);
        const std::vector<Tensor> in = inputs.is_none() ? std::vector<Tensor>{} : tensor_list(inputs);
        py::gil_scoped_release nogil;  // the engine's workers may run Python hooks
        ag::backward(ts, gs, retain_graph, create_graph, in);
      },
      py::arg("tensors"), py::arg("grad_tensors") = py::none(), py::arg("retain_graph") = py::none(),
      py::arg("create_graph") = false, py::arg("inputs") = py::none());
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
        return calling_python(fn,
                              [&](const ag::TensorFn& f) { return ag::jacobian(f, x, create_graph, mode_from(mode)); });
      },
      py::arg("fn"), py::arg("x"), py::arg("create_graph") = false, py::arg("mode") = "reverse");
  m.def(
      "hessian",
      [](const py::function& fn, const Tensor& x, bool create_graph, const std::string& mode) {
        return calling_python(fn,
                              [&](const ag::TensorFn& f) { return ag::hessian(f, x, create_graph, mode_from(mode)); });
      },
      py::arg("fn"), py::arg("x"), py::arg("create_graph") = false, py::arg("mode") = "reverse");
  // vjp, jvp, hvp: {fn(x), the product with v}.
  using Product = std::pair<Tensor, Tensor> (*)(const ag::TensorFn&, const Tensor&, const Tensor&, bool);
  for (auto [name, product] :
       std::initializer_list<std::pair<const char*, Product>>{{"vjp", &ag::vjp}, {"jvp", &ag::jvp}, {"hvp", &ag::hvp}})
    m.def(
        name,
        [product = product](const py::function& fn, const Tensor& x, const Tensor& v, bool create_graph) {
          return calling_python(fn, [&](const ag::TensorFn& f) { return product(f, x, v, create_graph); });
        },
        py::arg("fn"), py::arg("x"), py::arg("v"), py::arg("create_graph") = false);
  m.def(
      "per_sample_hessian",
      [](const py::function& fn, const Tensor& x, const std::string& strategy, bool create_graph) {
        return calling_python(fn, [&](const ag::TensorFn& f) {
          return ag::per_sample_hessian(f, x, strategy_from(strategy), create_graph);
        });
      },
      py::arg("fn"), py::arg("x"), py::arg("strategy") = "batched_cotangents", py::arg("create_graph") = false);
  m.def(
      "laplacian",
      [](const py::function& fn, const Tensor& x, bool create_graph, std::optional<int64_t> samples,
         const std::string& directions, bool return_variance) -> py::object {
        if (!samples) {
          if (return_variance)
            throw tg::Error("laplacian: return_variance needs samples (the exact Laplacian has no variance)");
          return py::cast(calling_python(fn, [&](const ag::TensorFn& f) { return ag::laplacian(f, x, create_graph); }));
        }
        if (directions != "rademacher" && directions != "gaussian")
          throw tg::Error("laplacian: directions is \"rademacher\" or \"gaussian\", got \"" + directions + "\"");
        const ag::Directions d = directions == "gaussian" ? ag::Directions::Gaussian : ag::Directions::Rademacher;
        ag::Estimate e = calling_python(fn, [&](const ag::TensorFn& f) {
          return ag::laplacian_estimate(f, x, *samples, d, create_graph, return_variance);
        });
        if (return_variance) return py::make_tuple(e.value, e.variance);
        return py::cast(e.value);
      },
      py::arg("fn"), py::arg("x"), py::arg("create_graph") = false, py::arg("samples") = py::none(),
      py::arg("directions") = "rademacher", py::arg("return_variance") = false,
      "Per-sample Laplacians of fn [B, n] -> [B, m]: exact (Taylor mode), or with samples=k Hutchinson's "
      "unbiased estimate over k random directions per sample (rademacher or gaussian; return_variance: also the "
      "estimate's variance)");

  m.def(
      "derivative_operator",
      [](const py::function& fn, const Tensor& x, const py::list& terms, bool create_graph,
         std::optional<int64_t> samples) {
        std::vector<ag::Partial> parts;
        for (const py::handle& t : terms) {
          ag::Partial p;
          if (py::isinstance<py::tuple>(t) && py::len(t) == 2 && !py::isinstance<py::int_>(t[py::int_(0)])) {
            p.dims = t[py::int_(0)].cast<std::vector<int64_t>>();
            p.coefficient = t[py::int_(1)].cast<double>();
          } else {
            p.dims = t.cast<std::vector<int64_t>>();
          }
          parts.push_back(std::move(p));
        }
        return calling_python(fn, [&](const ag::TensorFn& f) {
          return samples ? ag::derivative_operator_estimate(f, x, parts, *samples, create_graph)
                         : ag::derivative_operator(f, x, parts, create_graph);
        });
      },
      py::arg("fn"), py::arg("x"), py::arg("terms"), py::arg("create_graph") = false, py::arg("samples") = py::none(),
      "sum of coefficient * d^k fn / dx_dims per sample: terms are (dims, coefficient) pairs or dims lists "
      "(coefficient 1), e.g. [([0, 0], 1.0), ([1, 1], 1.0)] for the 2-D Laplacian; samples=k: the unbiased "
      "estimate from k of the terms drawn without replacement, scaled by len(terms) / k");

  // CUDA.
  py::module_ cuda = m.def_submodule("cuda", "CUDA devices, streams and graphs");
  cuda.def("is_available", &tg::cuda::is_available);
  cuda.def("device_count", &tg::cuda::device_count);
  cuda.def(
      "synchronize", [](int device) { tg::cuda::synchronize(device); }, py::arg("device") = -1);
  py::class_<tg::cuda::CUDAGraph>(cuda, "CUDAGraph")
      .def(py::init<bool>(), py::arg("keep_graph") = false)
      .def("replay", &tg::cuda::CUDAGraph::replay)
      .def("reset", &tg::cuda::CUDAGraph::reset)
      .def("pool", &tg::cuda::CUDAGraph::pool,
           "The memory pool of its capture, to share with another graph (graph(g2, pool=g1.pool()))");
  cuda.def("graph_pool_handle", &tg::cuda::graph_pool_handle,
           "A new memory pool id for captures to share (torch.cuda.graph_pool_handle)");
  cuda.def(
      "register_static", [](const Tensor& t, const std::string& name) { tg::cuda::register_static(t, name); },
      py::arg("tensor"), py::arg("name"),
      "Marks a tensor a graph reads and writes in place across replays (parameters, their .grad, optimizer state): "
      "a replay after it or its .grad moved raises, naming it (docs/GRAPHS.md \"Static tensors\")");
  cuda.def(
      "unregister_static", [](const Tensor& t) { tg::cuda::unregister_static(t); }, py::arg("tensor"));
  cuda.def(
      "is_current_stream_capturing", [] { return tg::cuda::is_current_stream_capturing(); },
      "Whether this thread's current stream is being captured");
  py::class_<GraphCapture>(cuda, "graph")
      .def(py::init([](tg::cuda::CUDAGraph& g, const py::object& pool, const std::optional<tg::cuda::Stream>& stream) {
             return GraphCapture{&g, nullptr, pool_from(pool), stream};
           }),
           py::arg("cuda_graph"), py::arg("pool") = py::none(), py::arg("stream") = py::none(), py::keep_alive<1, 2>(),
           "Captures the scope into cuda_graph on a side stream (or `stream`), allocating from `pool` (a pool id: "
           "another graph's pool() or graph_pool_handle(); None: a new one)")
      .def("__enter__",
           [](GraphCapture& c) { c.scope = std::make_unique<tg::cuda::Graph>(*c.graph, c.pool, c.stream); })
      .def("__exit__", [](GraphCapture& c, const py::args&) { c.scope.reset(); });

  // Streams, as torch.cuda's: Stream() from the device's pool,
  // current_stream(), `with stream(s):`, wait_stream; int(s) is the cudaStream_t.
  py::class_<tg::cuda::Stream>(cuda, "Stream", "A CUDA stream (Stream(): one from the device's pool of streams)")
      .def(py::init([](int device) { return tg::cuda::stream_from_pool(device); }), py::arg("device") = -1)
      .def_property_readonly(
          "cuda_stream", [](const tg::cuda::Stream& st) { return reinterpret_cast<uintptr_t>(st.handle()); },
          "Its cudaStream_t, as an int (0: the legacy default stream)")
      .def_property_readonly("device",
                             [](const tg::cuda::Stream& st) { return "cuda:" + std::to_string(st.device_index()); })
      .def("wait_stream", &tg::cuda::Stream::wait_stream, py::arg("stream"),
           "This stream waits (on the device) for the work queued on `stream` so far")
      .def("synchronize", &tg::cuda::Stream::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("query", &tg::cuda::Stream::query)
      .def("__int__", [](const tg::cuda::Stream& st) { return reinterpret_cast<uintptr_t>(st.handle()); })
      .def("__index__", [](const tg::cuda::Stream& st) { return reinterpret_cast<uintptr_t>(st.handle()); })
      .def(
          "__eq__", [](const tg::cuda::Stream& a, const tg::cuda::Stream& b) { return a == b; }, py::is_operator())
      .def("__hash__",
           [](const tg::cuda::Stream& st) {
             return py::hash(py::make_tuple(st.device_index(), reinterpret_cast<uintptr_t>(st.handle())));
           })
      .def("__repr__", [](const tg::cuda::Stream& st) {
        std::ostringstream o;
        o << "<tapegrad.cuda.Stream device=cuda:" << st.device_index() << " cuda_stream=0x" << std::hex
          << reinterpret_cast<uintptr_t>(st.handle()) << ">";
        return o.str();
      });
  cuda.def(
      "current_stream", [](int device) { return tg::cuda::current_stream(device); }, py::arg("device") = -1,
      "This thread's current stream of `device` (a Stream; int() of it is the cudaStream_t, 0: the legacy default "
      "stream)");
  cuda.def(
      "default_stream", [](int device) { return tg::cuda::default_stream(device); }, py::arg("device") = -1);
  cuda.def(
      "set_stream", [](const tg::cuda::Stream& st) { tg::cuda::set_current_stream(st); }, py::arg("stream"),
      "Makes `stream` current on its device for this thread");
  cuda.def(
      "set_stream",
      [](uintptr_t handle, int device) {
        tg::cuda::set_current_stream(tg::cuda::Stream(device, reinterpret_cast<void*>(handle)));
      },
      py::arg("stream"), py::arg("device") = 0, "Makes a cudaStream_t (an int) the current stream of `device`");
  py::class_<StreamScope>(cuda, "stream", "with stream(s): s is the current stream inside (torch.cuda.stream)")
      .def(py::init([](const std::optional<tg::cuda::Stream>& st) {
             return StreamScope{st, nullptr};
           }),
           py::arg("stream"))
      .def("__enter__",
           [](StreamScope& c) {
             if (c.stream) c.guard = std::make_unique<tg::cuda::StreamGuard>(*c.stream);
             return c.stream;
           })
      .def("__exit__", [](StreamScope& c, const py::args&) { c.guard.reset(); });

  // Graphed callables (python/tapegrad/__init__.py's make_graphed_callables
  // and graphed wrap these).
  py::class_<PyGraphedCallable>(cuda, "GraphedCallable",
                                "A function or module whose forward and derivatives replay CUDA graphs")
      .def("__call__",
           [](const PyGraphedCallable& g, const py::args& args) {
             std::vector<Tensor> xs = tensor_args(args, g.callable.name().c_str());
             std::vector<Tensor> out;
             {
               py::gil_scoped_release nogil;
               out = g.callable(xs);
             }
             return graphed_result(out, g.single);
           })
      .def_property_readonly("name", [](const PyGraphedCallable& g) { return g.callable.name(); })
      .def_readwrite("_single", &PyGraphedCallable::single)
      .def(
          "replays", [](const PyGraphedCallable& g, int level) { return g.callable.replays(level); },
          py::arg("level") = 0, "How many times the graphs of derivative order `level` (0: forward) replayed");
  cuda.def(
      "_make_graphed_callables",
      [](const py::list& fns, const py::list& params, const py::list& names, const py::list& samples, int max_order,
         int warmup_iters, const py::object& pool, int max_calls_per_level) {
        std::vector<tg::cuda::Callable> cs;
        std::vector<std::vector<Tensor>> sample_args;
        for (size_t i = 0; i < fns.size(); ++i) {
          cs.emplace_back(tensors_fn(fns[i].cast<py::function>()), tensor_list(params[i]),
                          names[i].cast<std::string>());
          sample_args.push_back(tensor_list(samples[i]));
        }
        tg::cuda::GraphedOptions o;
        o.max_order = max_order;
        o.warmup_iters = warmup_iters;
        o.pool = pool_from(pool);
        o.max_calls_per_level = max_calls_per_level;
        // the GIL released: the engine's workers may run Python hooks
        std::vector<tg::cuda::GraphedCallable> made = run_released(cs, [&](const std::vector<tg::cuda::Callable>& c) {
          return tg::cuda::make_graphed_callables(c, std::move(sample_args), o);  // copies share the handles
        });
        py::list out;
        for (const tg::cuda::GraphedCallable& g : made)
          out.append(PyGraphedCallable{g});  // _single set by the caller, once known
        return out;
      },
      py::arg("fns"), py::arg("params"), py::arg("names"), py::arg("samples"), py::arg("max_order"),
      py::arg("warmup_iters"), py::arg("pool"), py::arg("max_calls_per_level"));
  py::class_<PyGraphedFunction>(cuda, "GraphedFunction",
                                "A function of CUDA tensors recorded as a CUDA graph per input signature and replayed")
      .def(py::init([](const py::function& fn, int max_re_records, const py::object& pool, const std::string& name) {
             tg::cuda::GraphedFunctionOptions o;
             o.max_re_records = max_re_records;
             o.pool = pool_from(pool);
             o.name = name;
             PyGraphedFunction g;
             // Records whether fn returned one tensor (the result's shape in Python).
             py::function wrapped = py::cpp_function([fn, single = g.single](const py::args& args) {
               py::object r = fn(*args);
               *single = py::isinstance<Tensor>(r);
               return r;
             });
             g.function = std::make_shared<tg::cuda::GraphedFunction>(tensors_fn(wrapped), o);
             return g;
           }),
           py::arg("fn"), py::arg("max_re_records") = 8, py::arg("pool") = py::none(), py::arg("name") = "function")
      .def("__call__",
           [](PyGraphedFunction& g, const py::args& args) {
             std::vector<Tensor> xs = tensor_args(args, "graphed");
             std::vector<Tensor> out = raising_callback_errors([&] { return (*g.function)(xs); });
             return graphed_result(out, *g.single);
           })
      .def("pool", [](const PyGraphedFunction& g) { return g.function->pool(); })
      .def("counters", [](const PyGraphedFunction& g) {
        const tg::cuda::GraphedFunctionCounters& c = g.function->counters();
        py::dict d;
        d["warmups"] = c.warmups;
        d["recordings"] = c.recordings;
        d["replays"] = c.replays;
        d["re_records"] = c.re_records;
        d["eager_calls"] = c.eager_calls;
        d["eager_reasons"] = c.eager_reasons;
        return d;
      });

  // The C++ layers under tapegrad.nn (python/tapegrad/nn.py wraps them in
  // its Module): LibTorch's initialization, the C++ forward; and the losses.
  py::module_ nnm = m.def_submodule("_nn", "The C++ layers and losses behind tapegrad.nn");
  namespace tn = tg::nn;
  py::class_<tn::Module, std::shared_ptr<tn::Module>>(nnm, "Native", "A C++ nn module")
      .def("forward", [](tn::Module& mod, const Tensor& x) { return mod.forward(x); })
      .def("named_parameters", [](const tn::Module& mod) { return mod.named_parameters(true); })
      .def("named_buffers", [](const tn::Module& mod) { return mod.named_buffers(true); })
      .def(
          "train", [](tn::Module& mod, bool on) { mod.train(on); }, py::arg("mode") = true)
      .def("to",
           [](tn::Module& mod, const std::string& what) {
             if (what == "cpu" || what.rfind("cuda", 0) == 0) mod.to(device_from(what));
             else mod.to(dtype_from(what));
           })
      .def("extra_repr", &tn::Module::extra_repr);
  nnm.def(
      "linear",
      [](int64_t in, int64_t out, bool bias) -> std::shared_ptr<tn::Module> {
        return std::make_shared<tn::LinearImpl>(in, out, bias);
      },
      py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true);
  nnm.def(
      "conv",
      [](int n, int64_t in, int64_t out, const IntList& k, const IntList& stride, const IntList& padding,
         const IntList& dilation, int64_t groups, bool bias, const std::string& mode) -> std::shared_ptr<tn::Module> {
        if (n == 1)
          return std::make_shared<tn::ConvNdImpl<1>>(in, out, k, stride, padding, dilation, groups, bias, mode);
        if (n == 2)
          return std::make_shared<tn::ConvNdImpl<2>>(in, out, k, stride, padding, dilation, groups, bias, mode);
        if (n == 3)
          return std::make_shared<tn::ConvNdImpl<3>>(in, out, k, stride, padding, dilation, groups, bias, mode);
        throw tg::Error("conv: 1, 2 or 3 spatial dims, got " + std::to_string(n));
      },
      py::arg("n"), py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride"),
      py::arg("padding"), py::arg("dilation"), py::arg("groups"), py::arg("bias"), py::arg("padding_mode"));
  nnm.def(
      "group_norm",
      [](int64_t groups, int64_t channels, double eps, bool affine) -> std::shared_ptr<tn::Module> {
        return std::make_shared<tn::GroupNormImpl>(groups, channels, eps, affine);
      },
      py::arg("num_groups"), py::arg("num_channels"), py::arg("eps"), py::arg("affine"));
  nnm.def(
      "layer_norm",
      [](const IntList& shape, double eps, bool affine) -> std::shared_ptr<tn::Module> {
        return std::make_shared<tn::LayerNormImpl>(shape, eps, affine);
      },
      py::arg("normalized_shape"), py::arg("eps"), py::arg("elementwise_affine"));
  nnm.def(
      "dropout", [](double p) -> std::shared_ptr<tn::Module> { return std::make_shared<tn::DropoutImpl>(p); },
      py::arg("p"));
  nnm.def(
      "conv_transpose",
      [](int n, int64_t in, int64_t out, const IntList& k, const IntList& stride, const IntList& padding,
         const IntList& output_padding, int64_t groups, bool bias, const IntList& dilation,
         const std::string& mode) -> std::shared_ptr<tn::Module> {
        if (mode != "zeros")
          throw tg::Error("ConvTranspose" + std::to_string(n) + "d: only padding_mode=\"zeros\" (as PyTorch), got \"" +
                          mode + "\"");
        if (n == 1)
          return std::make_shared<tn::ConvTranspose1dImpl>(in, out, k, stride, padding, output_padding, groups, bias,
                                                           dilation);
        if (n == 2)
          return std::make_shared<tn::ConvTranspose2dImpl>(in, out, k, stride, padding, output_padding, groups, bias,
                                                           dilation);
        if (n == 3)
          return std::make_shared<tn::ConvTranspose3dImpl>(in, out, k, stride, padding, output_padding, groups, bias,
                                                           dilation);
        throw tg::Error("conv_transpose: 1, 2 or 3 spatial dims, got " + std::to_string(n));
      },
      py::arg("n"), py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride"),
      py::arg("padding"), py::arg("output_padding"), py::arg("groups"), py::arg("bias"), py::arg("dilation"),
      py::arg("padding_mode"));
  nnm.def(
      "batch_norm",
      [](int n, int64_t features, double eps, double momentum, bool affine, bool track) -> std::shared_ptr<tn::Module> {
        if (n == 1) return std::make_shared<tn::BatchNorm1dImpl>(features, eps, momentum, affine, track);
        if (n == 2) return std::make_shared<tn::BatchNorm2dImpl>(features, eps, momentum, affine, track);
        if (n == 3) return std::make_shared<tn::BatchNorm3dImpl>(features, eps, momentum, affine, track);
        throw tg::Error("batch_norm: 1, 2 or 3 spatial dims, got " + std::to_string(n));
      },
      py::arg("n"), py::arg("num_features"), py::arg("eps"), py::arg("momentum"), py::arg("affine"),
      py::arg("track_running_stats"));
  nnm.def(
      "instance_norm",
      [](int n, int64_t features, double eps, double momentum, bool affine, bool track) -> std::shared_ptr<tn::Module> {
        if (n == 1) return std::make_shared<tn::InstanceNorm1dImpl>(features, eps, momentum, affine, track);
        if (n == 2) return std::make_shared<tn::InstanceNorm2dImpl>(features, eps, momentum, affine, track);
        if (n == 3) return std::make_shared<tn::InstanceNorm3dImpl>(features, eps, momentum, affine, track);
        throw tg::Error("instance_norm: 1, 2 or 3 spatial dims, got " + std::to_string(n));
      },
      py::arg("n"), py::arg("num_features"), py::arg("eps"), py::arg("momentum"), py::arg("affine"),
      py::arg("track_running_stats"));
  nnm.def(
      "embedding",
      [](int64_t num, int64_t dim, std::optional<int64_t> padding_idx, std::optional<double> max_norm, double norm_type,
         bool sparse) -> std::shared_ptr<tn::Module> {
        return std::make_shared<tn::EmbeddingImpl>(num, dim, sparse, tg::TensorOptions(), padding_idx, max_norm,
                                                   norm_type);
      },
      py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("padding_idx"), py::arg("max_norm"),
      py::arg("norm_type"), py::arg("sparse"));
  nnm.def(
      "spectral_conv",
      [](int n, int64_t in, int64_t out, const IntList& modes) -> std::shared_ptr<tn::Module> {
        if (n == 1 && modes.size() == 1) return std::make_shared<tn::SpectralConv1dImpl>(in, out, modes[0]);
        if (n == 2 && modes.size() == 2) return std::make_shared<tn::SpectralConv2dImpl>(in, out, modes[0], modes[1]);
        throw tg::Error("SpectralConv" + std::to_string(n) + "d: give " + std::to_string(n) + " mode count(s), got " +
                        tg::shape_str(modes));
      },
      py::arg("n"), py::arg("in_channels"), py::arg("out_channels"), py::arg("modes"));
  nnm.def(
      "fno",
      [](int64_t in, int64_t out, int64_t width, const IntList& modes, int64_t layers,
         int64_t projection) -> std::shared_ptr<tn::Module> {
        tn::FNOOptions o;
        o.in_channels = in;
        o.out_channels = out;
        o.width = width;
        o.modes = modes;
        o.layers = layers;
        o.projection = projection;
        return std::make_shared<tn::FNOImpl>(o);
      },
      py::arg("in_channels"), py::arg("out_channels"), py::arg("width"), py::arg("modes"), py::arg("layers"),
      py::arg("projection"));
  nnm.def(
      "unet2d",
      [](int64_t in, int64_t out, const std::vector<int64_t>& channels, int64_t groups) -> std::shared_ptr<tn::Module> {
        return std::make_shared<tn::UNet2dImpl>(in, out, channels, groups);
      },
      py::arg("in_channels"), py::arg("out_channels"), py::arg("channels"), py::arg("groups"));
  nnm.def(
      "fourier_features",
      [](int64_t in, int64_t num, double sigma, bool trainable) -> std::shared_ptr<tn::Module> {
        return std::make_shared<tn::FourierFeaturesImpl>(in, num, sigma, trainable);
      },
      py::arg("in_features"), py::arg("num_features"), py::arg("sigma"), py::arg("trainable"));
  // tapegrad.nn.init's C++ side (torch.nn.init's names; in place, no recording).
  namespace ti = tg::nn::init;
  nnm.def("calculate_gain", &ti::calculate_gain, py::arg("nonlinearity"), py::arg("param") = 0.01);
  // Each returns its tensor (the same Python object), as torch's.
  nnm.def(
      "uniform_",
      [](py::object t, double a, double b) {
        ti::uniform_(t.cast<const Tensor&>(), a, b);
        return t;
      },
      py::arg("tensor"), py::arg("a") = 0.0, py::arg("b") = 1.0);
  nnm.def(
      "normal_",
      [](py::object t, double mean, double std) {
        ti::normal_(t.cast<const Tensor&>(), mean, std);
        return t;
      },
      py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0);
  nnm.def(
      "constant_",
      [](py::object t, double v) {
        ti::constant_(t.cast<const Tensor&>(), v);
        return t;
      },
      py::arg("tensor"), py::arg("val"));
  for (bool normal : {false, true}) {
    nnm.def(
        normal ? "xavier_normal_" : "xavier_uniform_",
        [normal](py::object t, double gain) {
          normal ? ti::xavier_normal_(t.cast<const Tensor&>(), gain)
                 : ti::xavier_uniform_(t.cast<const Tensor&>(), gain);
          return t;
        },
        py::arg("tensor"), py::arg("gain") = 1.0);
    nnm.def(
        normal ? "kaiming_normal_" : "kaiming_uniform_",
        [normal](py::object t, double a, const std::string& mode, const std::string& nonlinearity) {
          const Tensor& x = t.cast<const Tensor&>();
          normal ? ti::kaiming_normal_(x, a, mode, nonlinearity) : ti::kaiming_uniform_(x, a, mode, nonlinearity);
          return t;
        },
        py::arg("tensor"), py::arg("a") = 0.0, py::arg("mode") = "fan_in", py::arg("nonlinearity") = "leaky_relu");
  }
  nnm.def(
      "clip_grad_norm_",
      [](const py::object& params, double max_norm, double norm_type, bool error_if_nonfinite) {
        const std::vector<Tensor> ps =
            py::isinstance<Tensor>(params) ? std::vector<Tensor>{params.cast<Tensor>()} : tensor_list(params);
        return tg::optim::clip_grad_norm_(ps, max_norm, norm_type, error_if_nonfinite);
      },
      py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0, py::arg("error_if_nonfinite") = false);
  nnm.def(
      "clip_grad_value_",
      [](const py::object& params, double clip_value) {
        const std::vector<Tensor> ps =
            py::isinstance<Tensor>(params) ? std::vector<Tensor>{params.cast<Tensor>()} : tensor_list(params);
        tg::optim::clip_grad_value_(ps, clip_value);
      },
      py::arg("parameters"), py::arg("clip_value"));
  auto reduction = [](const std::string& r) {
    if (r == "mean") return tn::Reduction::kMean;
    if (r == "sum") return tn::Reduction::kSum;
    if (r == "none") return tn::Reduction::kNone;
    if (r == "batchmean") return tn::Reduction::kBatchMean;
    throw tg::Error("loss: reduction must be \"mean\", \"sum\", \"none\" (or \"batchmean\" for kl_div), got \"" + r +
                    "\"");
  };
  // An optional tensor argument (None: undefined).
  auto opt_tensor = [](const std::optional<Tensor>& t) { return t ? *t : Tensor(); };
  nnm.def(
      "mse_loss",
      [reduction](const Tensor& a, const Tensor& b, const std::string& r) {
        return tn::functional::mse_loss(a, b, reduction(r));
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean");
  nnm.def(
      "l1_loss",
      [reduction](const Tensor& a, const Tensor& b, const std::string& r) {
        return tn::functional::l1_loss(a, b, reduction(r));
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean");
  nnm.def(
      "cross_entropy",
      [reduction, opt_tensor](const Tensor& a, const Tensor& b, const std::optional<Tensor>& weight,
                              int64_t ignore_index, const std::string& r, double label_smoothing) {
        return tn::functional::cross_entropy(a, b, opt_tensor(weight), reduction(r), ignore_index, label_smoothing);
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("ignore_index") = -100,
      py::arg("reduction") = "mean", py::arg("label_smoothing") = 0.0);
  nnm.def(
      "nll_loss",
      [reduction, opt_tensor](const Tensor& a, const Tensor& b, const std::optional<Tensor>& weight,
                              int64_t ignore_index, const std::string& r) {
        return tn::functional::nll_loss(a, b, opt_tensor(weight), reduction(r), ignore_index);
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("ignore_index") = -100,
      py::arg("reduction") = "mean");
  nnm.def(
      "smooth_l1_loss",
      [reduction](const Tensor& a, const Tensor& b, const std::string& r, double beta) {
        return tn::functional::smooth_l1_loss(a, b, reduction(r), beta);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", py::arg("beta") = 1.0);
  nnm.def(
      "huber_loss",
      [reduction](const Tensor& a, const Tensor& b, const std::string& r, double delta) {
        return tn::functional::huber_loss(a, b, reduction(r), delta);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", py::arg("delta") = 1.0);
  nnm.def(
      "binary_cross_entropy",
      [reduction, opt_tensor](const Tensor& a, const Tensor& b, const std::optional<Tensor>& weight,
                              const std::string& r) {
        return tn::functional::binary_cross_entropy(a, b, opt_tensor(weight), reduction(r));
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("reduction") = "mean");
  nnm.def(
      "binary_cross_entropy_with_logits",
      [reduction, opt_tensor](const Tensor& a, const Tensor& b, const std::optional<Tensor>& weight,
                              const std::string& r, const std::optional<Tensor>& pos_weight) {
        return tn::functional::binary_cross_entropy_with_logits(a, b, opt_tensor(weight), reduction(r),
                                                                opt_tensor(pos_weight));
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("reduction") = "mean",
      py::arg("pos_weight") = py::none());
  nnm.def(
      "kl_div",
      [reduction](const Tensor& a, const Tensor& b, const std::string& r, bool log_target) {
        return tn::functional::kl_div(a, b, reduction(r), log_target);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", py::arg("log_target") = false);
  nnm.def("leaky_relu", &tn::functional::leaky_relu, py::arg("input"), py::arg("negative_slope") = 0.01);
  nnm.def("elu", &tn::functional::elu, py::arg("input"), py::arg("alpha") = 1.0);
  nnm.def("gelu", &tn::functional::gelu, py::arg("input"), py::arg("approximate") = "none");

  // Optimizers (tapegrad.optim, torch.optim's names, arguments and
  // defaults): the C++ optimizers over the Python tensors.
  py::module_ optim = m.def_submodule("optim", "Optimizers, as torch.optim");
  namespace to = tg::optim;
  py::class_<to::Optimizer>(optim, "Optimizer", "The base of the optimizers (torch.optim.Optimizer)")
      .def("step", &step_with_closure, py::arg("closure") = py::none(),
           "One update of every parameter that has a gradient; a closure (computing the loss and its gradients) runs "
           "first, and its loss is returned")
      .def("zero_grad", &to::Optimizer::zero_grad, py::arg("set_to_none") = true)
      .def_property_readonly("steps", &to::Optimizer::steps)
      .def_property_readonly(
          "param_groups",
          [](const to::Optimizer& o) {
            py::list out;
            for (size_t g = 0; g < o.num_param_groups(); ++g) {
              py::dict d;
              d["params"] = o.group_params(g);
              d["lr"] = o.lr(g);
              d["weight_decay"] = o.weight_decay(g);
              out.append(d);
            }
            return out;
          },
          "The groups' parameters and options (a copy; tapegrad.optim wraps it so that g[\"lr\"] = x sets the rate)")
      .def(
          "set_lr", [](to::Optimizer& o, double lr, std::optional<size_t> g) { g ? o.set_lr(*g, lr) : o.set_lr(lr); },
          py::arg("lr"), py::arg("group") = py::none())
      .def(
          "state_dict", [](const to::Optimizer& o) { return state_to_dict(o.state_dict()); },
          "The state resuming needs, by name (tensors)")
      .def(
          "load_state_dict", [](to::Optimizer& o, const py::dict& d) { o.load_state_dict(state_from_dict(d)); },
          py::arg("state_dict"))
      .def(
          "add_param_group",
          [](to::Optimizer& o, const py::dict& group) {
            py::list one;
            one.append(group);
            o.add_param_group(param_groups(one).front());
          },
          py::arg("param_group"), "Adds a group (a dict with params and optionally lr, weight_decay)");
  py::class_<to::SGD, to::Optimizer>(optim, "SGD", "torch.optim.SGD")
      .def(py::init([](const py::object& params, double lr, double momentum, double dampening, double weight_decay,
                       bool nesterov, bool capturable) {
             return std::make_unique<to::SGD>(
                 param_groups(params), to::SGDOptions(lr, momentum, dampening, weight_decay, nesterov, capturable));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("nesterov") = false, py::arg("capturable") = false);
  auto adam_init = [](bool w) {
    return [w](const py::object& params, double lr, const std::tuple<double, double>& betas, double eps,
               std::optional<double> weight_decay, bool amsgrad, bool capturable) -> std::unique_ptr<to::Adam> {
      const to::AdamOptions o(lr, std::get<0>(betas), std::get<1>(betas), eps, weight_decay.value_or(w ? 1e-2 : 0.0),
                              amsgrad, capturable);
      if (w) return std::make_unique<to::AdamW>(param_groups(params), to::AdamWOptions(o));
      return std::make_unique<to::Adam>(param_groups(params), o);
    };
  };
  py::class_<to::Adam, to::Optimizer>(optim, "Adam", "torch.optim.Adam")
      .def(py::init(adam_init(false)), py::arg("params"), py::arg("lr") = 1e-3,
           py::arg("betas") = std::make_tuple(0.9, 0.999), py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0,
           py::arg("amsgrad") = false, py::arg("capturable") = false);
  py::class_<to::AdamW, to::Adam>(optim, "AdamW", "torch.optim.AdamW (decoupled weight decay, 1e-2 by default)")
      .def(py::init([init = adam_init(true)](const py::object& params, double lr,
                                             const std::tuple<double, double>& betas, double eps, double weight_decay,
                                             bool amsgrad, bool capturable) {
             return std::unique_ptr<to::AdamW>(
                 static_cast<to::AdamW*>(init(params, lr, betas, eps, weight_decay, amsgrad, capturable).release()));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_tuple(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2, py::arg("amsgrad") = false,
           py::arg("capturable") = false);

  // RMSprop, Adagrad, Adamax, NAdam, RAdam: torch.optim's arguments and
  // defaults over the C++ rules.
  py::class_<to::Adaptive, to::Optimizer>(optim, "_Adaptive", "The base of RMSprop, Adagrad, Adamax, NAdam and RAdam");
  py::class_<to::RMSprop, to::Adaptive>(optim, "RMSprop", "torch.optim.RMSprop")
      .def(py::init([](const py::object& params, double lr, double alpha, double eps, double weight_decay,
                       double momentum, bool centered, bool capturable) {
             to::RMSpropOptions o(lr);
             o.alpha = alpha;
             o.eps = eps;
             o.weight_decay = weight_decay;
             o.momentum = momentum;
             o.centered = centered;
             o.capturable = capturable;
             return std::make_unique<to::RMSprop>(param_groups(params), o);
           }),
           py::arg("params"), py::arg("lr") = 1e-2, py::arg("alpha") = 0.99, py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("momentum") = 0.0, py::arg("centered") = false,
           py::arg("capturable") = false);
  py::class_<to::Adagrad, to::Adaptive>(optim, "Adagrad", "torch.optim.Adagrad")
      .def(py::init([](const py::object& params, double lr, double lr_decay, double weight_decay,
                       double initial_accumulator_value, double eps) {
             to::AdagradOptions o(lr);
             o.lr_decay = lr_decay;
             o.weight_decay = weight_decay;
             o.initial_accumulator_value = initial_accumulator_value;
             o.eps = eps;
             return std::make_unique<to::Adagrad>(param_groups(params), o);
           }),
           py::arg("params"), py::arg("lr") = 1e-2, py::arg("lr_decay") = 0.0, py::arg("weight_decay") = 0.0,
           py::arg("initial_accumulator_value") = 0.0, py::arg("eps") = 1e-10);
  // Adamax, NAdam and RAdam share Adam's arguments; NAdam adds
  // momentum_decay, NAdam and RAdam decoupled_weight_decay.
  auto adam_like = [](to::AdaptiveOptions o, const std::tuple<double, double>& betas, double eps, double weight_decay,
                      bool capturable) {
    o.betas(betas);
    o.eps = eps;
    o.weight_decay = weight_decay;
    o.capturable = capturable;
    return o;
  };
  py::class_<to::Adamax, to::Adaptive>(optim, "Adamax", "torch.optim.Adamax")
      .def(py::init([adam_like](const py::object& params, double lr, const std::tuple<double, double>& betas,
                                double eps, double weight_decay, bool capturable) {
             return std::make_unique<to::Adamax>(
                 param_groups(params),
                 to::AdamaxOptions(adam_like(to::AdamaxOptions(lr), betas, eps, weight_decay, capturable)));
           }),
           py::arg("params"), py::arg("lr") = 2e-3, py::arg("betas") = std::make_tuple(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("capturable") = false);
  py::class_<to::NAdam, to::Adaptive>(optim, "NAdam", "torch.optim.NAdam")
      .def(py::init([adam_like](const py::object& params, double lr, const std::tuple<double, double>& betas,
                                double eps, double weight_decay, double momentum_decay, bool decoupled_weight_decay,
                                bool capturable) {
             to::AdaptiveOptions o = adam_like(to::NAdamOptions(lr), betas, eps, weight_decay, capturable);
             o.momentum_decay = momentum_decay;
             o.decoupled_weight_decay = decoupled_weight_decay;
             return std::make_unique<to::NAdam>(param_groups(params), to::NAdamOptions(o));
           }),
           py::arg("params"), py::arg("lr") = 2e-3, py::arg("betas") = std::make_tuple(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("momentum_decay") = 4e-3,
           py::arg("decoupled_weight_decay") = false, py::arg("capturable") = false);
  py::class_<to::RAdam, to::Adaptive>(optim, "RAdam", "torch.optim.RAdam")
      .def(py::init([adam_like](const py::object& params, double lr, const std::tuple<double, double>& betas,
                                double eps, double weight_decay, bool decoupled_weight_decay, bool capturable) {
             to::AdaptiveOptions o = adam_like(to::RAdamOptions(lr), betas, eps, weight_decay, capturable);
             o.decoupled_weight_decay = decoupled_weight_decay;
             return std::make_unique<to::RAdam>(param_groups(params), to::RAdamOptions(o));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_tuple(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("decoupled_weight_decay") = false,
           py::arg("capturable") = false);
  py::class_<to::LBFGS, to::Optimizer>(optim, "LBFGS", "torch.optim.LBFGS (one parameter group)")
      .def(py::init([](const py::object& params, double lr, int64_t max_iter, std::optional<int64_t> max_eval,
                       double tolerance_grad, double tolerance_change, int64_t history_size,
                       const std::optional<std::string>& line_search_fn) {
             to::LBFGSOptions o(lr, max_iter, max_eval.value_or(0), tolerance_grad, tolerance_change, history_size);
             o.line_search_fn(line_search_fn);
             return std::make_unique<to::LBFGS>(tensor_list(params), o);
           }),
           py::arg("params"), py::arg("lr") = 1.0, py::arg("max_iter") = 20, py::arg("max_eval") = py::none(),
           py::arg("tolerance_grad") = 1e-7, py::arg("tolerance_change") = 1e-9, py::arg("history_size") = 100,
           py::arg("line_search_fn") = py::none())
      .def(
          "step",
          [](to::LBFGS& o, const py::object& closure) -> py::object {
            if (closure.is_none())
              throw tg::Error(
                  "LBFGS.step: give a closure (it zeroes the gradients, computes the loss, calls "
                  "backward and returns the loss), as torch.optim.LBFGS needs");
            py::object first = py::none();
            o.step([&]() {
              ag::AutoGradMode grad(true);
              py::object loss = closure();
              if (!py::isinstance<Tensor>(loss))
                throw tg::Error("LBFGS.step: the closure returned " + py::str(py::type::of(loss)).cast<std::string>() +
                                "; return the loss tensor (after calling backward on it)");
              if (first.is_none()) first = loss;
              return loss.cast<Tensor>();
            });
            return first;
          },
          py::arg("closure") = py::none(), "Up to max_iter iterations; returns the closure's first loss")
      .def_property_readonly("evaluations", &to::LBFGS::evaluations, "Closure calls so far");

  // Schedulers (tapegrad.optim.lr_scheduler, as torch.optim.lr_scheduler):
  // each keeps its optimizer alive.
  py::module_ sched = optim.def_submodule("lr_scheduler", "Learning-rate schedulers, as torch.optim.lr_scheduler");
  auto last_lr = [](const to::Optimizer& o) {
    std::vector<double> r;
    for (size_t g = 0; g < o.num_param_groups(); ++g)
      r.push_back(o.lr(g));
    return r;
  };
  py::class_<to::LRScheduler, std::shared_ptr<to::LRScheduler>>(sched, "LRScheduler",
                                                                "The base of the epoch schedulers")
      .def("step", &to::LRScheduler::step, "One epoch (or batch, for OneCycleLR) done")
      .def_property_readonly("last_epoch", &to::LRScheduler::epoch)
      .def(
          "get_last_lr", [last_lr](const to::LRScheduler& s) { return last_lr(s.optimizer()); },
          "Each group's rate now")
      .def(
          "state_dict", [](const to::LRScheduler& s) { return state_to_dict(s.state_dict()); },
          "last_epoch and base_lrs, as tensors")
      .def(
          "load_state_dict", [](to::LRScheduler& s, const py::dict& d) { s.load_state_dict(state_from_dict(d)); },
          py::arg("state_dict"));
  py::class_<to::StepLR, to::LRScheduler, std::shared_ptr<to::StepLR>>(sched, "StepLR", "torch's StepLR")
      .def(py::init<to::Optimizer&, int64_t, double>(), py::arg("optimizer"), py::arg("step_size"),
           py::arg("gamma") = 0.1, py::keep_alive<1, 2>());
  py::class_<to::CosineAnnealingLR, to::LRScheduler, std::shared_ptr<to::CosineAnnealingLR>>(
      sched, "CosineAnnealingLR", "torch's CosineAnnealingLR (its closed form)")
      .def(py::init<to::Optimizer&, int64_t, double>(), py::arg("optimizer"), py::arg("T_max"),
           py::arg("eta_min") = 0.0, py::keep_alive<1, 2>());
  py::class_<to::LambdaLR, to::LRScheduler, std::shared_ptr<to::LambdaLR>>(sched, "LambdaLR", "torch's LambdaLR")
      .def(py::init([](to::Optimizer& o, const py::object& lr_lambda) {
             // The factor is called from C++ with the GIL held (step() runs in the caller's thread).
             auto wrap = [](const py::object& f) -> std::function<double(int64_t)> {
               if (!PyCallable_Check(f.ptr()))
                 throw py::type_error("LambdaLR: lr_lambda must be a function or a list of them (one per group), got " +
                                      py::str(py::type::of(f)).cast<std::string>());
               return [f](int64_t e) {
                 py::object r = f(e);
                 if (!py::isinstance<py::float_>(r) && !py::isinstance<py::int_>(r) && !PyNumber_Check(r.ptr()))
                   throw tg::Error("LambdaLR: lr_lambda(" + std::to_string(e) + ") returned " +
                                   py::str(py::type::of(r)).cast<std::string>() + "; return a number (the factor)");
                 return py::float_(r).cast<double>();
               };
             };
             if (!py::isinstance<py::list>(lr_lambda) && !py::isinstance<py::tuple>(lr_lambda))
               return std::make_shared<to::LambdaLR>(o, wrap(lr_lambda));
             std::vector<std::function<double(int64_t)>> fs;
             for (const py::handle& f : lr_lambda)
               fs.push_back(wrap(py::reinterpret_borrow<py::object>(f)));
             return std::make_shared<to::LambdaLR>(o, std::move(fs));
           }),
           py::arg("optimizer"), py::arg("lr_lambda"), py::keep_alive<1, 2>(), py::keep_alive<1, 3>());
  py::class_<to::ExponentialLR, to::LRScheduler, std::shared_ptr<to::ExponentialLR>>(sched, "ExponentialLR",
                                                                                     "torch's ExponentialLR")
      .def(py::init<to::Optimizer&, double>(), py::arg("optimizer"), py::arg("gamma"), py::keep_alive<1, 2>());
  py::class_<to::LinearLR, to::LRScheduler, std::shared_ptr<to::LinearLR>>(sched, "LinearLR", "torch's LinearLR")
      .def(py::init<to::Optimizer&, double, double, int64_t>(), py::arg("optimizer"), py::arg("start_factor") = 1.0 / 3,
           py::arg("end_factor") = 1.0, py::arg("total_iters") = 5, py::keep_alive<1, 2>());
  py::class_<to::OneCycleLR, to::LRScheduler, std::shared_ptr<to::OneCycleLR>>(sched, "OneCycleLR",
                                                                               "torch's OneCycleLR")
      .def(py::init([](to::Optimizer& o, const py::object& max_lr, int64_t total_steps, double pct_start,
                       const std::string& anneal_strategy, bool cycle_momentum, double base_momentum,
                       double max_momentum, double div_factor, double final_div_factor, bool three_phase) {
             if (anneal_strategy != "cos" && anneal_strategy != "linear")
               throw tg::Error("OneCycleLR: anneal_strategy is \"cos\" or \"linear\", got \"" + anneal_strategy + "\"");
             const bool cos = anneal_strategy == "cos";
             if (py::isinstance<py::sequence>(max_lr))
               return std::make_shared<to::OneCycleLR>(o, max_lr.cast<std::vector<double>>(), total_steps, pct_start,
                                                       cos, div_factor, final_div_factor, three_phase, cycle_momentum,
                                                       base_momentum, max_momentum);
             return std::make_shared<to::OneCycleLR>(o, max_lr.cast<double>(), total_steps, pct_start, cos, div_factor,
                                                     final_div_factor, three_phase, cycle_momentum, base_momentum,
                                                     max_momentum);
           }),
           py::arg("optimizer"), py::arg("max_lr"), py::arg("total_steps"), py::arg("pct_start") = 0.3,
           py::arg("anneal_strategy") = "cos", py::arg("cycle_momentum") = true, py::arg("base_momentum") = 0.85,
           py::arg("max_momentum") = 0.95, py::arg("div_factor") = 25.0, py::arg("final_div_factor") = 1e4,
           py::arg("three_phase") = false, py::keep_alive<1, 2>());
  py::class_<to::SequentialLR, to::LRScheduler, std::shared_ptr<to::SequentialLR>>(sched, "SequentialLR",
                                                                                   "torch's SequentialLR")
      .def(py::init<to::Optimizer&, std::vector<std::shared_ptr<to::LRScheduler>>, std::vector<int64_t>>(),
           py::arg("optimizer"), py::arg("schedulers"), py::arg("milestones"), py::keep_alive<1, 2>());
  py::class_<to::ReduceLROnPlateau>(sched, "ReduceLROnPlateau", "torch's ReduceLROnPlateau")
      .def(py::init([](to::Optimizer& o, const std::string& mode, double factor, int64_t patience, double threshold,
                       const std::string& threshold_mode, int64_t cooldown, const py::object& min_lr, double eps) {
             // torch's argument order; min_lr one number or one per group
             if (py::isinstance<py::list>(min_lr) || py::isinstance<py::tuple>(min_lr))
               return std::make_unique<to::ReduceLROnPlateau>(o, factor, patience, threshold, cooldown,
                                                              min_lr.cast<std::vector<double>>(), mode, threshold_mode,
                                                              eps);
             return std::make_unique<to::ReduceLROnPlateau>(o, factor, patience, threshold, cooldown,
                                                            min_lr.cast<double>(), mode, threshold_mode, eps);
           }),
           py::arg("optimizer"), py::arg("mode") = "min", py::arg("factor") = 0.1, py::arg("patience") = 10,
           py::arg("threshold") = 1e-4, py::arg("threshold_mode") = "rel", py::arg("cooldown") = 0,
           py::arg("min_lr") = 0.0, py::arg("eps") = 1e-8, py::keep_alive<1, 2>())
      .def(
          "step", [](to::ReduceLROnPlateau& s, const py::object& metrics) { s.step(py::float_(metrics)); },
          py::arg("metrics"), "One epoch done with the metric (a number or a one-element tensor)")
      .def_property_readonly("best", &to::ReduceLROnPlateau::best)
      .def(
          "get_last_lr", [last_lr](const to::ReduceLROnPlateau& s) { return last_lr(s.optimizer()); },
          "Each group's rate now")
      .def(
          "state_dict", [](const to::ReduceLROnPlateau& s) { return state_to_dict(s.state_dict()); },
          "best, num_bad_epochs and cooldown_counter, as tensors")
      .def(
          "load_state_dict", [](to::ReduceLROnPlateau& s, const py::dict& d) { s.load_state_dict(state_from_dict(d)); },
          py::arg("state_dict"));

  // Forward and Taylor mode (tapegrad.autograd.forward_ad, as
  // torch.autograd.forward_ad; __init__.py registers the submodules for import).
  py::module_ autograd = m.def_submodule("autograd", "Reverse, forward and Taylor mode");
  // gradcheck / gradgradcheck, as torch.autograd's: fn(*inputs), float64
  // inputs; True, or a tapegrad.Error naming the worst element (False
  // with raise_exception=False).
  for (bool second : {false, true})
    autograd.def(
        second ? "gradgradcheck" : "gradcheck",
        [second](const py::function& fn, const py::object& inputs, double eps, double atol, double rtol,
                 bool raise_exception, bool check_forward_ad, bool check_batched_forward_ad) {
          const std::vector<Tensor> xs =
              py::isinstance<Tensor>(inputs) ? std::vector<Tensor>{inputs.cast<Tensor>()} : tensor_list(inputs);
          ag::GradcheckOptions o;
          o.eps = eps;
          o.atol = atol;
          o.rtol = rtol;
          o.check_forward_ad = check_forward_ad;
          o.check_batched_forward_ad = check_batched_forward_ad;
          const ag::TensorsFn f = tensors_fn(fn);
          const ag::GradcheckResult r = run_released(f, [&](const ag::TensorsFn& g) {
            return second ? ag::gradgradcheck(g, xs, o) : ag::gradcheck(g, xs, o);
          });
          if (!r.ok && raise_exception)
            throw tg::Error(std::string(second ? "gradgradcheck" : "gradcheck") + ": " + r.message);
          return r.ok;
        },
        py::arg("func"), py::arg("inputs"), py::arg("eps") = 1e-6, py::arg("atol") = 1e-5, py::arg("rtol") = 1e-3,
        py::arg("raise_exception") = true, py::arg("check_forward_ad") = false,
        py::arg("check_batched_forward_ad") = false);
  py::module_ fwd = autograd.def_submodule("forward_ad", "Forward mode, as torch.autograd.forward_ad");
  namespace fad = ag::forward_ad;
  py::class_<DualLevel>(fwd, "dual_level",
                        "Forward mode on inside: with dual_level(): ... (batch: directions per tangent)")
      .def(py::init([](int64_t batch) {
             return DualLevel{batch, nullptr};
           }),
           py::arg("batch") = 0)
      .def("__enter__",
           [](DualLevel& l) {
             l.level = l.batch > 0 ? std::make_unique<fad::dual_level>(l.batch) : std::make_unique<fad::dual_level>();
           })
      .def("__exit__", [](DualLevel& l, const py::args&) { l.level.reset(); });
  py::class_<TaylorLevel>(fwd, "taylor_level",
                          "Taylor mode inside: with taylor_level(order, directions): ... (make_jet, jet_coefficients)")
      .def(py::init([](int order, int64_t directions) {
             return TaylorLevel{order, directions, nullptr};
           }),
           py::arg("order"), py::arg("directions") = 1)
      .def("__enter__", [](TaylorLevel& l) { l.level = std::make_unique<fad::taylor_level>(l.order, l.directions); })
      .def("__exit__", [](TaylorLevel& l, const py::args&) { l.level.reset(); });
  fwd.def("make_dual", &fad::make_dual, py::arg("tensor"), py::arg("tangent"),
          "A tensor equal to tensor carrying tangent at the current level");
  fwd.def(
      "_unpack_dual",
      [](const Tensor& t) {
        fad::UnpackedDual u = fad::unpack_dual(t);
        return py::make_tuple(u.primal, or_none(u.tangent));
      },
      py::arg("tensor"));
  fwd.def("is_active", &fad::is_active, "Whether a dual level is active on this thread");
  fwd.def(
      "make_jet",
      [](const Tensor& primal, const std::vector<std::optional<Tensor>>& coefficients) {
        std::vector<Tensor> c;
        for (const auto& t : coefficients)
          c.push_back(t ? *t : Tensor());  // None: a zero coefficient
        return fad::make_jet(primal, c);
      },
      py::arg("primal"), py::arg("coefficients"),
      "A tensor equal to primal carrying the Taylor coefficients c_1..c_K (None: zero)");
  fwd.def(
      "jet_coefficients",
      [](const Tensor& t) {
        py::list out;
        for (const Tensor& c : fad::jet_coefficients(t))
          out.append(or_none(c));
        return out;
      },
      py::arg("tensor"), "The Taylor coefficients c_1..c_K of tensor (None where it carries none)");

  // Every op of the op lists (generated by python/gen_ops.py), bound after
  // the hand-kept forms above, which pybind11 tries first.
  py::module_ linalg = m.def_submodule("linalg", "tg::linalg: torch.linalg's names and semantics");
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  bind_generated_ops(m, linalg, cls);
}
