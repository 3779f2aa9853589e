#pragma once
// Helpers of the GPU tests (tests/gpu/test_cuda_*.cpp), one source for two builds: suite names Cuda* on a GPU
// (ctest label gpu) and Emu* in the emulated build (VLPAR_TEST_EMULATED, label emu), device tensors through the
// public copy_, strided host views gathered to fp64, and the derived tolerance rule applied twice (naive = the
// float reference, naive = the CPU kernel). Every GPU test skips ("no CUDA device") where there is no GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.hpp"
#include "tolerances.hpp"
#include "vlpar/core/allocator.hpp"
#include "vlpar/core/device.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::test {

// Suite names: Cuda* in a CUDA build (ctest label gpu), Emu* in the emulated build (VLPAR_CUDA_EMULATION, label
// emu), where the same kernels run on the CPU. The wrappers expand the name before gtest stringifies it.
#ifdef VLPAR_TEST_EMULATED
#define VLPAR_SUITE(name) Emu##name
#else
#define VLPAR_SUITE(name) Cuda##name
#endif
#define VLPAR_TEST(suite, name) TEST(suite, name)
#define VLPAR_TEST_P(suite, name) TEST_P(suite, name)
#define VLPAR_INSTANTIATE(prefix, suite, ...) INSTANTIATE_TEST_SUITE_P(prefix, suite, __VA_ARGS__)

#define VLPAR_REQUIRE_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

/// Asserts ok; a dtype compiled out of this build (VLPAR_DTYPES) skips the test instead, saying which.
#define VLPAR_ASSERT_OK_OR_SKIP(expr)                                                                         \
  do {                                                                                                        \
    const Status vlpar_s_ = (expr);                                                                           \
    if (vlpar_s_.code() == StatusCode::kNotSupported &&                                                       \
        vlpar_s_.message().find("compiled without") != std::string::npos)                                     \
      GTEST_SKIP() << vlpar_s_.message();                                                                     \
    ASSERT_TRUE(vlpar_s_.ok()) << #expr << ": " << vlpar_s_.to_string();                                      \
  } while (0)

inline Context gpu_ctx() {
  Context ctx = test_ctx(2);
  ctx.device = Device::cuda(0);
  return ctx;
}

inline Tensor upload(Allocator& a, const Tensor& host) {
  Tensor d = Tensor::empty(a, host.shape(), host.dtype(), Device::cuda(0)).value();
  EXPECT_TRUE(copy_(d, host).ok());
  return d;
}

inline Tensor download(Allocator& a, const Tensor& dev) {
  Tensor h = Tensor::empty(a, dev.shape(), dev.dtype()).value();
  EXPECT_TRUE(copy_(h, dev).ok());
  return h;
}

/// The elements of a (possibly strided) host view, row-major, as fp64.
inline std::vector<double> gather_f64(const TensorView& v) {
  std::vector<double> out;
  out.reserve(size_t(v.numel()));
  int64_t idx[kMaxDims] = {};
  for (int64_t n = 0; n < v.numel(); ++n) {
    int64_t off = 0;
    for (int d = 0; d < v.ndim(); ++d) off += idx[d] * v.strides[d];
    switch (v.dtype) {
      case DType::kF32: out.push_back(v.ptr<float>()[off]); break;
      case DType::kBF16: out.push_back(bf16_to_float(v.ptr<bf16>()[off])); break;
      case DType::kF16: out.push_back(f16_to_float(v.ptr<f16>()[off])); break;
      case DType::kI32: out.push_back(v.ptr<int32_t>()[off]); break;
      case DType::kI64: out.push_back(double(v.ptr<int64_t>()[off])); break;
      case DType::kF64: out.push_back(v.ptr<double>()[off]); break;
    }
    for (int d = v.ndim() - 1; d >= 0; --d) {
      if (++idx[d] < v.size(d)) break;
      idx[d] = 0;
    }
  }
  return out;
}

/// The kernel output checked twice with the derived rule: naive = float reference (rounded to the output's
/// storage) and naive = the CPU kernel's output.
inline void expect_gpu_close(const std::string& what, const std::vector<double>& gpu,
                             const std::vector<double>& cpu, const std::vector<double>& ref64,
                             const std::vector<double>& naive_f32, const Shape& shape, TolOp op, DType out_dtype) {
  EXPECT_TRUE(close_to_reference(what + "_vs_ref_naive_f32", gpu, ref64, round_to_dtype(naive_f32, out_dtype), shape,
                                 op, out_dtype));
  EXPECT_TRUE(close_to_reference(what + "_vs_ref_naive_cpu", gpu, ref64, cpu, shape, op, out_dtype));
}

}  // namespace vlpar::test
