#pragma once
// Tensors: non-owning views (what ops take) and an owning Tensor (what callers keep).
//   TensorView : data pointer + dtype + device + up to kMaxDims sizes and element strides. Cheap to copy.
//   Tensor     : owns a buffer from an Allocator (shared ownership), exposes view().
// Shapes are row-major by default; strides are in elements, not bytes.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/device.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/status.hpp"

namespace vlpar {

inline constexpr int kMaxDims = 6;

struct Shape {
  int ndim = 0;
  int64_t dims[kMaxDims] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[i]; }
  int64_t& operator[](int i) { return dims[i]; }
  int64_t numel() const;
  std::string to_string() const;  // "[2, 3, 4]"
  friend bool operator==(const Shape& a, const Shape& b);
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::cpu();
  Shape shape;
  int64_t strides[kMaxDims] = {};  // in elements

  TensorView() = default;
  /// A contiguous row-major view.
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::cpu());

  int ndim() const { return shape.ndim; }
  int64_t size(int i) const { return shape[i < 0 ? i + shape.ndim : i]; }
  int64_t stride(int i) const { return strides[i < 0 ? i + shape.ndim : i]; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  /// True for a default-constructed view (the "absent optional argument" of ops) or zero elements.
  bool empty() const { return data == nullptr || numel() == 0; }

  template <class T>
  T* ptr() const { return static_cast<T*>(data); }

  /// @brief Sub-range [begin, end) along dim (shares memory).
  TensorView slice(int dim, int64_t begin, int64_t end) const;
  /// @brief Same memory seen with another contiguous shape (requires a contiguous view, same numel).
  Result<TensorView> reshape(Shape new_shape) const;
  /// "f32[2, 3] cpu"
  std::string to_string() const;
};

class Tensor {
 public:
  Tensor() = default;
  /// @brief Allocates an uninitialised contiguous tensor.
  static Result<Tensor> empty(Allocator& alloc, Shape shape, DType dtype, Device device = Device::cpu());
  /// @brief Allocates a zero-filled contiguous tensor.
  static Result<Tensor> zeros(Allocator& alloc, Shape shape, DType dtype, Device device = Device::cpu());

  const TensorView& view() const { return view_; }
  operator TensorView() const { return view_; }  // NOLINT: tensors pass where views are expected
  template <class T>
  T* ptr() const { return view_.ptr<T>(); }
  const Shape& shape() const { return view_.shape; }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  int64_t numel() const { return view_.numel(); }
  bool defined() const { return buffer_ != nullptr; }

 private:
  struct Buffer;
  std::shared_ptr<Buffer> buffer_;
  TensorView view_;
};

/// Element i of a host i32 or i64 index view (token ids, labels, cu_seqlens; contiguous along i).
inline int64_t index_at(const TensorView& t, int64_t i) {
  return t.dtype == DType::kI32 ? int64_t(t.ptr<int32_t>()[i]) : t.ptr<int64_t>()[i];
}

/// @brief Fills a CPU or CUDA view with zeros.
Status zero_(TensorView t);
/// @brief Copies between views of equal shape and dtype, across host and device as needed.
Status copy_(TensorView dst, TensorView src);
/// @brief Converts between floating dtypes on the host (rounding to nearest even), equal shapes, contiguous.
Status convert_(TensorView dst, TensorView src);

}  // namespace vlpar
