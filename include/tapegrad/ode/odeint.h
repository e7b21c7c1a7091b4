// Differentiable ODE solvers (docs/INTEROP.md "odeint"), as torchdiffeq's
// odeint and odeint_adjoint: y' = f(t, y) from y(t[0]) = y0, the solution at
// every time of t. Gradients with respect to y0, the tensors f closes over
// and the times, by backpropagation through the solver's steps (any order:
// create_graph works through it) or by the adjoint method (the augmented
// system solved backwards between checkpoints of the forward solution).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <tapegrad/tensor/tensor.h>

namespace tg::ode {

/// The right-hand side: dy/dt at time t (a 0-d tensor of y0's dtype, on
/// its device) and state y (y0's shape and dtype; any batch dims are the
/// caller's). It must return a new tensor of y's shape, dtype and device
/// each call (not a buffer it overwrites later: the solver keeps the
/// stages).
using OdeFunction = std::function<Tensor(const Tensor& t, const Tensor& y)>;

/// The integration scheme.
enum class Method {
  Euler,     ///< explicit Euler (order 1), fixed steps
  Midpoint,  ///< explicit midpoint (order 2), fixed steps
  RK4,       ///< the classic Runge-Kutta method (order 4), fixed steps
  Dopri5,    ///< Dormand-Prince 5(4), adaptive steps (rtol, atol)
  Tsit5,     ///< Tsitouras 5(4), adaptive steps (rtol, atol)
};

/// How gradients reach y0, the parameters and the times.
enum class Gradient {
  /// Through the solver's own operations (recorded like any others): the
  /// exact gradients of the computed solution for fixed steps, to any order;
  /// adaptive methods hold their step sizes fixed (the controller's choices
  /// are not differentiated), so theirs approach the exact derivative as
  /// the tolerance tightens (7% off at rtol 1e-3, 6e-5 at 1e-6 on a cubic
  /// test). Memory grows with the number of steps.
  Backprop,
  /// The adjoint method: the forward solve records nothing; backward solves
  /// the augmented system [y, a = dL/dy, dL/dparams] from the last time to
  /// the first with the same method, restarting y at each requested time
  /// from the forward solution there (checkpoints), so memory does not grow
  /// with the steps. The gradients are those of the exact solution, up to
  /// the solver's error. Needs `params`; once differentiable (a
  /// create_graph through it is refused at the second differentiation).
  Adjoint,
};

/// odeint's options.
struct OdeOptions {
  Method method = Method::Dopri5;  ///< the scheme
  /// Adaptive methods: a step is accepted when the RMS over every element
  /// of its error estimate / (atol + rtol * max(|y_n|, |y_n+1|)) is <= 1.
  double rtol = 1e-7;
  double atol = 1e-9;  ///< see rtol
  /// Fixed-step methods: equal steps between consecutive requested times,
  /// this many per interval, at most 1e12 (no host read of t: capturable in
  /// a CUDA graph).
  int64_t steps_per_interval = 1;
  /// Fixed-step methods, when > 0: each interval is cut into the fewest
  /// equal steps of at most this size (reads t on the host).
  double step_size = 0;
  /// Adaptive: the forward solve's first step size (0: chosen from f's
  /// scale, as Hairer's; the adjoint's backward solves always choose theirs).
  double first_step = 0;
  int64_t max_steps = 100000;              ///< adaptive: accepted plus rejected steps per solve before giving up
  Gradient gradient = Gradient::Backprop;  ///< see Gradient
  /// The tensors f reads that need gradients (Gradient::Adjoint computes
  /// dL/dparams for those of them that require grad; Backprop ignores the
  /// list: autograd follows f's operations). For the adjoint each is listed
  /// once (a repeat, or two views sharing an element that both require grad,
  /// is refused; disjoint slices and interleaved views, such as a matrix's
  /// columns, of one buffer are fine) and none computed from another listed
  /// one (not detected: its gradient would also reach that one through the
  /// first, counted twice). Changing one in place between the solve and
  /// backward is reported as a stale saved tensor.
  std::vector<Tensor> params;
  /// Gradient::Adjoint on CUDA: the backward solve captures f and its
  /// vector-Jacobian product in a CUDA graph at its first evaluation (one
  /// graph with the parameters' part, one without, where the method uses
  /// both) and replays it for every later one, as JAX's jit traces f once:
  /// f is then called at most twice per backward for the solve, not at every
  /// stage (a gradient in t still calls it once per output time). Only for an f that is a function of t, y
  /// and tensors whose memory stays put during the backward, with no effect
  /// on the host that must happen at each call. An f that cannot be captured
  /// (it reads the device from the host, or throws during capture) is called
  /// eagerly for the rest of that backward. Ignored on the CPU, and under a
  /// capture of the backward itself.
  bool graphed_adjoint = false;
  /// Gradient::Adjoint with an adaptive method: false (the default, as
  /// torchdiffeq's) controls the backward solve's steps by the largest of
  /// the errors (RMS) of y, dL/dy and each parameter's gradient (those of a
  /// dtype at least as precise as the state's: a float32 parameter's
  /// rounding beside a float64 state would set the steps); true leaves the
  /// parameters' gradients out (the seminorm of Kidger, Chen and Lyons, ICML
  /// 2021; torchdiffeq's adjoint_options=dict(norm="seminorm")): usually
  /// fewer steps, with the parameters' gradients accurate to the steps y and
  /// dL/dy need. (JAX's odeint takes one RMS over the whole state instead.)
  bool adjoint_seminorm = false;
};

/// What one solve did: the forward solve (the adjoint's backward solves are
/// not counted).
struct OdeStats {
  int64_t accepted = 0;     ///< steps taken
  int64_t rejected = 0;     ///< adaptive steps retried smaller
  int64_t evaluations = 0;  ///< calls of f
};

/// The solution of y' = f(t, y), y(t[0]) = y0, at every time of `t` (1-D,
/// floating, finite, strictly increasing or strictly decreasing;
/// integration runs in its direction; converted to y0's dtype): a tensor
/// [t.size(0)] + y0's shape whose first entry equals y0. y0 floating, on
/// t's device. Adaptive methods interpolate between their steps, each with
/// its own 4th-order interpolant (Dopri5: Shampine's continuous extension;
/// Tsit5: Tsitouras'). Refused with a tg::Error naming
/// odeint: bad shapes or dtypes, times not strictly monotonic, f returning
/// another shape or dtype, non-finite error estimates, a step size that
/// underflows, more than max_steps, an adaptive method (Dopri5, Tsit5) under CUDA graph
/// capture (it reads its error estimates on the host: use a fixed-step
/// method with steps_per_interval there). `stats`, if given, is filled.
Tensor odeint(const OdeFunction& f, const Tensor& y0, const Tensor& t, const OdeOptions& options = {},
              OdeStats* stats = nullptr);

}  // namespace tg::ode
