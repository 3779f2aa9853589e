#pragma once
// Host helpers shared by the CUDA op entry points (cuda_ops.cu, attention_ops.cu): which dtypes and head dims
// this build compiled (VLPAR_CUDA_DTYPE_<DT>, VLPAR_CUDA_ATTN_HD_<HD> from cmake/VlparCuda.cmake), the CUDA device
// of an op's views, running on that device, and per-call scratch memory (Workspace).
// Test: tests/gpu/test_cuda_kernels.cpp, tests/gpu/test_cuda_attention.cpp (ctest -L gpu; -L emu)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::cuda_impl {

template <class T>
inline constexpr bool kCompiled = false;
#ifdef VLPAR_CUDA_DTYPE_F32
template <>
inline constexpr bool kCompiled<float> = true;
#endif
#ifdef VLPAR_CUDA_DTYPE_BF16
template <>
inline constexpr bool kCompiled<bf16> = true;
#endif
#ifdef VLPAR_CUDA_DTYPE_F16
template <>
inline constexpr bool kCompiled<f16> = true;
#endif

/// Runs fn.template operator()<T>() when T's kernels are compiled in, else names the missing dtype. fn must be
/// a template lambda so that launchers of compiled-out dtypes are never referenced (they do not exist).
template <class T, class Fn>
Status if_compiled(const char* op, Fn&& fn) {
  if constexpr (kCompiled<T>) {
    return fn.template operator()<T>();
  } else {
    return VLPAR_STATUS(StatusCode::kNotSupported, "{}: this build of vlpar was compiled without {} CUDA kernels "
                        "(VLPAR_DTYPES)", op, dtype_name(dtype_of_v<T>));
  }
}

/// Runs fn.template operator()<W>() for a weight stored as x's dtype T or as f32, the two instantiated cases.
template <class T, class Fn>
Status with_weight_type(const char* op, DType w_dtype, Fn&& fn) {
  if (w_dtype == dtype_of_v<T>) return fn.template operator()<T>();
  if (w_dtype == DType::kF32) return fn.template operator()<float>();
  return VLPAR_STATUS(StatusCode::kNotSupported, "{}: the CUDA kernels take the weight in x's dtype ({}) or in f32, "
                      "got {}", op, dtype_name(dtype_of_v<T>), dtype_name(w_dtype));
}

/// The CUDA device of the views; views that are empty with no data (optional outputs) are skipped.
inline Result<int> cuda_device_of(const char* op, std::span<const std::pair<const char*, const TensorView*>> views) {
  int device = -1;
  for (const auto& [name, v] : views) {
    if (v->empty() && v->data == nullptr) continue;
    VLPAR_CHECK(v->device.is_cuda(), "{}: {} must be on a CUDA device, got {}", op, name, v->to_string());
    VLPAR_CHECK(device < 0 || v->device.index == device, "{}: {} is on cuda:{}, other operands on cuda:{}", op, name,
                v->device.index, device);
    device = v->device.index;
  }
  VLPAR_CHECK(device >= 0, "{}: no CUDA operand", op);
  return device;
}
inline Result<int> cuda_device_of(const char* op,
                                  std::initializer_list<std::pair<const char*, const TensorView*>> views) {
  return cuda_device_of(op, std::span(views.begin(), views.size()));
}

/// Runs fn() with `device` current, then restores the caller's device.
template <class Fn>
Status on_device(const char* op, int device, Fn&& fn) {
  int previous = 0;
  VLPAR_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) VLPAR_CUDA_CHECK(cudaSetDevice(device));
  Status status = fn();
  if (previous != device) {
    const cudaError_t err = cudaSetDevice(previous);
    if (status.ok() && err != cudaSuccess)
      return VLPAR_STATUS(StatusCode::kCudaError, "{}: restoring cuda:{} failed: {}", op, previous,
                          cudaGetErrorString(err));
  }
  return status;
}

/// Scratch device memory for one op call: from ctx.allocator when set (its device block cache hands the block to
/// later work in stream order; without the cache it is returned with cudaFree, which waits for the device), else
/// stream-ordered on ctx.stream (cudaMallocAsync / cudaFreeAsync). Freed when it goes out of
/// scope, after the kernels that use it have been queued.
class Workspace {
 public:
  Workspace(const Context& ctx, int device) : ctx_(ctx), device_(Device::cuda(device)) {}
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() {
    if (ptr_ == nullptr) return;
    if (ctx_.allocator != nullptr) ctx_.allocator->deallocate(ptr_, bytes_, device_);
    else (void)cudaFreeAsync(ptr_, static_cast<cudaStream_t>(ctx_.stream));
  }

  Status allocate(size_t bytes) {
    if (bytes == 0) return Status::Ok();
    if (ctx_.allocator != nullptr) {
      VLPAR_ASSIGN_OR_RETURN(ptr_, ctx_.allocator->allocate(bytes, device_));
    } else {
      VLPAR_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, static_cast<cudaStream_t>(ctx_.stream)));
    }
    bytes_ = bytes;
    return Status::Ok();
  }
  template <class T>
  T* ptr() const { return static_cast<T*>(ptr_); }

 private:
  const Context& ctx_;
  Device device_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

inline float* optional_f32(const TensorView& v) { return v.empty() ? nullptr : v.ptr<float>(); }

/// The view's base address is 16-byte aligned, as the tensor-core kernels' 16-byte cp.async rows need.
inline Status check_cp_async_base(const char* op, const char* name, const TensorView& v) {
  VLPAR_CHECK_CODE(reinterpret_cast<uintptr_t>(v.data) % 16 == 0, StatusCode::kNotSupported,
                   "{}: {} is not 16-byte aligned ({}): the CUDA kernel loads rows with 16-byte cp.async", op, name,
                   v.to_string());
  return Status::Ok();
}

}  // namespace vlpar::cuda_impl
