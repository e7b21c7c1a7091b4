// Device, Layout and TensorOptions: plain values.
#pragma once

#include <cstdint>
#include <iosfwd>

#include <tapegrad/tensor/scalar_type.h>

namespace tg {

/// The kinds of device; kCPU and kCUDA name them as in LibTorch.
enum class DeviceType : int8_t { CPU, CUDA };
constexpr DeviceType kCPU = DeviceType::CPU;    ///< the CPU
constexpr DeviceType kCUDA = DeviceType::CUDA;  ///< a CUDA GPU

/// A device: the CPU, or CUDA GPU `index`.
struct Device {
  /// The CPU (index ignored) or GPU `index`.
  Device(DeviceType type = DeviceType::CPU, int index = 0)  // NOLINT
      : type_(type), index_(int16_t(type == DeviceType::CPU ? 0 : index)) {}
  /// Its kind, its index, and tests for the kind; devices compare by both.
  DeviceType type() const { return type_; }
  int index() const { return index_; }                        ///< GPU index (0 for the CPU)
  bool is_cpu() const { return type_ == DeviceType::CPU; }    ///< whether it is the CPU
  bool is_cuda() const { return type_ == DeviceType::CUDA; }  ///< whether it is a GPU
  /// Same kind and index.
  bool operator==(const Device& o) const { return type_ == o.type_ && index_ == o.index_; }
  bool operator!=(const Device& o) const { return !(*this == o); }  ///< not ==

 private:
  DeviceType type_;
  int16_t index_;
};
/// Prints "cpu" or "cuda:<index>".
std::ostream& operator<<(std::ostream& os, const Device& d);

///@{

/// Strided, or SparseCoo (indices + values; docs/TENSOR.md "Sparse COO tensors").
enum class Layout : int8_t { Strided, SparseCoo };
constexpr Layout kStrided = Layout::Strided;      ///< Layout::Strided
constexpr Layout kSparseCoo = Layout::SparseCoo;  ///< Layout::SparseCoo
/// Prints the layout's name.
std::ostream& operator<<(std::ostream& os, Layout l);
///@}

/// How a factory makes a tensor: dtype (Float32 by default), device (the CPU), requires_grad.
struct TensorOptions {
  TensorOptions() = default;
  /// Options with only a dtype, a device or a device kind set (so a dtype or a device can stand for options).
  TensorOptions(ScalarType t) : dtype_(t), has_dtype_(true) {}    // NOLINT
  TensorOptions(Device d) : device_(d), has_device_(true) {}      ///< options on device `d`
  TensorOptions(DeviceType d) : device_(d), has_device_(true) {}  ///< options on device kind `d` (index 0)

  /// A copy with the dtype, the device or requires_grad set.
  TensorOptions dtype(ScalarType t) const {
    TensorOptions o = *this;
    o.dtype_ = t;
    o.has_dtype_ = true;
    return o;
  }
  /// A copy on device `d`.
  TensorOptions device(Device d) const {
    TensorOptions o = *this;
    o.device_ = d;
    o.has_device_ = true;
    return o;
  }
  /// A copy whose tensors require grad (`r`).
  TensorOptions requires_grad(bool r) const {
    TensorOptions o = *this;
    o.requires_grad_ = r;
    return o;
  }
  /// The dtype, the device, requires_grad.
  ScalarType dtype() const { return dtype_; }
  Device device() const { return device_; }              ///< the device
  bool requires_grad() const { return requires_grad_; }  ///< whether tensors made require grad
  /// Whether dtype() was set explicitly (arange infers Int64 otherwise).
  bool has_dtype() const { return has_dtype_; }
  /// Whether device() was set explicitly (the *_like factories keep the
  /// tensor's device otherwise).
  bool has_device() const { return has_device_; }

 private:
  ScalarType dtype_ = ScalarType::Float32;
  Device device_ = Device(DeviceType::CPU);
  bool requires_grad_ = false;
  bool has_dtype_ = false;
  bool has_device_ = false;
};

/// Options with only the dtype set (tg::dtype(kFloat64), as torch::dtype).
inline TensorOptions dtype(ScalarType t) { return TensorOptions().dtype(t); }
/// Options with only the device set.
inline TensorOptions device(Device d) { return TensorOptions().device(d); }

}  // namespace tg
