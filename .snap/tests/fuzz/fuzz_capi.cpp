// Fuzz target: tensor creation and the shape-taking calls of the C API
// (include/tapegrad_c.h), as a C caller may get them wrong: any int for an
// enum, any ndim, sizes and strides (overflowing ones too), then select,
// transpose, reshape and sum with parameters from the input. Every call
// returns a status; every handle is freed. A crash, a sanitizer report or a
// status that is not one of the API's is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_util.h"
#include <tapegrad_c.h>

namespace {
tg_status checked(tg_status s) {
  if (s != TG_OK && s != TG_ERROR && s != TG_INVALID_ARGUMENT && s != TG_OUT_OF_MEMORY)
    tgfuzz::finding("fuzz_capi", "unknown status");
  return s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  alignas(64) static unsigned char buffer[256];
  tgfuzz::Reader in{data, size};
  const uint8_t how = in.get<uint8_t>();
  int ndim = in.get<int8_t>();  // -128..127: the API refuses what is not a shape
  // Enums within their C++ value range (tg_dtype's is 0..7: 6 and 7 name no
  // dtype and must be refused; tg_device_type's is 0..1). Values outside it
  // are undefined behaviour in C++ itself, so tests/c/test_capi.c, in C,
  // passes those.
  const int32_t dt = int32_t(in.get<uint32_t>() % 9);  // 8: no such dtype (refused)
  const tg_dtype dtype = static_cast<tg_dtype>(dt);
  tg_device device{};
  device.type = static_cast<tg_device_type>(in.get<uint32_t>() % 2);
  device.index = in.get<int8_t>();
  // 64 entries: the most the API reads (a larger ndim is refused unread).
  std::vector<int64_t> shape(64), strides(64);
  for (auto& s : shape)
    s = in.get<int64_t>();
  for (auto& s : strides)
    s = in.get<int64_t>();
  const int shape_n = ndim < 0 ? 0 : ndim > 64 ? 64 : ndim;
  // Small tensors only (a valid huge shape, or a huge dim beside a zero one,
  // would just allocate a huge result); shapes whose element count
  // overflows 64 bits go through: they must be refused.
  int64_t numel = 1, widest = 0;
  bool overflows = false;
  for (int i = 0; i < shape_n; ++i) {
    if (shape[size_t(i)] < 0) continue;
    widest = shape[size_t(i)] > widest ? shape[size_t(i)] : widest;
    overflows |= __builtin_mul_overflow(numel, shape[size_t(i)], &numel);
  }
  if (!overflows && (numel > 4096 || widest > 4096)) return 0;
  if (ndim > 64 && !(how & 0x80)) return 0;  // sometimes an ndim past the array: refused before it is read
  tg_tensor t = nullptr;
  switch (how % 4) {
    case 0: checked(tg_zeros(shape.data(), ndim, dtype, device, &t)); break;
    case 1: checked(tg_ones(shape.data(), ndim, dtype, device, &t)); break;
    case 2: checked(tg_randn(shape.data(), ndim, dtype, device, &t)); break;
    default: {
      // Host memory only (a host pointer claimed as CUDA memory is a lie no
      // API can check); the view is read only when it lies in the buffer.
      checked(tg_tensor_from_blob((how & 0x40) ? nullptr : buffer, shape.data(),
                                  (how & 0x20) ? strides.data() : nullptr, ndim, dtype, tg_device{TG_CPU, 0}, nullptr,
                                  nullptr, &t));
      break;
    }
  }
  if (!t) return 0;
  if (how % 4 == 3) {                                          // a view of the buffer: read only when it lies inside
    static const int64_t kElem[] = {4, 8, 2, 2, 8, 1, 8, 16};  // tg_dtype's element sizes, TG_FLOAT32 .. TG_COMPLEX128
    int64_t extent = 0;
    if (numel > 0) {
      int64_t last = 0;
      for (int i = 0; i < ndim; ++i)
        last += (shape[size_t(i)] - 1) * ((how & 0x20) ? strides[size_t(i)] : 0);
      if (!(how & 0x20)) last = numel - 1;
      extent = (last + 1) * kElem[dt];
    }
    if (extent > int64_t(sizeof buffer)) {
      tg_tensor_free(t);
      return 0;
    }
  }
  tg_tensor a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  int nd = 0;
  checked(tg_tensor_ndim(t, &nd));
  checked(tg_select(t, in.get<int64_t>() % 8, in.get<int64_t>(), &a));
  checked(tg_transpose(t, in.get<int8_t>(), in.get<int8_t>(), &b));
  const int rn = in.get<uint8_t>() % 6;
  std::vector<int64_t> rs(6);
  for (auto& s : rs)
    s = in.get<int64_t>() % 70;
  checked(tg_reshape(t, rs.data(), rn, &c));
  const int64_t dims[2] = {in.get<int8_t>(), in.get<int8_t>()};
  checked(tg_sum(t, dims, in.get<uint8_t>() % 3, in.get<uint8_t>() & 1, &d));
  for (tg_tensor h : {t, a, b, c, d})
    tg_tensor_free(h);
  return 0;
}
