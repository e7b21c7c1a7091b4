// Memory tapegrad does not own (include/tapegrad/tensor/dlpack.h): from_blob
// makes a storage around it whose release runs when it dies; a DLPack
// producer's memory is such a blob (its deleter the release); an exported
// tensor's managed struct holds a tensor handle.
#include <cstring>
#include <tapegrad/tensor/dlpack.h>

#include "tensor/checked.h"

#include <dlpack/dlpack.h>

#include <memory>
#include <string>
#include <vector>

#include <tapegrad/cuda/device.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/tensor_impl.h>

#include "tensor/op_util.h"

namespace tg {
namespace {

// DLPack 0.8 added the bool type code; Debian's 0.6 header lacks the name.
constexpr uint8_t kDLBoolCode = 6;

const char* device_type_name(int t) {
  switch (t) {
    case kDLCPU: return "CPU";
    case kDLCUDA: return "CUDA";
    case kDLCUDAHost: return "CUDA host (pinned)";
    case kDLOpenCL: return "OpenCL";
    case kDLVulkan: return "Vulkan";
    case kDLMetal: return "Metal";
    case kDLVPI: return "VPI";
    case kDLROCM: return "ROCm";
    case kDLROCMHost: return "ROCm host";
    case kDLExtDev: return "ext_dev";
    case kDLCUDAManaged: return "CUDA managed";
    default: return "unknown";
  }
}

std::string dtype_name(DLDataType t) {
  const char* code = t.code == kDLInt        ? "int"
                     : t.code == kDLUInt     ? "uint"
                     : t.code == kDLFloat    ? "float"
                     : t.code == kDLBfloat   ? "bfloat"
                     : t.code == kDLComplex  ? "complex"
                     : t.code == kDLBoolCode ? "bool"
                                             : "opaque";
  return std::string(code) + std::to_string(int(t.bits)) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

// The list's DlCode and DlBits columns.
ScalarType from_dl_dtype(DLDataType t) {
  if (t.lanes == 1) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, DlCode, DlBits, ...) \
  if (t.code == DlCode && t.bits == DlBits) return ScalarType::Name;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  std::string have;
  for (int i = 0; i < kNumScalarTypes; ++i)
    have += std::string(i == 0 ? "" : i + 1 == kNumScalarTypes ? " and " : ", ") + python_name(ScalarType(i));
  TG_CHECK(false, "from_dlpack: dtype ", dtype_name(t), " is not supported; tapegrad has ", have,
           " (convert in the producer first)");
  return kFloat32;
}

DLDataType to_dl_dtype(ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, DlCode, DlBits, ...) \
  case ScalarType::Name:                                                             \
    return {uint8_t(DlCode), uint8_t(DlBits), 1};
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  TG_INTERNAL_ASSERT(false, "to_dlpack: unknown dtype");
  return {};
}

// The managed struct of an exported tensor: it keeps the tensor (and so its
// memory) alive until the consumer calls the deleter.
struct Export {
  DLManagedTensor managed{};
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

void delete_export(DLManagedTensor* m) { delete static_cast<Export*>(m->manager_ctx); }

void release_managed(void* m) {
  auto* t = static_cast<DLManagedTensor*>(m);
  if (t->deleter) t->deleter(t);
}

}  // namespace

Tensor from_blob(void* data, const IntList& sizes, const IntList& strides_in, ScalarType dtype, Device device,
                 void (*release)(void*), void* context) {
  const int64_t numel = detail::checked_numel(sizes, "from_blob");  // negative sizes and overflow refused
  const IntList strides = strides_in.empty() ? contiguous_strides(sizes) : strides_in;
  TG_CHECK(strides.size() == sizes.size(), "from_blob: ", strides.size(), " strides for the shape ", shape_str(sizes));
  for (int64_t s : strides)
    TG_CHECK(s >= 0, "from_blob: strides ", shape_str(strides), " (shape ", shape_str(sizes),
             ") has a negative stride, which tapegrad does not support; make the memory contiguous first");
  if (device.is_cuda())
    TG_CHECK(cuda::is_available() && device.index() >= 0 && device.index() < cuda::device_count(),
             "from_blob: the memory is on CUDA device ", device.index(), ", but this process has ",
             cuda::device_count(), " CUDA device(s)", cuda::is_available() ? "" : " (no GPU, or a build without CUDA)");
  // The bytes the view reaches (0 when it has no elements).
  size_t extent = 0;
  if (numel > 0) {
    TG_CHECK(data, "from_blob: data is null for a tensor of shape ", shape_str(sizes));
    const int64_t last = detail::checked_reach(sizes, strides, 0, "from_blob").hi;  // strides are >= 0
    extent = size_t(detail::checked_mul(detail::checked_add(last, 1, "from_blob", sizes), int64_t(element_size(dtype)),
                                        "from_blob", sizes));
  }
  // The last byte must be an address: a producer's claim that runs past the
  // end of the address space is refused (reading it would wrap around).
  uintptr_t end = 0;
  TG_CHECK(!__builtin_add_overflow(reinterpret_cast<uintptr_t>(data), extent, &end), "from_blob: data (", data,
           ") plus the ", extent, " bytes that shape ", shape_str(sizes), " and strides ", shape_str(strides),
           " reach overflows the address space; the pointer or the shape is wrong");
  auto storage = IntrusivePtr<StorageImpl>::make(data, extent, device, release, context);
  return Tensor(
      IntrusivePtr<TensorImpl>::make(std::move(storage), sizes, strides, 0, dtype, IntrusivePtr<VersionCounter>()));
}

Tensor from_dlpack(DLManagedTensor* src, std::optional<cuda::Stream> producer) {
  TG_CHECK(src, "from_dlpack: got a null DLManagedTensor");
  // Until the storage owns src, a throw releases it (the producer's memory
  // must not leak because tapegrad refused it).
  std::unique_ptr<DLManagedTensor, void (*)(DLManagedTensor*)> guard(src,
                                                                     [](DLManagedTensor* m) { release_managed(m); });
  const DLTensor& t = src->dl_tensor;
  // The producer may put any int in the enum field: read as an int (an
  // out-of-range enum value is undefined behaviour in C++).
  static_assert(sizeof(t.device.device_type) == sizeof(int32_t), "DLDeviceType is a 32-bit C enum");
  int32_t dt = 0;
  std::memcpy(&dt, &t.device.device_type, sizeof dt);
  Device device(kCPU);
  if (dt == kDLCUDA || dt == kDLCUDAManaged) {
    device = Device(kCUDA, t.device.device_id);
  } else {
    TG_CHECK(dt == kDLCPU || dt == kDLCUDAHost, "from_dlpack: device type ", dt, " (", device_type_name(dt),
             ") is not supported; tapegrad takes CPU and CUDA tensors (copy to one in the producer first)");
  }
  const ScalarType dtype = from_dl_dtype(t.dtype);
  constexpr int kMaxDims = 64;  // more than any tensor has; beyond it, shape would be read past its end
  TG_CHECK(t.ndim >= 0 && t.ndim <= kMaxDims, "from_dlpack: ndim ", t.ndim, " is not in [0, ", kMaxDims, "]");
  TG_CHECK(t.ndim == 0 || t.shape, "from_dlpack: shape is NULL for ndim ", t.ndim);
  const IntList sizes(t.shape, t.shape + t.ndim);
  const IntList strides = t.strides ? IntList(t.strides, t.strides + t.ndim) : IntList();
  const size_t elem = element_size(dtype);
  // data + byte_offset as an address (pointer arithmetic past the producer's
  // allocation, or on NULL, is undefined behaviour).
  TG_CHECK(t.data || t.byte_offset == 0, "from_dlpack: data is NULL with byte_offset ", t.byte_offset);
  uintptr_t first = 0;
  TG_CHECK(!__builtin_add_overflow(reinterpret_cast<uintptr_t>(t.data), t.byte_offset, &first),
           "from_dlpack: data + byte_offset (", t.data, " + ", t.byte_offset, ") overflows the address space");
  TG_CHECK(first % elem == 0, "from_dlpack: data + byte_offset (", t.data, " + ", t.byte_offset,
           ") is not aligned to the ", elem, "-byte elements of ", dtype,
           "; copy to aligned memory in the "
           "producer first");
  // The view starts at the first element (data + byte_offset); its release
  // is the producer's deleter.
  Tensor out = from_blob(reinterpret_cast<void*>(first), sizes, strides, dtype, device, &release_managed,
                         static_cast<void*>(src));
  guard.release();
  if (producer && device.is_cuda() && *producer != cuda::current_stream(device.index()))
    cuda::current_stream(device.index()).wait_stream(*producer);
  return out;
}

DLManagedTensor* to_dlpack(const Tensor& t, std::optional<cuda::Stream> consumer) {
  TG_CHECK(t.defined(), "to_dlpack: got an undefined tensor");
  TG_CHECK(!t.is_sparse(), "to_dlpack: sparse tensors have no DLPack form (", t.dtype(), " ", t.sizes(),
           "); export to_dense() or the indices and values");
  TG_CHECK(!t.requires_grad(), "to_dlpack: the tensor (", t.dtype(), " ", t.sizes(),
           ") requires grad; export "
           "t.detach() (the consumer sees the same memory, without the autograd history)");
  auto e = std::make_unique<Export>();
  e->tensor = t.detach();
  e->shape.assign(t.sizes().begin(), t.sizes().end());
  e->strides.assign(t.strides().begin(), t.strides().end());
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.data_ptr();  // the first element: no byte offset
  d.byte_offset = 0;
  d.device.device_type = t.is_cuda() ? kDLCUDA : kDLCPU;
  d.device.device_id = t.is_cuda() ? t.device().index() : 0;
  d.ndim = int(t.dim());
  d.dtype = to_dl_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  e->managed.manager_ctx = e.get();
  e->managed.deleter = &delete_export;
  if (consumer && t.is_cuda()) {
    TG_CHECK(consumer->device_index() == t.device().index(), "to_dlpack: the consumer's stream is on CUDA device ",
             consumer->device_index(), ", the tensor on ", t.device());
    if (*consumer != cuda::current_stream(t.device().index()))
      consumer->wait_stream(cuda::current_stream(t.device().index()));
  }
  return &e.release()->managed;
}

}  // namespace tg
