#pragma once
// Shared test helpers: deterministic random tensors rounded to storage dtype, conversions to fp64,
// and comparisons that print actionable mismatch reports (STYLE §13): the first 10 mismatches with
// multi-dimensional coordinates, max abs/rel error with locations and the tolerance in force. With
// VLPAR_DUMP_ON_FAIL=1 both tensors are written to test_artifacts/<what>_{ref,out}.bin (raw fp64).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tolerances.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::test {

inline Context test_ctx(int threads = 2) {
  Context ctx;
  ctx.num_threads = threads;
  return ctx;
}

/// Uniform values in [lo, hi) from Philox(seed), rounded to `dtype`.
inline Tensor random_tensor(Allocator& alloc, Shape shape, DType dtype, uint64_t seed, float lo = -1.f,
                            float hi = 1.f) {
  Tensor t = Tensor::empty(alloc, shape, dtype).value();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float x = philox_uniform(seed, 0, uint64_t(i), lo, hi);
    switch (dtype) {
      case DType::kF32: t.ptr<float>()[i] = x; break;
      case DType::kBF16: t.ptr<bf16>()[i] = float_to_bf16(x); break;
      case DType::kF16: t.ptr<f16>()[i] = float_to_f16(x); break;
      case DType::kF64: t.ptr<double>()[i] = double(x); break;
      default: ADD_FAILURE() << "random_tensor: dtype not floating";
    }
  }
  return t;
}

/// Small integers in [lo, hi] (exact in every float dtype), for order-independent exact results.
inline Tensor integer_tensor(Allocator& alloc, Shape shape, DType dtype, uint64_t seed, int lo, int hi) {
  Tensor t = Tensor::empty(alloc, shape, dtype).value();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = philox_element(seed, 1, uint64_t(i)).v[0];
    const int v = lo + int(r % uint32_t(hi - lo + 1));
    switch (dtype) {
      case DType::kF32: t.ptr<float>()[i] = float(v); break;
      case DType::kBF16: t.ptr<bf16>()[i] = float_to_bf16(float(v)); break;
      case DType::kF16: t.ptr<f16>()[i] = float_to_f16(float(v)); break;
      case DType::kI32: t.ptr<int32_t>()[i] = v; break;
      case DType::kI64: t.ptr<int64_t>()[i] = v; break;
      case DType::kF64: t.ptr<double>()[i] = v; break;
    }
  }
  return t;
}

/// Reads any contiguous floating or integer view into fp64.
inline std::vector<double> to_f64(const TensorView& v) {
  EXPECT_TRUE(v.is_contiguous()) << "to_f64 needs a contiguous view: " << v.to_string();
  std::vector<double> out(size_t(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i) {
    switch (v.dtype) {
      case DType::kF32: out[size_t(i)] = v.ptr<float>()[i]; break;
      case DType::kBF16: out[size_t(i)] = bf16_to_float(v.ptr<bf16>()[i]); break;
      case DType::kF16: out[size_t(i)] = f16_to_float(v.ptr<f16>()[i]); break;
      case DType::kI32: out[size_t(i)] = v.ptr<int32_t>()[i]; break;
      case DType::kI64: out[size_t(i)] = double(v.ptr<int64_t>()[i]); break;
      case DType::kF64: out[size_t(i)] = v.ptr<double>()[i]; break;
    }
  }
  return out;
}

/// Element-wise casts between a reference's scalar type and fp64.
template <class S>
std::vector<S> cast_vec(const std::vector<double>& x) {
  return std::vector<S>(x.begin(), x.end());
}
template <class S>
std::vector<double> to_double(const std::vector<S>& x) {
  return std::vector<double>(x.begin(), x.end());
}

/// Rounds every value to the storage dtype (what a naive implementation at that precision stores).
inline std::vector<double> round_to_dtype(std::vector<double> x, DType dtype) {
  for (double& v : x) {
    if (dtype == DType::kBF16) v = bf16_to_float(float_to_bf16(float(v)));
    else if (dtype == DType::kF16) v = f16_to_float(float_to_f16(float(v)));
    else if (dtype == DType::kF32) v = float(v);
  }
  return x;
}

inline std::string coords(const Shape& shape, int64_t flat) {
  std::string s = "(";
  int64_t idx[kMaxDims] = {};
  for (int d = shape.ndim - 1; d >= 0; --d) {
    idx[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  for (int d = 0; d < shape.ndim; ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + ")";
}

inline double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

inline void dump_on_fail(const std::string& what, const std::vector<double>& out, const std::vector<double>& ref) {
  const char* env = std::getenv("VLPAR_DUMP_ON_FAIL");
  if (!env || std::string(env) != "1") return;
  std::filesystem::create_directories("test_artifacts");
  for (auto [suffix, data] : {std::pair{"_ref.bin", &ref}, std::pair{"_out.bin", &out}}) {
    std::FILE* f = std::fopen(("test_artifacts/" + what + suffix).c_str(), "wb");
    if (!f) continue;
    std::fwrite(data->data(), sizeof(double), data->size(), f);
    std::fclose(f);
  }
}

/// |out − ref| ≤ atol + rtol·|ref| elementwise, with a mismatch report.
inline ::testing::AssertionResult all_close(const std::string& what, const std::vector<double>& out,
                                            const std::vector<double>& ref, const Shape& shape, double atol,
                                            double rtol = 0.0) {
  if (out.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << out.size() << " vs reference " << ref.size();
  int64_t bad = 0, max_abs_at = 0, max_rel_at = 0;
  double worst_abs = 0, worst_rel = 0;
  std::ostringstream first;
  for (size_t i = 0; i < out.size(); ++i) {
    const double err = std::fabs(out[i] - ref[i]);
    const double rel = err / std::max(std::fabs(ref[i]), 1e-300);
    if (!(err <= worst_abs)) { worst_abs = err; max_abs_at = int64_t(i); }
    if (rel > worst_rel && ref[i] != 0) { worst_rel = rel; max_rel_at = int64_t(i); }
    if (!(err <= atol + rtol * std::fabs(ref[i]))) {  // NaN counts as a mismatch
      if (bad < 10)
        first << "\n  at " << coords(shape, int64_t(i)) << ": out " << out[i] << " ref " << ref[i] << " |err| " << err;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  dump_on_fail(what, out, ref);
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << out.size() << " elements exceed atol " << atol << " + rtol " << rtol
         << "·|ref|; max abs err " << worst_abs << " at " << coords(shape, max_abs_at) << ", max rel err "
         << worst_rel << " at " << coords(shape, max_rel_at) << "; first mismatches:" << first.str();
}

/// The derived rule of tolerances.hpp: bound = f·max|naive − ref| + atol_ulps·u(dtype)·max|ref|.
/// Also guards against vacuous passes: the reference must not be all zero.
inline ::testing::AssertionResult close_to_reference(const std::string& what, const std::vector<double>& out,
                                                     const std::vector<double>& ref64,
                                                     const std::vector<double>& naive, const Shape& shape,
                                                     TolOp op, DType dtype) {
  const Tolerance tol = tolerance(op, dtype);
  const double ref_max = max_abs(ref64);
  if (ref_max == 0.0) return ::testing::AssertionFailure() << what << ": reference is all zero (vacuous test)";
  const double naive_err = max_abs_diff(naive, ref64);
  const double bound = tol.naive_factor * naive_err + tol.atol_ulps * unit_roundoff(dtype) * ref_max;
  auto r = all_close(what, out, ref64, shape, bound);
  if (!r) r << "\n  (bound " << bound << " = " << tol.naive_factor << "·naive err " << naive_err << " + "
            << tol.atol_ulps << "·u(" << dtype_name(dtype) << ")·max|ref| " << ref_max << ")";
  return r;
}

/// Bitwise equality of two views' contents (same dtype and numel).
inline ::testing::AssertionResult bitwise_equal(const std::string& what, const TensorView& a, const TensorView& b) {
  if (a.nbytes() != b.nbytes() || a.dtype != b.dtype)
    return ::testing::AssertionFailure() << what << ": " << a.to_string() << " vs " << b.to_string();
  if (std::memcmp(a.data, b.data, a.nbytes()) == 0) return ::testing::AssertionSuccess();
  return all_close(what + " (bitwise)", to_f64(a), to_f64(b), a.shape, 0.0);
}

}  // namespace vlpar::test
