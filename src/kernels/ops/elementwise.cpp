// The public elementwise ops: arguments checked once here, then the device's implementation (CPU:
// src/kernels/cpu/elementwise.cpp; no CUDA kernel yet). Test: tests/unit/test_activation.cpp (Elementwise.*).
#include "vlpar/kernels/elementwise.hpp"

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"

namespace vlpar {

Status add_(const Context& ctx, TensorView dst, TensorView src) {
  const char* op = "add_";
  VLPAR_RETURN_IF_ERROR(check_storage_dtype(op, "dst", dst));
  VLPAR_RETURN_IF_ERROR(check_storage_dtype(op, "src", src));
  VLPAR_CHECK(dst.numel() == src.numel() && dst.is_contiguous() && src.is_contiguous(),
              "{}: {} += {} needs contiguous views of equal size", op, dst.to_string(), src.to_string());
  VLPAR_CHECK((dst.data != nullptr && src.data != nullptr) || dst.numel() == 0, "{}: null data ({} += {})", op,
              dst.to_string(), src.to_string());
  VLPAR_RETURN_IF_ERROR(check_same_device(op, {{"dst", &dst}, {"src", &src}}));
  VLPAR_CHECK_CODE(dst.device.is_cpu(), StatusCode::kNotSupported, "{}: no CUDA kernel yet ({})", op,
                   dst.to_string());
  return cpu_impl::add_(ctx, dst, src);
}

}  // namespace vlpar
