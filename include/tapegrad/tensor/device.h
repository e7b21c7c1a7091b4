// Device, Layout and TensorOptions: plain values.
#pragma once

#include <cstdint>
#include <iosfwd>

#include <tapegrad/tensor/scalar_type.h>

namespace tg {

enum class DeviceType : int8_t { CPU, CUDA };
constexpr DeviceType kCPU = DeviceType::CPU;
constexpr DeviceType kCUDA = DeviceType::CUDA;

struct Device {
  Device(DeviceType type = DeviceType::CPU, int index = 0)  // NOLINT
      : type_(type), index_(int16_t(type == DeviceType::CPU ? 0 : index)) {}
  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  bool operator==(const Device& o) const {
    return type_ == o.type_ && index_ == o.index_;
  }
  bool operator!=(const Device& o) const { return !(*this == o); }

 private:
  DeviceType type_;
  int16_t index_;
};
std::ostream& operator<<(std::ostream& os, const Device& d);

// Strided, or SparseCoo (indices + values; docs/TENSOR.md "Sparse COO tensors").
enum class Layout : int8_t { Strided, SparseCoo };
constexpr Layout kStrided = Layout::Strided;
constexpr Layout kSparseCoo = Layout::SparseCoo;
std::ostream& operator<<(std::ostream& os, Layout l);

struct TensorOptions {
  TensorOptions() = default;
  TensorOptions(ScalarType t) : dtype_(t), has_dtype_(true) {}  // NOLINT
  TensorOptions(Device d) : device_(d) {}      // NOLINT
  TensorOptions(DeviceType d) : device_(d) {}  // NOLINT

  TensorOptions dtype(ScalarType t) const {
    TensorOptions o = *this;
    o.dtype_ = t;
    o.has_dtype_ = true;
    return o;
  }
  TensorOptions device(Device d) const {
    TensorOptions o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r) const {
    TensorOptions o = *this;
    o.requires_grad_ = r;
    return o;
  }
  ScalarType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }
  // Whether dtype() was set explicitly (arange infers Int64 otherwise).
  bool has_dtype() const { return has_dtype_; }

 private:
  ScalarType dtype_ = ScalarType::Float32;
  Device device_ = Device(DeviceType::CPU);
  bool requires_grad_ = false;
  bool has_dtype_ = false;
};

inline TensorOptions dtype(ScalarType t) { return TensorOptions().dtype(t); }
inline TensorOptions device(Device d) { return TensorOptions().device(d); }

}  // namespace tg
