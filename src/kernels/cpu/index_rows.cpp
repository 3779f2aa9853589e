// CPU row gathers and scatters (the computation; src/kernels/ops/index_rows.cpp checks the arguments and the
// indices). One selected row per work item; scatter rows are distinct, so no two items write the same row.
// Test: tests/unit/test_index_rows.cpp.
#include "vlpar/kernels/index_rows.hpp"

#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

enum class Mode { kGather, kScatter, kScatterAdd };

/// small[i] ↔ big[index[i]] for every i, in the direction and with the combine of `mode`.
template <class B, class S>
void move_rows(const Context& ctx, const TensorView& big, const TensorView& small, const TensorView& index,
               Mode mode) {
  const int64_t H = big.size(1);
  parallel_for(ctx, small.size(0), H, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      B* b = static_cast<B*>(big.data) + index_at(index, i) * big.stride(0);
      S* s = static_cast<S*>(small.data) + i * small.stride(0);
      if (mode == Mode::kGather)
        for (int64_t j = 0; j < H; ++j) s[j] = from_float<S>(to_float(b[j]));
      else if (mode == Mode::kScatter)
        for (int64_t j = 0; j < H; ++j) b[j] = from_float<B>(to_float(s[j]));
      else
        for (int64_t j = 0; j < H; ++j) b[j] = from_float<B>(to_float(b[j]) + to_float(s[j]));
    }
  });
}

Status dispatch(const Context& ctx, const TensorView& big, const TensorView& small, const TensorView& index,
                Mode mode, const char* op) {
  VLPAR_FLOAT_SWITCH(big.dtype, B, op, {
    VLPAR_FLOAT_SWITCH(small.dtype, S, op, { move_rows<B, S>(ctx, big, small, index, mode); });
  });
  return Status::Ok();
}

}  // namespace

Status gather_rows(const Context& ctx, TensorView dst, TensorView src, TensorView index) {
  return dispatch(ctx, src, dst, index, Mode::kGather, "gather_rows");
}

Status scatter_rows(const Context& ctx, TensorView dst, TensorView src, TensorView index) {
  return dispatch(ctx, dst, src, index, Mode::kScatter, "scatter_rows");
}

Status scatter_add_rows(const Context& ctx, TensorView dst, TensorView src, TensorView index) {
  return dispatch(ctx, dst, src, index, Mode::kScatterAdd, "scatter_add_rows");
}

Status zero_rows(const Context& ctx, TensorView dst, TensorView index) {
  const int64_t H = dst.size(1);
  VLPAR_FLOAT_SWITCH(dst.dtype, D, "zero_rows", {
    parallel_for(ctx, index.numel(), H, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        D* d = dst.ptr<D>() + index_at(index, i) * dst.stride(0);
        for (int64_t j = 0; j < H; ++j) d[j] = from_float<D>(0.f);
      }
    });
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
