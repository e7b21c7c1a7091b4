// The U-Net of include/tapegrad/nn/unet.h.
#include <tapegrad/nn/unet.h>

#include <string>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::nn {

UNetBlockImpl::UNetBlockImpl(int64_t in, int64_t out, int64_t groups, TensorOptions o) : Module("UNetBlock") {
  conv1 = register_module("conv1", std::make_shared<Conv2dImpl>(in, out, IntList{3}, IntList{1}, IntList{1}, IntList{1},
                                                                1, true, "zeros", o));
  norm1 = register_module("norm1", std::make_shared<GroupNormImpl>(groups, out, 1e-5, true, o));
  conv2 = register_module("conv2", std::make_shared<Conv2dImpl>(out, out, IntList{3}, IntList{1}, IntList{1},
                                                                IntList{1}, 1, true, "zeros", o));
  norm2 = register_module("norm2", std::make_shared<GroupNormImpl>(groups, out, 1e-5, true, o));
}

Tensor UNetBlockImpl::forward(const Tensor& x) {
  Tensor h = tg::gelu(norm1->forward(conv1->forward(x)));
  return tg::gelu(norm2->forward(conv2->forward(h)));
}

UNet2dImpl::UNet2dImpl(int64_t in, int64_t out, std::vector<int64_t> ch, int64_t groups, TensorOptions o)
    : Module("UNet2d") {
  TG_CHECK(!ch.empty(), "UNet2d: channels must name at least one level");
  for (size_t l = 0; l < ch.size(); ++l)
    down_.push_back(register_module("down" + std::to_string(l),
                                    std::make_shared<UNetBlockImpl>(l == 0 ? in : ch[l - 1], ch[l], groups, o)));
  for (size_t l = ch.size() - 1; l-- > 0;)
    up_.push_back(register_module("up" + std::to_string(l),
                                  std::make_shared<UNetBlockImpl>(ch[l + 1] + ch[l], ch[l], groups, o)));
  head_ = register_module("head", std::make_shared<Conv2dImpl>(ch[0], out, IntList{1}, IntList{1}, IntList{0},
                                                               IntList{1}, 1, true, "zeros", o));
}

Tensor UNet2dImpl::forward(const Tensor& x) {
  const int64_t levels = int64_t(down_.size()), scale = int64_t(1) << (levels - 1);
  TG_CHECK(x.dim() == 4 && x.size(2) % scale == 0 && x.size(3) % scale == 0,
           "UNet2d: input must be [N, C, H, W] with H and W divisible by ", scale, " (", levels, " levels), got ",
           shape_str(x.sizes()));
  std::vector<Tensor> skips;
  Tensor h = x;
  for (int64_t l = 0; l < levels; ++l) {
    if (l > 0) h = tg::avg_pool2d(h, {2});
    h = down_[size_t(l)]->forward(h);
    skips.push_back(h);
  }
  for (int64_t l = levels - 2, i = 0; l >= 0; --l, ++i) {
    Tensor up = tg::interpolate(h, {}, {2.0}, "bilinear", false);
    h = up_[size_t(i)]->forward(tg::cat({up, skips[size_t(l)]}, 1));
  }
  return head_->forward(h);
}

}  // namespace tg::nn
