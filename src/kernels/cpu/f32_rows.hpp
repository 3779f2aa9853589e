#pragma once
// Internal (not installed): fp32 views of float matrices for the CPU kernels that compute in fp32 (gemm, the MoE
// grouped GEMMs). A bf16/f16 matrix is widened into a dense fp32 copy (exact: every 16-bit float is an f32) and a
// result is rounded back once per element (round to nearest even), so a 16-bit op equals the f32 op on the same
// values, rounded. An f32 matrix is used in place, without a copy.
#include <cstdint>
#include <vector>

#include "isa_namespace.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/status.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE::cpu {

/// A row-major matrix of T: [rows, cols], row r at data + r * ld (the last dim contiguous).
template <class T>
struct Rows {
  T* data = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  T* row(int64_t r) const { return data + r * ld; }
};
using F32Rows = Rows<float>;

/// The same layout, of any float dtype.
struct AnyRows {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0, ld = 0;
};

/// f32 rows of `m`: m itself when it is f32, else a dense copy (ld = cols) held in `store`, widened over ctx's
/// threads; `load` false leaves the copy uninitialised (an output that the caller writes whole).
inline Result<F32Rows> widen_rows(const Context& ctx, const AnyRows& m, std::vector<float>& store,
                                  bool load = true) {
  if (m.dtype == DType::kF32) return F32Rows{static_cast<float*>(m.data), m.rows, m.cols, m.ld};
  store.resize(size_t(m.rows * m.cols));
  const F32Rows dense{store.data(), m.rows, m.cols, m.cols};
  if (!load) return dense;
  VLPAR_FLOAT_SWITCH(m.dtype, T, "widen_rows", {
    const T* src = static_cast<const T*>(m.data);
    parallel_for(ctx, m.rows, m.cols, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t c = 0; c < m.cols; ++c) dense.row(r)[c] = to_float(src[r * m.ld + c]);
    });
  });
  return dense;
}

/// Rounds the f32 rows `from` into `m` of a 16-bit dtype. Nothing for an f32 `m`: widen_rows handed out m itself,
/// and the result is already there.
inline Status narrow_rows(const Context& ctx, const F32Rows& from, const AnyRows& m) {
  if (m.dtype == DType::kF32) return Status::Ok();
  VLPAR_FLOAT_SWITCH(m.dtype, T, "narrow_rows", {
    T* dst = static_cast<T*>(m.data);
    parallel_for(ctx, from.rows, from.cols, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t c = 0; c < from.cols; ++c) dst[r * m.ld + c] = from_float<T>(from.row(r)[c]);
    });
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE::cpu
