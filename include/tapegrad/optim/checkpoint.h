// Checkpoints (docs/OPTIM.md "Checkpoints"): the module, the optimizer, the
// schedulers, the random generator's state and the step in one safetensors
// file, so that a run resumed from it equals the uninterrupted run.
#pragma once

#include <cstdint>
#include <string>

#include <tapegrad/nn/module.h>
#include <tapegrad/optim/optimizer.h>

namespace tg::optim {

/// The schedulers a checkpoint saves and restores beside the optimizer
/// (either may be null).
struct CheckpointSchedulers {
  LRScheduler* lr = nullptr;             ///< an epoch scheduler (StepLR, OneCycleLR, SequentialLR, ...)
  ReduceLROnPlateau* plateau = nullptr;  ///< a ReduceLROnPlateau
};

/// Writes `path` (safetensors): the module's state_dict ("model.*"), the
/// optimizer's ("optimizer.*"), the schedulers' ("lr_scheduler.*",
/// "plateau.*"), the random generator's state ("rng_state": get_rng_state,
/// which serves every device) and `step` (metadata), with
/// nn::save_safetensors (written whole or not at all). A scheduler of
/// another optimizer is refused.
void save_checkpoint(const std::string& path, const nn::Module& module, const Optimizer& optimizer, int64_t step = 0,
                     CheckpointSchedulers schedulers = {});

/// Restores a save_checkpoint file into `module`, `optimizer` and the
/// schedulers (the same kinds as were saved: a part saved without its
/// object here, or asked for and absent, is an error naming it), sets the
/// random generator's state, and returns the step. Which parts the file
/// holds (and the generator state's shape) is checked first, and a
/// scheduler of another optimizer is refused; the parts are then restored in order (module,
/// optimizer, schedulers, generator), and an error names the part it is in
/// (the parts before it stay restored).
int64_t load_checkpoint(const std::string& path, nn::Module& module, Optimizer& optimizer,
                        CheckpointSchedulers schedulers = {});

}  // namespace tg::optim
