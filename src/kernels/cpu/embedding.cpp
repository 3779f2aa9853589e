// CPU embedding lookup and gradient (the computation; src/kernels/ops/embedding.cpp checks the arguments). The backward splits the hidden dim across threads; each thread walks
// all tokens in order, so accumulation order per element is fixed (no atomics, bitwise reproducible).
// Test: tests/unit/test_losses.cpp
#include "vlpar/kernels/embedding.hpp"

#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {

Status embedding_forward(const Context& ctx, TensorView out, TensorView table, TensorView ids, VocabBlock block) {
  const char* op = "embedding_forward";
  VLPAR_FLOAT_SWITCH(out.dtype, O, op, {
    VLPAR_FLOAT_SWITCH(table.dtype, T, op, {
      const int64_t H = out.size(1), rows = table.size(0);
      parallel_for(ctx, out.size(0), H, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n) {
          const int64_t local = block.local(index_at(ids, n), rows);
          O* dst = out.ptr<O>() + n * out.stride(0);
          if (local < 0) {  // another block's id: this block contributes a zero row
            for (int64_t i = 0; i < H; ++i) dst[i] = from_float<O>(0.f);
            continue;
          }
          const T* src = table.ptr<T>() + local * table.stride(0);
          for (int64_t i = 0; i < H; ++i) dst[i] = from_float<O>(to_float(src[i]));
        }
      });
    });
  });
  return Status::Ok();
}

Status embedding_backward(const Context& ctx, TensorView dtable, TensorView dout, TensorView ids, VocabBlock block,
                          TensorView skip, int64_t padding_idx) {
  const char* op = "embedding_backward";
  const int64_t rows = dtable.size(0);
  VLPAR_FLOAT_SWITCH(dtable.dtype, D, op, {
    VLPAR_FLOAT_SWITCH(dout.dtype, G, op, {
      parallel_for(ctx, dtable.size(1), dout.size(0), [&](int64_t c0, int64_t c1) {
        for (int64_t n = 0; n < dout.size(0); ++n) {
          const int64_t id = index_at(ids, n), local = block.local(id, rows);
          if (local < 0 || id == padding_idx || (!skip.empty() && index_at(skip, n) != 0)) continue;
          D* dst = dtable.ptr<D>() + local * dtable.stride(0);
          const G* src = dout.ptr<G>() + n * dout.stride(0);
          for (int64_t i = c0; i < c1; ++i) dst[i] = from_float<D>(to_float(dst[i]) + to_float(src[i]));
        }
      });
    });
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
