// SUNDIALS' CVODE (BDF, Newton with a dense linear solver) integrating the
// stiff Robertson chemical kinetics
//   y1' = -0.04 y1 + 1e4 y2 y3
//   y2' =  0.04 y1 - 1e4 y2 y3 - 3e7 y2^2
//   y3' =  3e7 y2^2,            y(0) = [1, 0, 0],
// from 0 to 4e10, with the right-hand side and its Jacobian supplied by
// tapegrad: f written once with tensor ops over CVODE's own vector memory
// (tg::from_blob views, no copies) and J = df/dy from
// tg::autograd::jacobian. Prints the solution at 0.4, 4, ..., 4e10 and
// CVODE's counters; exits non-zero unless y(0.4) matches the reference
// values SUNDIALS' own example prints (cvRoberts_dns) to 1e-3 relative,
// y1 + y2 + y3 stays 1 to 1e-6, and CVODE called tapegrad's Jacobian.
#include <cmath>
#include <cstdio>

#include <cvode/cvode.h>
#include <nvector/nvector_serial.h>
#include <sunlinsol/sunlinsol_dense.h>
#include <sunmatrix/sunmatrix_dense.h>

#include <tapegrad/tapegrad.h>

using tg::Tensor;

namespace {

// The Robertson right-hand side, as tensor ops (y: [3], float64).
Tensor robertson(const Tensor& y) {
  Tensor y1 = y.select(0, 0), y2 = y.select(0, 1), y3 = y.select(0, 2);
  Tensor r1 = y1 * 0.04, r2 = y2 * y3 * 1e4, r3 = y2 * y2 * 3e7;
  return tg::stack({r2 - r1, r1 - r2 - r3, r3}, 0);
}

// CVODE's N_Vector memory as a tensor (no copy).
Tensor view(N_Vector v) {
  return tg::from_blob(N_VGetArrayPointer(v), {N_VGetLength(v)}, {}, tg::kFloat64, tg::Device(tg::kCPU));
}

long jacobian_calls = 0;

int rhs(sunrealtype, N_Vector y, N_Vector ydot, void*) {
  try {
    tg::autograd::NoGradGuard ng;
    view(ydot).copy_(robertson(view(y)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rhs: %s\n", e.what());
    return -1;  // unrecoverable: CVODE stops and reports it
  }
}

int jac(sunrealtype, N_Vector y, N_Vector, SUNMatrix J, void*, N_Vector, N_Vector, N_Vector) {
  try {
    ++jacobian_calls;
    Tensor Jt = tg::autograd::jacobian(robertson, view(y).clone());  // [3, 3], J[i][j] = df_i / dy_j
    // SUNDIALS' dense matrix is column-major: element (i, j) at data[j * rows + i].
    Tensor out = tg::from_blob(SUNDenseMatrix_Data(J), {3, 3}, {1, 3}, tg::kFloat64, tg::Device(tg::kCPU));
    out.copy_(Jt);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jac: %s\n", e.what());
    return -1;
  }
}

}  // namespace

int main() {
  SUNContext ctx = nullptr;
  if (SUNContext_Create(nullptr, &ctx) != 0) return 1;
  N_Vector y = N_VNew_Serial(3, ctx), abstol = N_VNew_Serial(3, ctx);
  view(y).copy_(tg::tensor({1.0, 0.0, 0.0}).to(tg::kFloat64));
  view(abstol).copy_(tg::tensor({1e-8, 1e-14, 1e-6}).to(tg::kFloat64));
  void* cv = CVodeCreate(CV_BDF, ctx);
  SUNMatrix A = SUNDenseMatrix(3, 3, ctx);
  SUNLinearSolver LS = SUNLinSol_Dense(y, A, ctx);
  bool ok = cv && A && LS && CVodeInit(cv, rhs, 0.0, y) == CV_SUCCESS &&
            CVodeSVtolerances(cv, 1e-4, abstol) == CV_SUCCESS && CVodeSetLinearSolver(cv, LS, A) == CV_SUCCESS &&
            CVodeSetJacFn(cv, jac) == CV_SUCCESS && CVodeSetMaxNumSteps(cv, 5000) == CV_SUCCESS;
  double y04[3] = {0, 0, 0}, worst_sum = 0;
  double tout = 0.4;
  for (int k = 0; ok && k < 12; ++k, tout *= 10) {
    sunrealtype t = 0;
    if (CVode(cv, tout, y, &t, CV_NORMAL) < 0) {
      std::fprintf(stderr, "CVode failed at t = %g\n", double(t));
      ok = false;
      break;
    }
    const double* v = N_VGetArrayPointer(y);
    std::printf("t = %9.3e  y = %13.6e %13.6e %13.6e\n", double(t), v[0], v[1], v[2]);
    if (k == 0)
      for (int i = 0; i < 3; ++i)
        y04[i] = v[i];
    worst_sum = std::max(worst_sum, std::fabs(v[0] + v[1] + v[2] - 1));
  }
  long steps = 0, rhs_evals = 0, jac_evals = 0;
  CVodeGetNumSteps(cv, &steps);
  CVodeGetNumRhsEvals(cv, &rhs_evals);
  CVodeGetNumJacEvals(cv, &jac_evals);
  std::printf("CVODE: %ld steps, %ld right-hand sides, %ld Jacobians (tapegrad's: %ld)\n", steps, rhs_evals, jac_evals,
              jacobian_calls);
  // cvRoberts_dns's printed values at t = 0.4.
  const double ref[3] = {9.8517e-01, 3.3864e-05, 1.4794e-02};
  for (int i = 0; i < 3; ++i)
    ok = ok && std::fabs(y04[i] - ref[i]) <= 1e-3 * ref[i] + 1e-12;
  ok = ok && worst_sum < 1e-6 && jacobian_calls > 0 && jacobian_calls == jac_evals;
  std::printf("%s: y(0.4) against SUNDIALS' reference, y1 + y2 + y3 - 1 at most %.2e\n", ok ? "ok" : "FAILED",
              worst_sum);
  SUNLinSolFree(LS);
  SUNMatDestroy(A);
  N_VDestroy(y);
  N_VDestroy(abstol);
  CVodeFree(&cv);
  SUNContext_Free(&ctx);
  return ok ? 0 : 1;
}
