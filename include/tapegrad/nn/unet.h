// A U-Net for fields on 2-D grids (Ronneberger et al., 2015), as used for
// surrogates and physics-informed models of PDEs: per level a block of two
// 3 x 3 convolutions, each followed by GroupNorm and GELU; 2 x 2 average
// pooling down, bilinear upsampling (x2, align_corners = false) up, the
// upsampled map concatenated with the level's skip ([upsampled, skip]), and
// a 1 x 1 head. Every op in it has derivatives of every order in every mode,
// so a loss may hold derivatives of the output with respect to the input
// (a physics-informed residual) and still be trained.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <tapegrad/nn/grid.h>
#include <tapegrad/nn/layers.h>

namespace tg::nn {

/// conv3x3 -> GroupNorm -> GELU, twice.
class UNetBlockImpl : public Module {
 public:
  /// The block from in_channels to out_channels, GroupNorm of `groups` groups.
  UNetBlockImpl(int64_t in_channels, int64_t out_channels, int64_t groups, TensorOptions options);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2dImpl> conv1;     ///< in -> out
  std::shared_ptr<Conv2dImpl> conv2;     ///< out -> out
  std::shared_ptr<GroupNormImpl> norm1;  ///< after conv1
  std::shared_ptr<GroupNormImpl> norm2;  ///< after conv2
};
TG_MODULE(UNetBlock);

/// The U-Net: input [N, in_channels, H, W] (H and W divisible by
/// 2^(levels - 1)), output [N, out_channels, H, W]; `channels` per level
/// (default 32, 64, 128, 256), GroupNorm with `groups` groups.
class UNet2dImpl : public Module {
 public:
  /// The network; channels per level, finest first.
  UNet2dImpl(int64_t in_channels, int64_t out_channels, std::vector<int64_t> channels = {32, 64, 128, 256},
             int64_t groups = 8, TensorOptions options = TensorOptions());
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<UNetBlockImpl>> down_, up_;
  std::shared_ptr<Conv2dImpl> head_;
};
/// The holder of UNet2dImpl, with its constructor's braced lists.
class UNet2d : public ModuleHolder<UNet2dImpl> {
 public:
  using ModuleHolder<UNet2dImpl>::ModuleHolder;
  /// UNet2dImpl's constructor.
  UNet2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> channels = {32, 64, 128, 256},
         int64_t groups = 8, TensorOptions options = TensorOptions())
      : ModuleHolder<UNet2dImpl>(
            std::make_shared<UNet2dImpl>(in_channels, out_channels, std::move(channels), groups, options)) {}
};

}  // namespace tg::nn
