// Stopping and resuming training, bitwise. A PINN for -u'' = pi^2 sin(pi x)
// on [0, 1] with u(0) = u(1) = 0 (u = x (1 - x) N(x); the solution is
// sin(pi x)), trained with Adam over two parameter groups (the hidden layers
// and the output layer, each with its own rate and weight decay), a one-cycle
// schedule and gradient clipping.
//
//   pinn_resume --steps N --out F            train N steps, write the parameters' bits to F
//   pinn_resume --steps N --stop K --dir D   train K steps, save model, optimizer and schedule in D
//   pinn_resume --steps N --resume --dir D --out F
//                                            load D in this new process and train to step N
//
// The two runs' files are identical (CTest compares them). A resumed run
// rebuilds every object and then loads: the model (nn::load), the optimizer's
// state (load_state_dict), the schedule's epoch (set_epoch); the collocation
// points are fixed, so nothing else carries state.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include <tapegrad/tapegrad.h>

using tg::Tensor;
namespace ag = tg::autograd;
namespace nn = tg::nn;
namespace optim = tg::optim;

int main(int argc, char** argv) {
  int64_t steps = 400, stop = -1;
  bool resume = false;
  std::string dir = ".", out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "pinn_resume: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") steps = std::stoll(next());
    else if (a == "--stop") stop = std::stoll(next());
    else if (a == "--resume") resume = true;
    else if (a == "--dir") dir = next();
    else if (a == "--out") out = next();
    else {
      std::fprintf(stderr, "pinn_resume: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  const double pi = std::acos(-1.0);
  tg::manual_seed(5);
  auto net = nn::MLP({1, 24, 24, 1}, "tanh", f64);
  Tensor x = (tg::rand({128, 1}, f64) * 0.98 + 0.01);  // fixed collocation points
  auto params = net->parameters();
  optim::AdamOptions ao;
  optim::Adam opt({{{params[0], params[1], params[2], params[3]}, 2e-3, 1e-4}, {{params[4], params[5]}, 1e-3, 0.0}},
                  ao);
  optim::OneCycleLR sched(opt, {1e-2, 5e-3}, steps);  // a peak rate per group; beta1 cycles 0.95 -> 0.85 -> 0.95
  int64_t start = 0;
  if (resume) {
    nn::load(*net, dir + "/pinn_model.safetensors");
    opt.load_state_dict(nn::load_safetensors(dir + "/pinn_optim.safetensors"));
    for (const auto& [key, value] : nn::load_safetensors_metadata(dir + "/pinn_optim.safetensors"))
      if (key == "step") start = std::stoll(value);
    sched.set_epoch(start);
    std::printf("resumed at step %" PRId64 "\n", start);
  }
  auto u = [&](const Tensor& t) { return t * (1.0 - t) * (*net)(t); };
  Tensor f = tg::sin(x * pi) * (pi * pi);
  double last = 0;
  for (int64_t it = start; it < steps; ++it) {
    if (it == stop) {
      nn::save(*net, dir + "/pinn_model.safetensors");
      nn::save_safetensors(dir + "/pinn_optim.safetensors", opt.state_dict(), {{"step", std::to_string(it)}});
      std::printf("stopped at step %" PRId64 ", saved in %s\n", it, dir.c_str());
      return 0;
    }
    opt.zero_grad();
    Tensor xr = x.detach().requires_grad_();
    Tensor uu = u(xr);
    Tensor ux = ag::grad({uu.sum()}, {xr}, {}, std::nullopt, /*create_graph=*/true)[0];
    Tensor uxx = ag::grad({ux.sum()}, {xr}, {}, true, true)[0];
    Tensor loss = tg::square(-uxx - f).mean();
    loss.backward();
    optim::clip_grad_norm_(net->parameters(), 10.0);
    opt.step();
    sched.step();
    last = loss.item<double>();
    if (it % 100 == 0) std::printf("step %4" PRId64 "  loss %.4e  lr %.3e\n", it, last, opt.lr(0));
  }
  std::printf("final loss %.6e\n", last);
  if (!out.empty()) {
    std::FILE* fp = std::fopen(out.c_str(), "w");
    if (!fp) {
      std::fprintf(stderr, "pinn_resume: cannot write %s\n", out.c_str());
      return 1;
    }
    for (const Tensor& p : net->parameters())
      for (double v : p.to_vector<double>()) {
        uint64_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        std::fprintf(fp, "%016" PRIx64 "\n", bits);
      }
    std::fclose(fp);
  }
  return last < 1.0 ? 0 : 1;  // it trains: the residual falls from ~50
}
