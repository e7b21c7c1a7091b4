// Helpers for expanding the op list (<tapegrad/tensor/ops.def>): which
// artifacts an op's `form` asks for. TG_IF_<what>_<form>(x) expands to x or
// to nothing.
#pragma once

#define TG_UNPAREN(...) __VA_ARGS__

// A free function tg::name.
#define TG_IF_FREE_FM(...) __VA_ARGS__
#define TG_IF_FREE_F(...) __VA_ARGS__
#define TG_IF_FREE_M(...)
#define TG_IF_FREE_IM(...)
#define TG_IF_FREE_FMN(...) __VA_ARGS__
#define TG_IF_FREE_FN(...) __VA_ARGS__
#define TG_IF_FREE_MN(...)
#define TG_IF_FREE_MA(...)

// A method Tensor::name.
#define TG_IF_METHOD_FM(...) __VA_ARGS__
#define TG_IF_METHOD_F(...)
#define TG_IF_METHOD_M(...) __VA_ARGS__
#define TG_IF_METHOD_IM(...) __VA_ARGS__
#define TG_IF_METHOD_FMN(...) __VA_ARGS__
#define TG_IF_METHOD_FN(...)
#define TG_IF_METHOD_MN(...) __VA_ARGS__
#define TG_IF_METHOD_MA(...) __VA_ARGS__

// A raw entry tg::raw::name (every op; accessors are not ops).
#define TG_IF_RAW_FM(...) __VA_ARGS__
#define TG_IF_RAW_F(...) __VA_ARGS__
#define TG_IF_RAW_M(...) __VA_ARGS__
#define TG_IF_RAW_IM(...) __VA_ARGS__
#define TG_IF_RAW_FMN(...) __VA_ARGS__
#define TG_IF_RAW_FN(...) __VA_ARGS__
#define TG_IF_RAW_MN(...) __VA_ARGS__
#define TG_IF_RAW_MA(...)

// A slot in the autograd layer's table (recorded ops and accessors).
#define TG_IF_AUTOGRAD_FM(...) __VA_ARGS__
#define TG_IF_AUTOGRAD_F(...) __VA_ARGS__
#define TG_IF_AUTOGRAD_M(...) __VA_ARGS__
#define TG_IF_AUTOGRAD_IM(...) __VA_ARGS__
#define TG_IF_AUTOGRAD_FMN(...)
#define TG_IF_AUTOGRAD_FN(...)
#define TG_IF_AUTOGRAD_MN(...)
#define TG_IF_AUTOGRAD_MA(...) __VA_ARGS__

// Recorded ops (differentiable: a backward formula and a test-table entry).
#define TG_IF_RECORDED_FM(...) __VA_ARGS__
#define TG_IF_RECORDED_F(...) __VA_ARGS__
#define TG_IF_RECORDED_M(...) __VA_ARGS__
#define TG_IF_RECORDED_IM(...) __VA_ARGS__
#define TG_IF_RECORDED_FMN(...)
#define TG_IF_RECORDED_FN(...)
#define TG_IF_RECORDED_MN(...)
#define TG_IF_RECORDED_MA(...)

// An autograd accessor (answered without autograd by tensor/no_autograd.cpp).
#define TG_IF_ACCESSOR_FM(...)
#define TG_IF_ACCESSOR_F(...)
#define TG_IF_ACCESSOR_M(...)
#define TG_IF_ACCESSOR_IM(...)
#define TG_IF_ACCESSOR_FMN(...)
#define TG_IF_ACCESSOR_FN(...)
#define TG_IF_ACCESSOR_MN(...)
#define TG_IF_ACCESSOR_MA(...) __VA_ARGS__
