// A Fourier Neural Operator learns the solution operator of Darcy flow,
//   -div(a(x) grad u(x)) = 1 on the unit square, u = 0 on its boundary,
// from coefficient fields a to solutions u, with every step in tapegrad:
// - the coefficients: a Gaussian random field psi (white noise filtered in
//   Fourier space by (4 pi^2 |k|^2 + tau^2)^(-alpha / 2), with tg::fft),
//   thresholded: a = 12 where psi >= 0, else 3 (Li et al.'s Darcy data);
// - the solutions: the five-point finite-difference operator (face
//   coefficients the means of the neighbouring cells'), solved by conjugate
//   gradients, batched over the fields, in Float64;
// - the model: nn::FNO (width 16, 8 x 8 modes, 4 Fourier layers) trained with
//   Adam on the relative L2 error, which it reports on held-out fields as it
//   falls.
// On the GPU when there is one. Exits non-zero unless the test error falls
// below half its first value and below 0.15.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>

#include <tapegrad/tapegrad.h>

using tg::Tensor;

namespace {

constexpr double kPi = 3.14159265358979323846;

// psi [n, s, s]: white noise filtered by (4 pi^2 |k|^2 + tau^2)^(-alpha/2).
Tensor random_field(int64_t n, int64_t s, const tg::TensorOptions& opt) {
  const double tau = 3, alpha = 2;
  Tensor k1 = tg::fft::fftfreq(s, 1.0 / double(s), opt).view({s, 1});
  Tensor k2 = tg::fft::rfftfreq(s, 1.0 / double(s), opt).view({1, s / 2 + 1});
  Tensor filter = tg::pow(4 * kPi * kPi * (k1 * k1 + k2 * k2) + tau * tau, -alpha / 2);
  Tensor noise = tg::randn({n, s, s}, opt);
  return tg::fft::irfft2(tg::fft::rfft2(noise) * filter, tg::IntList{s, s});
}

// t [n, s, s] with a border of `value`, or of its edge values (replicate).
Tensor pad1(const Tensor& t, bool replicate) {
  const int64_t s = t.size(1);
  auto edge = [&](const Tensor& x, int64_t dim, int64_t at) {
    return replicate ? x.narrow(dim, at, 1) : tg::zeros_like(x.narrow(dim, at, 1));
  };
  Tensor rows = tg::cat({edge(t, 1, 0), t, edge(t, 1, s - 1)}, 1);
  return tg::cat({edge(rows, 2, 0), rows, edge(rows, 2, s - 1)}, 2);
}

// A u for the operator -div(a grad u) (u = 0 outside), h the grid step.
struct Darcy {
  Tensor ae, aw, an, as;  // face coefficients [n, s, s]
  double inv_h2;
  Darcy(const Tensor& a, double h) : inv_h2(1 / (h * h)) {
    Tensor p = pad1(a, true);
    const int64_t s = a.size(1);
    Tensor c = p.narrow(1, 1, s).narrow(2, 1, s);
    ae = (p.narrow(1, 1, s).narrow(2, 2, s) + c) * 0.5;
    aw = (p.narrow(1, 1, s).narrow(2, 0, s) + c) * 0.5;
    an = (p.narrow(1, 0, s).narrow(2, 1, s) + c) * 0.5;
    as = (p.narrow(1, 2, s).narrow(2, 1, s) + c) * 0.5;
  }
  Tensor apply(const Tensor& u) const {
    const int64_t s = u.size(1);
    Tensor p = pad1(u, false);
    Tensor e = p.narrow(1, 1, s).narrow(2, 2, s), w = p.narrow(1, 1, s).narrow(2, 0, s);
    Tensor n = p.narrow(1, 0, s).narrow(2, 1, s), so = p.narrow(1, 2, s).narrow(2, 1, s);
    return (ae * (u - e) + aw * (u - w) + an * (u - n) + as * (u - so)) * inv_h2;
  }
};

// Conjugate gradients for A u = 1, every field at once; returns u and the
// largest relative residual.
std::pair<Tensor, double> solve(const Darcy& A, const Tensor& like, int iterations) {
  auto dot = [](const Tensor& x, const Tensor& y) { return (x * y).sum({1, 2}, true); };
  Tensor b = tg::ones_like(like), u = tg::zeros_like(like), r = b.clone(), p = r.clone();
  Tensor rs = dot(r, r);
  const Tensor bb = dot(b, b);
  for (int it = 0; it < iterations; ++it) {
    Tensor ap = A.apply(p);
    Tensor alpha = rs / dot(p, ap);
    u = u + alpha * p;
    r = r - alpha * ap;
    Tensor rs_new = dot(r, r);
    p = r + (rs_new / rs) * p;
    rs = rs_new;
  }
  return {u, tg::sqrt(rs / bb).amax().item<double>()};
}

// Mean over the batch of |pred - target| / |target| (per field).
Tensor relative_l2(const Tensor& pred, const Tensor& target) {
  const int64_t b = pred.size(0);
  Tensor d = (pred - target).reshape({b, -1}), t = target.reshape({b, -1});
  return (tg::sqrt((d * d).sum({1})) / tg::sqrt((t * t).sum({1}))).mean();
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 40;
  int64_t n_train = 256, n_test = 64;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0 && i + 1 < argc) epochs = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--train") == 0 && i + 1 < argc) n_train = std::atoll(argv[++i]);
  }
  const int64_t s = 32, batch = 16;
  const tg::Device dev = tg::cuda::is_available() ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  tg::manual_seed(0);
  Tensor a, u;
  double residual = 0;
  {
    tg::NoGradGuard no_grad;
    const auto f64 = tg::TensorOptions().dtype(tg::kFloat64).device(dev);
    Tensor psi = random_field(n_train + n_test, s, f64);
    a = tg::where(tg::ge(psi, 0.0), tg::full_like(psi, 12.0), 3.0);
    std::tie(u, residual) = solve(Darcy(a, 1.0 / double(s + 1)), a, 400);
  }
  std::printf("Darcy flow on a %lld x %lld grid: %lld training and %lld test fields (CG residual %.1e), on %s\n",
              (long long)s, (long long)s, (long long)n_train, (long long)n_test, residual,
              dev.is_cuda() ? "CUDA" : "CPU");
  // Inputs [n, s, s, 1] normalized; targets scaled to order 1.
  Tensor x = ((a - a.mean()) / a.std()).to(tg::kFloat32).unsqueeze(-1);
  const double u_scale = u.abs().amax().item<double>();
  Tensor y = (u / u_scale).to(tg::kFloat32).unsqueeze(-1);
  Tensor x_train = x.narrow(0, 0, n_train), y_train = y.narrow(0, 0, n_train);
  Tensor x_test = x.narrow(0, n_train, n_test), y_test = y.narrow(0, n_train, n_test);

  tg::nn::FNOOptions o;
  o.width = 16;
  o.modes = {8, 8};
  o.projection = 64;
  o.options = tg::TensorOptions().device(dev);
  tg::nn::FNO model(o);
  tg::optim::AdamOptions ao;
  ao.lr = 3e-3;
  tg::optim::Adam opt(model->parameters(), ao);
  auto test_error = [&] {
    tg::NoGradGuard no_grad;
    return relative_l2(model->forward(x_test), y_test).item<float>();
  };
  const float first = test_error();
  std::printf("epoch  0: test relative L2 %.4f\n", first);
  float last = first;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    Tensor perm = tg::argsort(tg::rand({n_train}, tg::TensorOptions().device(dev)));  // a random order
    double train = 0;
    for (int64_t b0 = 0; b0 + batch <= n_train; b0 += batch) {
      Tensor idx = perm.narrow(0, b0, batch);
      opt.zero_grad();
      Tensor loss = relative_l2(model->forward(x_train.index_select(0, idx)), y_train.index_select(0, idx));
      loss.backward();
      opt.step();
      train += loss.item<float>() * double(batch) / double(n_train);
    }
    if (epoch % 20 == 0) opt.set_lr(opt.lr() * 0.5);
    last = test_error();
    if (epoch % 5 == 0 || epoch == epochs)
      std::printf("epoch %2d: train relative L2 %.4f, test %.4f\n", epoch, train, last);
  }
  const bool ok = std::isfinite(last) && last < 0.5f * first && last < 0.15f;
  std::printf("%s: test relative L2 %.4f (from %.4f)\n", ok ? "ok" : "FAILED", last, first);
  return ok ? 0 : 1;
}
