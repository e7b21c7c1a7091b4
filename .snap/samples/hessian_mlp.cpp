// The Hessian benchmark at a small size: per-sample input Hessians of an
// MLP 2 -> 64 x3 -> 3 (silu) for B = 256 samples, by four paths (reference
// rows, batched cotangents, Taylor mode for any function and mlp_taylor),
// in float64; they must
// agree to 1e-10, and the Hessian of u must be symmetric. Prints times.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <tapegrad/tapegrad.h>

using tg::Tensor;
namespace ag = tg::autograd;

int main() {
  auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  tg::manual_seed(7);
  std::vector<int64_t> sizes{2, 64, 64, 64, 3};
  std::vector<Tensor> w, b;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    w.push_back((tg::randn({sizes[l + 1], sizes[l]}, f64) / std::sqrt(double(sizes[l]))).requires_grad_());
    b.push_back((tg::randn({sizes[l + 1]}, f64) * 0.1).requires_grad_());
  }
  auto mlp = [&](const Tensor& x) {
    Tensor h = x;
    for (size_t l = 0; l < w.size(); ++l) {
      h = tg::linear(h, w[l], b[l]);
      if (l + 1 < w.size()) h = tg::silu(h);
    }
    return h;
  };
  Tensor x = tg::rand({256, 2}, f64) * 2 - 1;
  auto timed = [](const char* name, auto&& f) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor h = f();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-22s %8.2f ms\n", name, ms);
    return h;
  };
  Tensor rows = timed("rows (reference)", [&] { return ag::per_sample_hessian(mlp, x, ag::HessianStrategy::Rows); });
  Tensor batched = timed("batched cotangents",
                         [&] { return ag::per_sample_hessian(mlp, x, ag::HessianStrategy::BatchedCotangents); });
  Tensor general =
      timed("taylor mode (any fn)", [&] { return ag::per_sample_hessian(mlp, x, ag::HessianStrategy::Taylor); });
  Tensor taylor = timed("taylor (mlp_taylor)", [&] {
    tg::NoGradGuard no_grad;
    return ag::mlp_taylor(w, b, tg::Activation::Silu, x).hessian;
  });
  double e1 = tg::amax(tg::abs(batched - rows)).item<double>();
  double e2 =
      std::max(tg::amax(tg::abs(taylor - rows)).item<double>(), tg::amax(tg::abs(general - rows)).item<double>());
  double asym = tg::amax(tg::abs(rows - rows.transpose(2, 3))).item<double>();
  std::printf(
      "H shape [%lld, %lld, %lld, %lld]; max |batched - rows| %.2e, |taylor - rows| %.2e (both Taylor paths), "
      "asymmetry %.2e\n",
      (long long)rows.size(0), (long long)rows.size(1), (long long)rows.size(2), (long long)rows.size(3), e1, e2, asym);
  std::printf("H[0, u] = [[%.6f, %.6f], [%.6f, %.6f]]\n", rows[0][0][0][0].item<double>(),
              rows[0][0][0][1].item<double>(), rows[0][0][1][0].item<double>(), rows[0][0][1][1].item<double>());
  return e1 < 1e-10 && e2 < 1e-10 && asym < 1e-12 ? 0 : 1;
}
