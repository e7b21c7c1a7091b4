// A physics-informed U-Net for the 2-D Poisson problem
//   u_xx + u_yy + f = 0 on the unit square, f = 2 pi^2 sin(pi x) sin(pi y),
// whose solution is u = sin(pi x) sin(pi y). The network (nn::UNet2d: two
// 3 x 3 convolutions with GroupNorm and GELU per level, average pooling,
// bilinear upsampling with skips) maps the fields [x, y, a] on a grid to u.
// Its loss combines the misfit to u at the observed points (every
// --observe-th point a side; all by default) with the mean square of the
// PDE residual (weighted by --pde-weight), whose derivatives are taken by
// autograd of the output with respect to the input's coordinate channels
// (so the loss holds second derivatives, and its gradient a third pass,
// through every convolution). These are the sums over the output of its
// derivatives at each input point: a convolutional network couples
// neighbouring points, so they are the residual of a smoothed field rather
// than a pointwise one, and the misfit anchors the solution (with sparse
// observations the residual alone does not pin the points between them). Trained with Adam; on the GPU the whole
// step (forward, the two derivative passes, backward, Adam) is captured
// once in a CUDA graph and replayed. It reports the relative L2 error of u
// against the solution as it falls, and exits non-zero unless the final
// error is below half the first and below --target.
//
//   pinn_unet [--grid 64] [--batch 4] [--steps 400] [--target 0.2] [--channels 16] [--observe 1]
//             [--pde-weight 0.3] [--lr 2e-3]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "sample_util.h"

using tg::Tensor;

namespace {
constexpr double kPi = 3.14159265358979323846;

struct Args {
  int64_t grid = 64, batch = 4, steps = 400, channels = 16, observe = 1;
  double target = 0.2, pde_weight = 0.3, lr = 2e-3;
};

Args parse(int argc, char** argv) {
  Args a;
  sample::Options()
      .add("--grid", &a.grid)
      .add("--batch", &a.batch)
      .add("--steps", &a.steps)
      .add("--channels", &a.channels)
      .add("--target", &a.target)
      .add("--observe", &a.observe)
      .add("--pde-weight", &a.pde_weight)
      .add("--lr", &a.lr)
      .parse(argc, argv);
  return a;
}
}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const bool gpu = tg::cuda::is_available();
  const tg::Device dev = gpu ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  const auto f32 = tg::TensorOptions().device(dev);
  tg::manual_seed(0);

  // The fields: x along the width, y along the height, a coefficient field
  // per sample; the solution, the source, and the observation mask.
  const int64_t G = args.grid, B = args.batch;
  Tensor r = tg::arange(G, f32.dtype(tg::kFloat32)) / double(G - 1);
  Tensor xg = r.view({1, 1, 1, G}).expand({B, 1, G, G}).contiguous();
  Tensor yg = r.view({1, 1, G, 1}).expand({B, 1, G, G}).contiguous();
  Tensor phase = tg::arange(B, f32.dtype(tg::kFloat32)).view({B, 1, 1, 1}) * (2 * kPi / double(B));
  Tensor a = tg::sin(xg * (2 * kPi) + phase) * tg::sin(yg * (2 * kPi)) * 0.5 + 1.0;
  Tensor u_true = tg::sin(xg * kPi) * tg::sin(yg * kPi), f = u_true * (2 * kPi * kPi);
  Tensor every8 =
      tg::eq(tg::remainder(tg::arange(G, f32.dtype(tg::kFloat32)), double(args.observe)), 0.0).to(tg::kFloat32);
  Tensor observed = (every8.view({1, 1, G, 1}) * every8.view({1, 1, 1, G})).expand({B, 1, G, G}).contiguous();
  const double observed_count = observed.sum().item<double>();
  Tensor xc = xg.detach().requires_grad_(), yc = yg.detach().requires_grad_();

  const int64_t c = args.channels;
  tg::nn::UNet2d model(3, 1, {c, 2 * c, 4 * c, 8 * c}, 8, f32);
  std::vector<Tensor> params = model->parameters();
  tg::optim::AdamOptions ao;
  ao.lr = args.lr;
  ao.capturable = gpu;
  tg::optim::Adam adam(params, ao);

  auto step = [&] {
    namespace ag = tg::autograd;
    adam.zero_grad(/*set_to_none=*/false);
    Tensor u = model->forward(tg::cat({xc, yc, a}, 1));
    // Derivatives of the output with respect to the coordinate channels.
    std::vector<Tensor> g1 = ag::grad({tg::sum(u)}, {xc, yc}, {}, true, true);
    Tensor uxx = ag::grad({tg::sum(g1[0])}, {xc}, {}, true, true)[0];
    Tensor uyy = ag::grad({tg::sum(g1[1])}, {yc}, {}, true, true)[0];
    Tensor res = (uxx + uyy + f) / (2 * kPi * kPi);  // scaled to the data's size
    Tensor miss = (u - u_true) * observed;
    Tensor loss = tg::sum(miss * miss) / observed_count + tg::mean(res * res) * args.pde_weight;
    ag::backward({loss}, {}, std::nullopt, false, params);
    adam.step();
    return loss;
  };
  auto error = [&] {
    tg::NoGradGuard no_grad;
    Tensor u = model->forward(tg::cat({xg, yg, a}, 1));
    return (tg::norm(u - u_true) / tg::norm(u_true)).item<double>();
  };

  std::printf("physics-informed U-Net, Poisson on a %lld x %lld grid, batch %lld, channels %lld, %s\n", (long long)G,
              (long long)G, (long long)B, (long long)c, gpu ? "CUDA (one graph per step)" : "CPU");
  const double first = error();
  std::printf("step %5d  relative L2 error %.4f\n", 0, first);
  Tensor loss;
  tg::cuda::CUDAGraph graph;
  int64_t done = 0;
  if (gpu) {  // warm up on a side stream, then capture the whole step once
    namespace cu = tg::cuda;
    cu::Stream side = cu::stream_from_pool();
    side.wait_stream(cu::current_stream());
    {
      cu::StreamGuard g(side);
      for (int i = 0; i < 3; ++i)
        step();
    }
    cu::current_stream().wait_stream(side);
    {
      cu::Graph capture(graph);
      loss = step();
    }
    done = 4;
  }
  const int64_t report = std::max<int64_t>(args.steps / 8, 1);
  double last = first;
  for (; done < args.steps; ++done) {
    if (gpu) graph.replay();
    else loss = step();
    if ((done + 1) % report == 0 || done + 1 == args.steps) {
      last = error();
      std::printf("step %5lld  loss %.3e  relative L2 error %.4f\n", (long long)(done + 1), loss.item<double>(), last);
    }
  }
  const bool ok = std::isfinite(last) && last < 0.5 * first && last < args.target;
  std::printf("%s: relative L2 error %.4f -> %.4f (target < %.3f and < half the first)\n", ok ? "ok" : "FAILED", first,
              last, args.target);
  return ok ? 0 : 1;
}
