// A sparse finite-difference PDE trained with the engine: −Δu = f on the unit
// square, u = 0 on the boundary, f = 2π² sin(πx) sin(πy) (solution
// sin(πx) sin(πy)). The 5-point Laplacian of the N × N interior grid is a
// sparse COO matrix L (built from index/value lists, coalesced once); a
// network u(x, y) = x(1 − x) y(1 − y) N(x, y) (2 → 32 → 32 → 1, tanh) is fit
// so that L u = f at the grid points: the loss mean((L u − f)²) goes through
// sparse @ dense (mm), and its gradient through S^T @ dY. Adam, 2000 steps.
// Prints progress and the relative L2 error against the analytic solution;
// exits non-zero if it is above 2e-2 (the grid's own error is ~1e-3).
#include <cmath>
#include <cstdio>

#include <tapegrad/tapegrad.h>

#include "sample_util.h"

using tg::Tensor;

namespace {

constexpr double kPi = 3.14159265358979323846;

// −Δ on the N × N interior points of a grid with spacing h (Dirichlet zero
// boundary): 4/h² on the diagonal, −1/h² to each interior neighbour.
Tensor laplacian(int64_t N, double h) {
  std::vector<double> rows, cols, vals;
  auto id = [N](int64_t i, int64_t j) { return double(i * N + j); };
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j) {
      rows.push_back(id(i, j)), cols.push_back(id(i, j)), vals.push_back(4 / (h * h));
      const int64_t di[4] = {-1, 1, 0, 0}, dj[4] = {0, 0, -1, 1};
      for (int k = 0; k < 4; ++k) {
        int64_t a = i + di[k], b = j + dj[k];
        if (a < 0 || a >= N || b < 0 || b >= N) continue;
        rows.push_back(id(i, j)), cols.push_back(id(a, b)), vals.push_back(-1 / (h * h));
      }
    }
  std::vector<double> ind = rows;
  ind.insert(ind.end(), cols.begin(), cols.end());
  int64_t nnz = int64_t(vals.size());
  Tensor indices = tg::tensor(ind, {2, nnz}, tg::TensorOptions().dtype(tg::kInt64));
  Tensor values = tg::tensor(vals, {}, tg::TensorOptions().dtype(tg::kFloat64));
  return tg::sparse_coo_tensor(indices, values, {N * N, N * N}).coalesce();
}

}  // namespace

int main() {
  auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  const int64_t N = 24;
  const double h = 1.0 / double(N + 1);
  Tensor L = laplacian(N, h);
  std::printf("Laplacian: %lld x %lld sparse COO, nnz %lld\n", (long long)(N * N), (long long)(N * N),
              (long long)L.nnz());
  Tensor t = (tg::arange(N, f64) + 1.0) * h;
  Tensor xy = tg::stack({t.view({N, 1}).expand({N, N}).reshape({-1}), t.view({1, N}).expand({N, N}).reshape({-1})}, 1);
  Tensor x = xy.select(1, 0), y = xy.select(1, 1);
  Tensor exact = tg::sin(x * kPi) * tg::sin(y * kPi);
  Tensor f = (exact * (2 * kPi * kPi)).view({N * N, 1});

  tg::manual_seed(5);
  std::vector<Tensor> params = sample::tanh_mlp_params({2, 32, 32, 1});
  Tensor bubble = (x * (1.0 - x) * y * (1.0 - y)).view({N * N, 1});
  auto u = [&] { return bubble * sample::tanh_mlp(params, xy); };  // [N², 1]
  sample::Adam opt(params, 5e-3);
  const int steps = 2000;
  double loss_v = 0;
  for (int it = 0; it < steps; ++it) {
    Tensor r = tg::mm(L, u()) - f;  // sparse @ dense
    Tensor loss = tg::square(r).mean();
    loss.backward();
    opt.step();
    loss_v = loss.item<double>();
    if (it % 400 == 0) std::printf("step %4d  residual loss %.4e\n", it, loss_v);
  }
  Tensor pred;
  {
    tg::NoGradGuard no_grad;
    pred = u().view({-1});
  }
  const double rel = std::sqrt(tg::square(pred - exact).sum().item<double>() / tg::square(exact).sum().item<double>());
  std::printf("final residual loss %.4e; relative L2 error against sin(pi x) sin(pi y): %.3e\n", loss_v, rel);
  return rel < 2e-2 ? 0 : 1;
}
