// Ceres Solver fitting y = exp(m x + c) to 64 samples (Levenberg-Marquardt),
// its residuals and their Jacobian supplied by tapegrad through a
// ceres::CostFunction adapter (TapegradCost: one residual function written
// with tensor ops, its Jacobian from tg::autograd::jacobian, Ceres' memory
// viewed with tg::from_blob). The same problem is then solved with Ceres'
// own automatic differentiation (AutoDiffCostFunction); exits non-zero
// unless both converge, agree on (m, c) to 1e-6, and recover the generating
// (0.3, 0.1) to 1e-2.
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include <ceres/ceres.h>

#include <tapegrad/tapegrad.h>

using tg::Tensor;

namespace {

// A ceres::CostFunction whose residuals (a tensor of num_residuals) are a
// tapegrad function of one parameter block (a tensor of block_size); the
// Jacobian Ceres asks for comes from tapegrad's reverse mode.
class TapegradCost : public ceres::CostFunction {
 public:
  using Residuals = std::function<Tensor(const Tensor& params)>;
  TapegradCost(Residuals fn, int num_residuals, int block_size) : fn_(std::move(fn)) {
    set_num_residuals(num_residuals);
    mutable_parameter_block_sizes()->push_back(block_size);
  }
  bool Evaluate(double const* const* parameters, double* residuals, double** jacobians) const override {
    const int64_t p = parameter_block_sizes()[0], r = num_residuals();
    auto cpu = tg::Device(tg::kCPU);
    // Ceres' parameters, read only: a copy that can require grad.
    Tensor x = tg::from_blob(const_cast<double*>(parameters[0]), {p}, {}, tg::kFloat64, cpu).clone();
    Tensor out = tg::from_blob(residuals, {r}, {}, tg::kFloat64, cpu);
    if (jacobians && jacobians[0]) {
      // Row-major [r, p], as Ceres lays it out.
      Tensor J = tg::from_blob(jacobians[0], {r, p}, {}, tg::kFloat64, cpu);
      J.copy_(tg::autograd::jacobian(fn_, x));
    }
    tg::autograd::NoGradGuard ng;
    out.copy_(fn_(x));
    return true;
  }

 private:
  Residuals fn_;
};

// The same residuals for Ceres' own automatic differentiation.
struct ExpResidual {
  ExpResidual(const std::vector<double>* x, const std::vector<double>* y) : x_(x), y_(y) {}
  template <class T> bool operator()(const T* mc, T* res) const {
    for (size_t i = 0; i < x_->size(); ++i)
      res[i] = T((*y_)[i]) - ceres::exp(mc[0] * (*x_)[i] + mc[1]);
    return true;
  }
  const std::vector<double>*x_, *y_;
};

}  // namespace

int main() {
  const int n = 64;
  std::vector<double> xs(n), ys(n);
  for (int i = 0; i < n; ++i) {
    xs[size_t(i)] = 5.0 * i / (n - 1);
    ys[size_t(i)] = std::exp(0.3 * xs[size_t(i)] + 0.1) + 0.01 * std::sin(7.0 * xs[size_t(i)]);  // a fixed "noise"
  }
  const Tensor x = tg::tensor(xs).to(tg::kFloat64), y = tg::tensor(ys).to(tg::kFloat64);
  auto residuals = [x, y](const Tensor& mc) { return y - tg::exp(x * mc.select(0, 0) + mc.select(0, 1)); };

  ceres::Solver::Options options;
  options.linear_solver_type = ceres::DENSE_QR;
  options.max_num_iterations = 100;
  options.function_tolerance = 1e-14;
  options.parameter_tolerance = 1e-14;
  options.gradient_tolerance = 1e-14;

  double tg_mc[2] = {0.0, 0.0};
  ceres::Problem tg_problem;
  tg_problem.AddResidualBlock(new TapegradCost(residuals, n, 2), nullptr, tg_mc);
  ceres::Solver::Summary tg_summary;
  ceres::Solve(options, &tg_problem, &tg_summary);
  std::printf("tapegrad's Jacobian: m = %.10f, c = %.10f, cost %.6e, %d iterations (%s)\n", tg_mc[0], tg_mc[1],
              tg_summary.final_cost, int(tg_summary.iterations.size()),
              ceres::TerminationTypeToString(tg_summary.termination_type));

  double ad_mc[2] = {0.0, 0.0};
  ceres::Problem ad_problem;
  ad_problem.AddResidualBlock(
      new ceres::AutoDiffCostFunction<ExpResidual, ceres::DYNAMIC, 2>(new ExpResidual(&xs, &ys), n), nullptr, ad_mc);
  ceres::Solver::Summary ad_summary;
  ceres::Solve(options, &ad_problem, &ad_summary);
  std::printf("Ceres' autodiff:     m = %.10f, c = %.10f, cost %.6e, %d iterations\n", ad_mc[0], ad_mc[1],
              ad_summary.final_cost, int(ad_summary.iterations.size()));

  const bool ok = tg_summary.IsSolutionUsable() && ad_summary.IsSolutionUsable() &&
                  std::fabs(tg_mc[0] - ad_mc[0]) < 1e-6 && std::fabs(tg_mc[1] - ad_mc[1]) < 1e-6 &&
                  std::fabs(tg_mc[0] - 0.3) < 1e-2 && std::fabs(tg_mc[1] - 0.1) < 1e-2;
  std::printf("%s\n", ok ? "ok: the two fits agree and recover (0.3, 0.1)" : "FAILED");
  return ok ? 0 : 1;
}
