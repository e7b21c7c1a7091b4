// Complex64 and Complex128 (issue 47 point 1, its first part): the dtype
// list's entries, promotion, creation and conversion on both devices,
// printing, DLPack, view_as_real / view_as_complex, real, imag, conj, and
// clear refusals where complex is not supported yet (arithmetic, autograd,
// safetensors).
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>

#include <dlpack/dlpack.h>
#include <tapegrad/nn/serialize.h>
#include <tapegrad/tensor/dlpack.h>

#include "reference.h"

namespace tgtest {
namespace {

using tg::complex;
const tg::Device kCpu(tg::kCPU);

std::vector<tg::Device> devices() {
  std::vector<tg::Device> d{kCpu};
  if (tg::cuda::is_available()) d.emplace_back(tg::kCUDA, 0);
  return d;
}

TEST(Complex, DtypeListEntriesAndPromotion) {
  EXPECT_EQ(tg::element_size(tg::kComplex64), 8u);
  EXPECT_EQ(tg::element_size(tg::kComplex128), 16u);
  EXPECT_TRUE(tg::is_complex(tg::kComplex64) && tg::is_complex(tg::kComplex128));
  EXPECT_FALSE(tg::is_complex(tg::kFloat64) || tg::is_floating_point(tg::kComplex64));
  EXPECT_EQ(tg::real_type(tg::kComplex64), tg::kFloat32);
  EXPECT_EQ(tg::real_type(tg::kComplex128), tg::kFloat64);
  EXPECT_EQ(tg::real_type(tg::kInt64), tg::kInt64);
  EXPECT_EQ(tg::complex_type(tg::kFloat64), tg::kComplex128);
  EXPECT_EQ(tg::complex_type(tg::kBFloat16), tg::kComplex64);
  EXPECT_EQ(tg::complex_type(tg::kInt64), tg::kComplex64);
  EXPECT_STREQ(tg::to_string(tg::kComplex128), "Complex128");
  EXPECT_STREQ(tg::python_name(tg::kComplex64), "complex64");
  tg::ScalarType t = tg::kFloat32;
  ASSERT_TRUE(tg::scalar_type_from_string("complex128", &t));
  EXPECT_EQ(t, tg::kComplex128);
  // PyTorch's promotion: the complex dtype of the promoted parts.
  using P = std::tuple<tg::ScalarType, tg::ScalarType, tg::ScalarType>;
  for (const auto& [a, b, want] :
       {P{tg::kComplex64, tg::kFloat64, tg::kComplex128}, P{tg::kComplex64, tg::kFloat32, tg::kComplex64},
        P{tg::kComplex64, tg::kBFloat16, tg::kComplex64}, P{tg::kComplex64, tg::kFloat16, tg::kComplex64},
        P{tg::kComplex64, tg::kInt64, tg::kComplex64}, P{tg::kComplex64, tg::kBool, tg::kComplex64},
        P{tg::kComplex128, tg::kFloat32, tg::kComplex128}, P{tg::kComplex64, tg::kComplex128, tg::kComplex128}}) {
    EXPECT_EQ(tg::promote_types(a, b), want) << a << " with " << b;
    EXPECT_EQ(tg::promote_types(b, a), want) << b << " with " << a;
  }
  EXPECT_EQ(tg::promote_with_scalar(tg::kComplex64, false), tg::kComplex64);
  EXPECT_EQ(tg::promote_with_scalar(tg::kComplex128, true), tg::kComplex128);
}

TEST(Complex, CreationAndConversionOnEveryDevice) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(dev.is_cpu() ? "cpu" : "cuda");
    const auto c64 = tg::TensorOptions().dtype(tg::kComplex64).device(dev);
    Tensor z = tg::zeros({2, 3}, c64);
    EXPECT_EQ(z.dtype(), tg::kComplex64);
    for (const complex<float>& v : z.to_vector<complex<float>>())
      EXPECT_TRUE(v == complex<float>(0, 0));
    // A real fill is the real part.
    for (const complex<double>& v : tg::full({3}, -2.5, c64).to_vector<complex<double>>())
      EXPECT_TRUE(v == complex<double>(-2.5, 0));
    // Real to complex (both precisions, the reduced types through float),
    // complex to complex, complex to real (the real part) and to Bool
    // (nonzero).
    Tensor x = tg::tensor({1.5, -2.0, 0.0, 3.25}, {4}, tg::kFloat64).to(dev);
    for (tg::ScalarType from : {tg::kFloat64, tg::kFloat32, tg::kBFloat16, tg::kFloat16, tg::kInt64}) {
      std::vector<complex<double>> got = x.to(from).to(tg::kComplex128).to_vector<complex<double>>();
      std::vector<double> want = x.to(from).to_vector<double>();
      ASSERT_EQ(got.size(), 4u);
      for (size_t i = 0; i < 4; ++i)
        EXPECT_TRUE(got[i] == complex<double>(want[i], 0)) << from << " " << i;
    }
    Tensor pairs = tg::tensor({1.5, 2.0, -3.0, -0.5, 0.0, 0.0, 0.0, 7.0}, {4, 2}, tg::kFloat64).to(dev);
    Tensor c = tg::view_as_complex(pairs);
    EXPECT_EQ(c.dtype(), tg::kComplex128);
    Tensor c32 = c.to(tg::kComplex64);
    std::vector<complex<float>> v32 = c32.to_vector<complex<float>>();
    EXPECT_TRUE(v32[0] == complex<float>(1.5f, 2.0f) && v32[1] == complex<float>(-3.0f, -0.5f) &&
                v32[3] == complex<float>(0.0f, 7.0f));
    EXPECT_EQ(c.to(tg::kFloat64).to_vector<double>(), (std::vector<double>{1.5, -3.0, 0.0, 0.0}));
    EXPECT_EQ(c.to(tg::kInt64).to_vector<int64_t>(), (std::vector<int64_t>{1, -3, 0, 0}));
    EXPECT_EQ(c32.to(tg::kBool).to_vector<bool>(), (std::vector<bool>{true, true, false, true}));
    // A complex copy across devices and into a strided destination.
    Tensor back = c.to(kCpu).to(dev);
    EXPECT_EQ(tg::view_as_real(back).to(kCpu).to_vector<double>(), pairs.to(kCpu).to_vector<double>());
    Tensor dst = tg::zeros({4, 3}, c64).narrow(1, 1, 1).squeeze(1);
    dst.copy_(c);
    EXPECT_TRUE(dst.to_vector<complex<float>>()[1] == complex<float>(-3.0f, -0.5f));
    EXPECT_TRUE(c.select(0, 1).item<complex<double>>() == complex<double>(-3.0, -0.5));
    EXPECT_TRUE(c32.select(0, 0).item<complex<double>>() == complex<double>(1.5, 2.0));
    // Reading complex values as a real type would drop the imaginary parts:
    // refused (a to() cast drops them by request).
    EXPECT_ERROR_CONTAINS(c.select(0, 1).item<double>(), "imaginary parts would be dropped");
    EXPECT_ERROR_CONTAINS(c32.to_vector<float>(), "imaginary parts would be dropped");
  }
}

TEST(Complex, ViewAsRealAndViewAsComplexShareMemory) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(dev.is_cpu() ? "cpu" : "cuda");
    Tensor x = tg::arange(0, 24, 1, tg::TensorOptions().dtype(tg::kFloat32)).reshape({3, 4, 2}).to(dev);
    Tensor c = tg::view_as_complex(x);
    EXPECT_EQ(c.sizes(), (IntList{3, 4}));
    EXPECT_EQ(c.strides(), (IntList{4, 1}));
    EXPECT_EQ(c.dtype(), tg::kComplex64);
    EXPECT_TRUE(c.to_vector<complex<float>>()[5] == complex<float>(10, 11));
    // Writes through either view are seen by the other (one storage, one
    // version counter).
    const uint32_t v0 = x.version();
    tg::view_as_real(c).select(-1, 1).fill_(-1);
    EXPECT_GT(x.version(), v0);
    EXPECT_EQ(x.select(-1, 1).to(kCpu).to_vector<float>(), std::vector<float>(12, -1.0f));
    Tensor r = tg::view_as_real(c);
    EXPECT_EQ(r.sizes(), (IntList{3, 4, 2}));
    EXPECT_EQ(r.data_ptr(), x.data_ptr());
    // A strided complex view (every other column, then a row): its real view
    // has doubled strides and offset.
    Tensor cs = c.slice(1, 1, 4, 2).select(0, 2);
    Tensor rs = tg::view_as_real(cs);
    EXPECT_EQ(rs.strides(), (IntList{4, 1}));
    EXPECT_EQ(rs.storage_offset(), 2 * cs.storage_offset());
    EXPECT_EQ(rs.select(-1, 0).to(kCpu).to_vector<float>(), (std::vector<float>{18, 22}));
    // Empty and 0-dim.
    EXPECT_EQ(tg::view_as_complex(tg::zeros({0, 2}, tg::TensorOptions().device(dev))).sizes(), (IntList{0}));
    EXPECT_EQ(tg::view_as_complex(tg::zeros({2}, tg::TensorOptions().device(dev))).dim(), 0);
  }
}

TEST(Complex, ViewAsComplexRefusesWhatItCannotView) {
  Tensor x = tg::zeros({3, 4, 2});
  EXPECT_ERROR_CONTAINS(tg::view_as_complex(tg::zeros({3, 3})), "last dim of size 2");
  EXPECT_ERROR_CONTAINS(tg::view_as_complex(x.transpose(0, 2).contiguous().transpose(0, 2)), "stride 1");
  EXPECT_ERROR_CONTAINS(tg::view_as_complex(tg::zeros({3, 5}).narrow(1, 0, 2)), "must be even");
  EXPECT_ERROR_CONTAINS(tg::view_as_complex(tg::zeros({7}).narrow(0, 1, 2)), "storage offset must be even");
  EXPECT_ERROR_CONTAINS(tg::view_as_complex(tg::zeros({3, 2}, tg::kInt64)), "expected a Float32 or Float64");
  EXPECT_ERROR_CONTAINS(tg::view_as_complex(tg::zeros({3, 2}, tg::kBFloat16)), "expected a Float32 or Float64");
  EXPECT_ERROR_CONTAINS(tg::view_as_real(x), "expected a complex tensor");
  // Not differentiable yet: refused, never detached silently.
  Tensor w = tg::zeros({3, 2}, tg::kFloat64).requires_grad_();
  EXPECT_ERROR_CONTAINS(tg::view_as_complex(w), "not differentiable in tapegrad yet");
  EXPECT_ERROR_CONTAINS(w.to(tg::kComplex128), "not differentiable in tapegrad yet");
  {
    tg::autograd::NoGradGuard off;
    EXPECT_EQ(w.to(tg::kComplex128).dtype(), tg::kComplex128);
  }
  EXPECT_EQ(tg::view_as_complex(w.detach()).dtype(), tg::kComplex128);
  {
    tg::autograd::forward_ad::dual_level level;
    Tensor d = tg::autograd::forward_ad::make_dual(tg::zeros({2, 2}, tg::kFloat64), tg::ones({2, 2}, tg::kFloat64));
    EXPECT_TRUE(d.has_tangent());
    EXPECT_ERROR_CONTAINS(tg::view_as_complex(d), "forward-mode tangent");
    EXPECT_ERROR_CONTAINS(d.to(tg::kComplex64), "forward-mode tangent");
  }
}

TEST(Complex, RealImagConj) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(dev.is_cpu() ? "cpu" : "cuda");
    Tensor z = tg::view_as_complex(tg::tensor({1.0, 2.0, 3.0, -4.0, -0.0, 0.5}, {3, 2}, tg::kFloat64).to(dev));
    Tensor re = tg::real(z), im = tg::imag(z);
    EXPECT_EQ(re.dtype(), tg::kFloat64);
    EXPECT_EQ(re.to(kCpu).to_vector<double>(), (std::vector<double>{1, 3, -0.0}));
    EXPECT_EQ(im.to(kCpu).to_vector<double>(), (std::vector<double>{2, -4, 0.5}));
    EXPECT_EQ(re.strides(), (IntList{2}));
    im.fill_(9);  // a view: writes z
    EXPECT_TRUE(z.to_vector<complex<double>>()[1] == complex<double>(3, 9));
    Tensor zc = tg::conj(z);
    EXPECT_NE(zc.data_ptr(), z.data_ptr());
    std::vector<complex<double>> got = zc.to_vector<complex<double>>();
    EXPECT_TRUE(got[0] == complex<double>(1, -9) && got[1] == complex<double>(3, -9) &&
                got[2] == complex<double>(-0.0, -9));
    EXPECT_TRUE(z.to_vector<complex<double>>()[0] == complex<double>(1, 9)) << "conj leaves its input alone";
    // conj of a strided (transposed) complex tensor.
    Tensor m =
        tg::view_as_complex(tg::arange(0, 12, 1, tg::TensorOptions().dtype(tg::kFloat32)).reshape({2, 3, 2}).to(dev));
    Tensor mt = tg::conj(m.transpose(0, 1));
    EXPECT_EQ(mt.sizes(), (IntList{3, 2}));
    EXPECT_TRUE(mt.to_vector<complex<float>>()[1] == complex<float>(6, -7));
    // Real tensors: real and conj are the tensor itself (PyTorch's), imag is refused.
    Tensor x = tg::ones({2}, tg::TensorOptions().device(dev));
    EXPECT_EQ(tg::real(x).data_ptr(), x.data_ptr());
    EXPECT_EQ(tg::conj(x).data_ptr(), x.data_ptr());
    EXPECT_ERROR_CONTAINS(tg::imag(x), "has no imaginary part");
  }
}

TEST(Complex, Printing) {
  Tensor z = tg::view_as_complex(tg::tensor({1.0f, 2.0f, 3.0f, -4.0f}, {2, 2}, tg::kFloat32));
  std::ostringstream os;
  os << z;
  EXPECT_EQ(os.str(), "tensor([1.0000+2.0000j, 3.0000-4.0000j], dtype=Complex64)");
  std::ostringstream os2;
  os2 << tg::zeros({0}, tg::kComplex128);
  EXPECT_EQ(os2.str(), "tensor([], size=[0], dtype=Complex128)");
}

TEST(Complex, DlpackRoundTripKeepsTheComplexCode) {
  Tensor z = tg::view_as_complex(tg::tensor({1.0, 2.0, 3.0, -4.0}, {2, 2}, tg::kFloat64));
  DLManagedTensor* m = tg::to_dlpack(z);
  EXPECT_EQ(m->dl_tensor.dtype.code, 5);  // kDLComplex
  EXPECT_EQ(m->dl_tensor.dtype.bits, 128);
  Tensor back = tg::from_dlpack(m);
  EXPECT_EQ(back.dtype(), tg::kComplex128);
  EXPECT_TRUE(back.to_vector<complex<double>>()[1] == complex<double>(3, -4));
  EXPECT_EQ(back.data_ptr(), z.data_ptr());
}

// Ops without complex kernels yet refuse complex operands with an error
// naming the op and the dtype; the library stays usable.
TEST(Complex, OpsWithoutComplexKernelsRefuseNamingThemselves) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(dev.is_cpu() ? "cpu" : "cuda");
    Tensor z = tg::zeros({2, 2}, tg::TensorOptions().dtype(tg::kComplex64).device(dev));
    Tensor x = tg::ones({2, 2}, tg::TensorOptions().device(dev));
    const std::vector<std::pair<const char*, std::function<Tensor()>>> ops = {
        {"add", [&] { return z + z; }},
        {"add", [&] { return z + x; }},
        {"mul", [&] { return z * 2.0; }},
        {"exp", [&] { return tg::exp(z); }},
        {"sum", [&] { return z.sum(); }},
        {"matmul", [&] { return tg::matmul(z, z); }},
        {"relu", [&] { return tg::relu(z); }},
        {"gt", [&] { return z > x; }},
        {"amax", [&] { return z.amax(); }},
        {"sort", [&] { return std::get<0>(tg::sort(z, -1)); }},
        {"div", [&] { return x / z; }},
        {"cat",
         [&] {
           return tg::cat({z, z});
         }},
        {"index_select",
         [&] { return z.index_select(0, tg::zeros({1}, tg::TensorOptions().dtype(tg::kInt64).device(dev))); }},
        {"where", [&] { return tg::where(x > 0, z, z); }},
        {"mean", [&] { return z.mean(); }},
        {"abs", [&] { return tg::abs(z); }},
        {"cholesky", [&] { return tg::linalg::cholesky(z); }},
        {"randn", [&] { return tg::randn({2}, tg::TensorOptions().dtype(tg::kComplex64).device(dev)); }},
    };
    for (const auto& [name, f] : ops) {
      try {
        f();
        ADD_FAILURE() << name << " accepted a complex operand";
      } catch (const tg::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("Complex"), std::string::npos) << name << ": " << msg;
        EXPECT_EQ(msg.find("internal"), std::string::npos) << name << ": " << msg;
      }
    }
    EXPECT_EQ((x + x).sum().item<float>(), 8.0f);
  }
}

TEST(Complex, SafetensorsRefusesComplexNamingTheWayOut) {
  const std::string path = (std::filesystem::temp_directory_path() / "tg_complex_refused.safetensors").string();
  std::remove(path.c_str());
  Tensor z = tg::zeros({2}, tg::kComplex64);
  EXPECT_ERROR_CONTAINS(tg::nn::save_safetensors(path, {{"z", z}}), "view_as_real");
  EXPECT_FALSE(std::filesystem::exists(path));
  tg::nn::save_safetensors(path, {{"z", tg::view_as_real(z)}});
  EXPECT_TRUE(std::filesystem::exists(path));
  std::remove(path.c_str());
}

// The adversary's findings on the first part (each was silently wrong or a
// crash): complex data aligned only as its parts, forward mode across
// dtype views, custom functions with complex outputs, sparse complex.
TEST(Complex, DataAlignedAsItsPartsWorks) {
  alignas(64) static double buf[2 + 8];
  for (int i = 0; i < 10; ++i)
    buf[i] = i;
  // 8-byte aligned, not 16: a Float64 view whose complex view holds (1, 2), (3, 4), ...
  Tensor x = tg::from_blob(buf + 1, {4, 2}, {}, tg::kFloat64, kCpu);
  Tensor z = tg::view_as_complex(x);
  EXPECT_TRUE(z.to_vector<complex<double>>()[1] == complex<double>(3, 4));
  EXPECT_TRUE(z.to(tg::kComplex64).to_vector<complex<float>>()[3] == complex<float>(7, 8));
  EXPECT_EQ(z.to(tg::kFloat64).to_vector<double>(), (std::vector<double>{1, 3, 5, 7}));
  std::ostringstream os;
  os << z;
  EXPECT_NE(os.str().find("7.0000+8.0000j"), std::string::npos) << os.str();
  z.fill_(1.0);
  EXPECT_EQ(buf[1], 1.0);
  EXPECT_EQ(buf[2], 0.0);
  Tensor b = tg::from_blob(buf + 1, {4}, {}, tg::kComplex128, kCpu);
  EXPECT_TRUE(b.clone().to_vector<complex<double>>()[0] == complex<double>(1, 0));
}

TEST(Complex, ForwardModeRefusesInPlaceWritesAcrossDtypeViews) {
  namespace fwd = tg::autograd::forward_ad;
  const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  fwd::dual_level level;
  Tensor dual = fwd::make_dual(tg::ones({2, 2}, f64), tg::full({2, 2}, 5.0, f64));
  {
    Tensor x = tg::zeros({2, 2}, f64);
    Tensor r = tg::view_as_real(tg::view_as_complex(x));
    EXPECT_ERROR_CONTAINS(r.copy_(dual), "complex view shares");
    EXPECT_ERROR_CONTAINS(x.copy_(dual), "complex view shares");
    EXPECT_FALSE(x.has_tangent() || r.has_tangent());
  }
  {
    Tensor z = tg::zeros({2}, tg::TensorOptions().dtype(tg::kComplex128));
    EXPECT_ERROR_CONTAINS(tg::view_as_real(z).copy_(dual), "complex view shares");
    EXPECT_ERROR_CONTAINS(tg::real(z).copy_(dual.select(1, 0)), "complex view shares");
  }
  // Memory never viewed across dtypes still takes tangents in place.
  Tensor y = tg::zeros({2, 2}, f64);
  y.copy_(dual);
  EXPECT_TRUE(y.has_tangent());
}

struct MakeComplex : tg::autograd::Function<MakeComplex> {
  static Tensor forward(tg::autograd::AutogradContext*, const Tensor& x) {
    return tg::view_as_complex(x.detach()).clone();
  }
  static tg::autograd::variable_list backward(tg::autograd::AutogradContext*, tg::autograd::variable_list g) {
    return {tg::view_as_real(g[0])};
  }
};

TEST(Complex, CustomFunctionWithAComplexOutputIsRefusedWhenRecorded) {
  Tensor x = tg::ones({2, 2}, tg::TensorOptions().dtype(tg::kFloat64)).requires_grad_();
  EXPECT_ERROR_CONTAINS(MakeComplex::apply(x), "complex tensors are not differentiable");
  EXPECT_EQ(MakeComplex::apply(x.detach()).dtype(), tg::kComplex128);  // nothing to record: fine
  // view_as_complex refuses a tensor that requires grad with grad mode off
  // too (documented: detach() it).
  tg::autograd::NoGradGuard off;
  EXPECT_ERROR_CONTAINS(tg::view_as_complex(x), "detach()");
}

TEST(Complex, AComplexGradAssignedToARealLeafIsNamedAtAccumulation) {
  Tensor x = tg::ones({2}, tg::TensorOptions().dtype(tg::kFloat64)).requires_grad_();
  x.mutable_grad() = tg::zeros({2}, tg::TensorOptions().dtype(tg::kComplex128));
  EXPECT_ERROR_CONTAINS((x * 2).sum().backward(), "has a Complex128 .grad (assigned through mutable_grad()?)");
  x.mutable_grad() = Tensor();
  (x * 2).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

TEST(Complex, SparseTensorsRefuseComplex) {
  Tensor i = tg::zeros({1, 1}, tg::TensorOptions().dtype(tg::kInt64));
  Tensor s = tg::sparse_coo_tensor(i, tg::ones({1}), {3});
  EXPECT_ERROR_CONTAINS(s.to(tg::kComplex64), "sparse tensors cannot be Complex64");
}

}  // namespace
}  // namespace tgtest
