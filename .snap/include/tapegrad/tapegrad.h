// The umbrella header: everything a user of tapegrad needs.
#pragma once

#include <tapegrad/autograd/autograd.h>
#include <tapegrad/cuda/allocator.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/graph.h>
#include <tapegrad/cuda/graphed.h>
#include <tapegrad/cuda/stream.h>
#include <tapegrad/nn/fno.h>
#include <tapegrad/nn/init.h>
#include <tapegrad/nn/module.h>
#include <tapegrad/nn/functional.h>
#include <tapegrad/nn/grid.h>
#include <tapegrad/nn/layers.h>
#include <tapegrad/nn/modules.h>
#include <tapegrad/nn/serialize.h>
#include <tapegrad/nn/unet.h>
#include <tapegrad/ode/odeint.h>
#include <tapegrad/optim/optimizer.h>
#include <tapegrad/tensor/dlpack.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/fft.h>
#include <tapegrad/tensor/grid.h>
#include <tapegrad/tensor/linalg.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/random.h>
#include <tapegrad/tensor/tensor.h>
