// Fuzz target: the DLPack importer (a producer's struct is untrusted). The
// input fills a DLManagedTensor field by field over a 256-byte buffer;
// from_dlpack either gives a tensor, whose every element is then read when
// the storage it claims lies inside the buffer, or a tg::Error. Either way
// the producer's deleter must run exactly once. Anything else is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include <dlpack/dlpack.h>
#include "fuzz_util.h"
#include <tapegrad/tapegrad.h>

namespace {
int g_deletes = 0;
void deleter(DLManagedTensor*) { ++g_deletes; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  alignas(64) static unsigned char buffer[256];
  tgfuzz::Reader in{data, size};
  const int32_t ndim = in.get<int32_t>();
  const int32_t device_type = in.get<int32_t>();
  const int32_t device_id = in.get<int32_t>();
  DLDataType dtype{in.get<uint8_t>(), in.get<uint8_t>(), in.get<uint16_t>()};
  const uint64_t byte_offset = in.get<uint64_t>();
  const uint8_t flags = in.get<uint8_t>();  // bit 0: shape NULL, bit 1: strides given, bit 2: data NULL
  // At most 64 sizes are read from the input; a larger ndim points past them
  // (from_dlpack must refuse it before reading).
  std::vector<int64_t> shape(64), strides(64);
  for (auto& s : shape)
    s = in.get<int64_t>();
  for (auto& s : strides)
    s = in.get<int64_t>();
  DLManagedTensor m{};
  m.dl_tensor.data = (flags & 4) ? nullptr : buffer;
  m.dl_tensor.ndim = ndim;  // as given: beyond 64, refused before shape is read past its entries
  m.dl_tensor.shape = (flags & 1) ? nullptr : shape.data();
  m.dl_tensor.strides = (flags & 2) ? strides.data() : nullptr;
  m.dl_tensor.byte_offset = byte_offset;
  m.dl_tensor.dtype = dtype;
  std::memcpy(&m.dl_tensor.device.device_type, &device_type, sizeof device_type);
  m.dl_tensor.device.device_id = device_id;
  m.deleter = deleter;
  g_deletes = 0;
  try {
    tg::Tensor t = tg::from_dlpack(&m);
    if (g_deletes != 0) tgfuzz::finding("fuzz_dlpack", "the deleter ran while the tensor lives");
    const auto& st = t.impl()->storage();
    // As addresses: pointer arithmetic on a claimed storage that lies outside
    // the buffer is itself undefined behaviour.
    const uintptr_t begin = reinterpret_cast<uintptr_t>(st->data()), lo = reinterpret_cast<uintptr_t>(buffer);
    const bool inside = begin >= lo && begin - lo <= sizeof buffer && st->nbytes() <= sizeof buffer - (begin - lo);
    if (!t.is_cuda() && inside && t.numel() > 0 && t.numel() <= (1 << 16)) {  // (stride 0 can make many)
      if (t.dtype() == tg::kBool) (void)t.to(tg::kInt64).sum().item<int64_t>();
      else (void)t.to(tg::kFloat64).sum().item<double>();
    }
  } catch (const tg::Error&) {
  } catch (const std::exception& e) {
    tgfuzz::finding("fuzz_dlpack", e.what());
  }
  if (g_deletes != 1) tgfuzz::finding("fuzz_dlpack", "the deleter did not run exactly once");
  return 0;
}
