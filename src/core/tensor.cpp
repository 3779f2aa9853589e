// Shapes, views, owning tensors and the basic host/device copies.
#include "vlpar/core/tensor.hpp"

#include <cstring>

#include "vlpar/core/dispatch.hpp"

#ifdef VLPAR_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace vlpar {

Shape::Shape(std::initializer_list<int64_t> d) {
  ndim = 0;
  for (int64_t v : d) {
    if (ndim < kMaxDims) dims[ndim] = v;
    ++ndim;
  }
  if (ndim > kMaxDims) ndim = kMaxDims;  // callers validate rank via check functions; never write out of bounds
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += fmt::format("{}{}", i ? ", " : "", dims[i]);
  return s + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}

TensorView::TensorView(void* data_, DType dtype_, Shape shape_, Device device_)
    : data(data_), dtype(dtype_), device(device_), shape(shape_) {
  int64_t s = 1;
  for (int i = shape.ndim - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape.dims[i];
  }
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int i = shape.ndim - 1; i >= 0; --i) {
    if (shape.dims[i] != 1 && strides[i] != s) return false;
    s *= shape.dims[i];
  }
  return true;
}

TensorView TensorView::slice(int dim, int64_t begin, int64_t end) const {
  TensorView out = *this;
  out.shape.dims[dim] = end - begin;
  out.data = static_cast<char*>(data) + begin * strides[dim] * int64_t(dtype_size(dtype));
  return out;
}

Result<TensorView> TensorView::reshape(Shape new_shape) const {
  VLPAR_CHECK(is_contiguous(), "reshape: view {} is not contiguous", to_string());
  VLPAR_CHECK(new_shape.numel() == numel(), "reshape: {} has {} elements, {} has {}", shape.to_string(), numel(),
              new_shape.to_string(), new_shape.numel());
  return TensorView(data, dtype, new_shape, device);
}

std::string TensorView::to_string() const {
  return fmt::format("{}{} {}", dtype_name(dtype), shape.to_string(), device.to_string());
}

struct Tensor::Buffer {
  Allocator* alloc = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (alloc) alloc->deallocate(ptr, bytes, device);
  }
};

Result<Tensor> Tensor::empty(Allocator& alloc, Shape shape, DType dtype, Device device) {
  for (int i = 0; i < shape.ndim; ++i)
    VLPAR_CHECK(shape[i] >= 0, "Tensor::empty: negative size in shape {}", shape.to_string());
  const size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  VLPAR_ASSIGN_OR_RETURN(void* p, alloc.allocate(bytes, device));
  Tensor t;
  t.buffer_ = std::make_shared<Buffer>();
  t.buffer_->alloc = &alloc;
  t.buffer_->ptr = p;
  t.buffer_->bytes = bytes;
  t.buffer_->device = device;
  t.view_ = TensorView(p, dtype, shape, device);
  return t;
}

Result<Tensor> Tensor::zeros(Allocator& alloc, Shape shape, DType dtype, Device device) {
  VLPAR_ASSIGN_OR_RETURN(Tensor t, empty(alloc, shape, dtype, device));
  VLPAR_RETURN_IF_ERROR(zero_(t.view()));
  return t;
}

Status zero_(TensorView t) {
  VLPAR_CHECK(t.data != nullptr || t.numel() == 0, "zero_: null data for {}", t.to_string());
  if (t.empty()) return Status::Ok();
  VLPAR_CHECK(t.is_contiguous(), "zero_: view {} is not contiguous", t.to_string());
  if (t.device.is_cpu()) {
    std::memset(t.data, 0, t.nbytes());
    return Status::Ok();
  }
#ifdef VLPAR_WITH_CUDA
  VLPAR_CUDA_CHECK(cudaMemset(t.data, 0, t.nbytes()));
  return Status::Ok();
#else
  return VLPAR_STATUS(StatusCode::kNotSupported, "zero_: no CUDA in this build ({})", t.to_string());
#endif
}

Status copy_(TensorView dst, TensorView src) {
  VLPAR_CHECK(dst.shape == src.shape && dst.dtype == src.dtype, "copy_: dst {} and src {} differ in shape or dtype",
              dst.to_string(), src.to_string());
  VLPAR_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy_: dst {} and src {} must be contiguous",
              dst.to_string(), src.to_string());
  VLPAR_CHECK((dst.data != nullptr && src.data != nullptr) || dst.numel() == 0, "copy_: null data ({} <- {})",
              dst.to_string(), src.to_string());
  if (dst.empty()) return Status::Ok();
  if (dst.device.is_cpu() && src.device.is_cpu()) {
    std::memmove(dst.data, src.data, dst.nbytes());
    return Status::Ok();
  }
#ifdef VLPAR_WITH_CUDA
  VLPAR_CUDA_CHECK(cudaMemcpy(dst.data, src.data, dst.nbytes(), cudaMemcpyDefault));
  return Status::Ok();
#else
  return VLPAR_STATUS(StatusCode::kNotSupported, "copy_: no CUDA in this build ({} <- {})", dst.to_string(),
                      src.to_string());
#endif
}

namespace {
template <class D, class S>
void convert_loop(D* d, const S* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = from_float<D>(to_float(s[i]));
}
}  // namespace

Status convert_(TensorView dst, TensorView src) {
  VLPAR_CHECK(dst.shape == src.shape, "convert_: dst {} and src {} differ in shape", dst.to_string(), src.to_string());
  VLPAR_CHECK(dst.device.is_cpu() && src.device.is_cpu(), "convert_: host views only ({} <- {})", dst.to_string(),
              src.to_string());
  VLPAR_CHECK(dst.is_contiguous() && src.is_contiguous(), "convert_: views must be contiguous");
  if (dst.dtype == DType::kF64 || src.dtype == DType::kF64) {
    const int64_t n = dst.numel();
    if (dst.dtype == DType::kF64) {
      double* d = dst.ptr<double>();
      VLPAR_FLOAT_SWITCH(src.dtype, S, "convert_", {
        const S* s = src.ptr<S>();
        for (int64_t i = 0; i < n; ++i) d[i] = double(to_float(s[i]));
      });
    } else {
      const double* s = src.ptr<double>();
      VLPAR_FLOAT_SWITCH(dst.dtype, D, "convert_", {
        D* d = dst.ptr<D>();
        for (int64_t i = 0; i < n; ++i) d[i] = from_float<D>(float(s[i]));
      });
    }
    return Status::Ok();
  }
  VLPAR_FLOAT_SWITCH(dst.dtype, D, "convert_ (dst)", {
    VLPAR_FLOAT_SWITCH(src.dtype, S, "convert_ (src)", { convert_loop(dst.ptr<D>(), src.ptr<S>(), dst.numel()); });
  });
  return Status::Ok();
}

}  // namespace vlpar
