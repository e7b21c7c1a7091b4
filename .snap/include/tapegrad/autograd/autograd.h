// Everything of the autograd engine a user needs.
#pragma once

#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/function.h>
#include <tapegrad/autograd/functional.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/gradcheck.h>
#include <tapegrad/autograd/node.h>
#include <tapegrad/autograd/saved_hooks.h>
