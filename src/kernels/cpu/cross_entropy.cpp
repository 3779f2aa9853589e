// CPU cross-entropy with ignore_index, and the fused chunked LM-head + cross-entropy.
// Per-row math in fp32 (max-subtracted log-sum-exp); the loss sum is accumulated in fp64 over fixed row
// partitions and combined in partition order (bitwise reproducible for a given thread count).
// The computation only: src/kernels/ops/cross_entropy.cpp checks the arguments. Test: tests/unit/test_losses.cpp
#include "vlpar/kernels/cross_entropy.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "gemm_f32.hpp"
#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

/// The rows that are not ignored (labels checked by src/kernels/ops/cross_entropy.cpp).
int64_t count_valid(const TensorView& labels, int64_t n, int64_t ignore) {
  int64_t valid = 0;
  for (int64_t i = 0; i < n; ++i) valid += index_at(labels, i) != ignore;
  return valid;
}

/// log Σ exp over one fp32 row.
float row_lse(const float* z, int64_t V) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < V; ++v) m = std::max(m, z[v]);
  float s = 0.f;
  for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - m);
  return m + std::log(s);
}

double norm_of(const CrossEntropyDesc& d, int64_t valid) {
  return d.reduction == Reduction::kMean ? double(std::max<int64_t>(valid, 1)) : 1.0;
}

}  // namespace

Result<CrossEntropyResult> cross_entropy_forward(const Context& ctx, TensorView lse, TensorView logits,
                                                 TensorView labels, const CrossEntropyDesc& desc) {
  const char* op = "cross_entropy_forward";
  const int64_t N = logits.size(0), V = logits.size(1);
  const int64_t valid = count_valid(labels, N, desc.ignore_index);
  const int64_t parts = num_parts(ctx, N, 4 * V);
  std::vector<double> partial(size_t(parts), 0.0);
  VLPAR_FLOAT_SWITCH(logits.dtype, T, op, {
    parallel_for_n_parts(ctx, N, parts, [&](int64_t part, int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(V));
      for (int64_t n = begin; n < end; ++n) {
        const T* z = logits.ptr<T>() + n * logits.stride(0);
        for (int64_t v = 0; v < V; ++v) row[size_t(v)] = to_float(z[v]);
        const float l = row_lse(row.data(), V);
        if (!lse.empty()) lse.ptr<float>()[n] = l;
        const int64_t y = index_at(labels, n);
        if (y != desc.ignore_index) partial[size_t(part)] += double(l) - double(row[size_t(y)]);
      }
    });
  });
  double sum = 0.0;
  for (double p : partial) sum += p;
  return CrossEntropyResult{sum / norm_of(desc, valid), valid};
}

Status cross_entropy_backward(const Context& ctx, TensorView dlogits, TensorView logits, TensorView labels,
                              TensorView lse, const CrossEntropyDesc& desc, int64_t num_valid, float grad_loss) {
  const char* op = "cross_entropy_backward";
  const int64_t N = logits.size(0), V = logits.size(1);
  const float scale = float(double(grad_loss) / norm_of(desc, num_valid));
  VLPAR_FLOAT_SWITCH(logits.dtype, T, op, {
    parallel_for(ctx, N, 4 * V, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const T* z = logits.ptr<T>() + n * logits.stride(0);
        T* dz = dlogits.ptr<T>() + n * dlogits.stride(0);
        const int64_t label = index_at(labels, n);
        if (label == desc.ignore_index) {
          for (int64_t v = 0; v < V; ++v) dz[v] = from_float<T>(0.f);
          continue;
        }
        const float l = lse.ptr<float>()[n];
        const int64_t y = desc.block.local(label, V);  // −1: another vocab block holds the label
        for (int64_t v = 0; v < V; ++v) {
          const float p = std::exp(to_float(z[v]) - l);  // read before write: dz may alias z
          dz[v] = from_float<T>(scale * (p - (v == y ? 1.f : 0.f)));
        }
      }
    });
  });
  return Status::Ok();
}

Status vocab_shard_row_max(const Context& ctx, TensorView row_max, TensorView logits) {
  const int64_t V = logits.size(1);
  VLPAR_FLOAT_SWITCH(logits.dtype, T, "vocab_shard_row_max", {
    parallel_for(ctx, logits.size(0), V, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const T* z = logits.ptr<T>() + n * logits.stride(0);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t v = 0; v < V; ++v) m = std::max(m, to_float(z[v]));
        row_max.ptr<float>()[n] = m;
      }
    });
  });
  return Status::Ok();
}

Status vocab_shard_sums(const Context& ctx, TensorView sums, TensorView logits, TensorView row_max,
                        TensorView labels, const CrossEntropyDesc& desc) {
  const int64_t N = logits.size(0), V = logits.size(1);
  float* sum_exp = sums.ptr<float>();
  float* target = sum_exp + N;
  const float* m = row_max.ptr<float>();
  VLPAR_FLOAT_SWITCH(logits.dtype, T, "vocab_shard_sums", {
    parallel_for(ctx, N, 4 * V, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const T* z = logits.ptr<T>() + n * logits.stride(0);
        float acc = 0.f;
        for (int64_t v = 0; v < V; ++v) acc += std::exp(to_float(z[v]) - m[n]);
        sum_exp[n] = acc;
        const int64_t label = index_at(labels, n);
        const int64_t y = label == desc.ignore_index ? -1 : desc.block.local(label, V);
        target[n] = y >= 0 ? to_float(z[y]) : 0.f;
      }
    });
  });
  return Status::Ok();
}

Result<CrossEntropyResult> vocab_shard_loss(const Context& ctx, TensorView lse, TensorView row_max, TensorView sums,
                                            TensorView labels, const CrossEntropyDesc& desc) {
  const int64_t N = row_max.numel();
  const float* m = row_max.ptr<float>();
  const float* sum_exp = sums.ptr<float>();
  const float* target = sum_exp + N;
  float* l = lse.ptr<float>();
  parallel_for(ctx, N, 32, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) l[n] = m[n] + std::log(sum_exp[n]);
  });
  // Rows in order with an fp64 sum: the same loss on every rank of the vocab group, for any thread count.
  double total = 0.0;
  int64_t valid = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (index_at(labels, n) == desc.ignore_index) continue;
    total += double(l[n]) - double(target[n]);
    ++valid;
  }
  return CrossEntropyResult{total / norm_of(desc, valid), valid};
}

namespace {

/// hidden/weight widened to fp32 when stored in lower precision (weight: once per call).
Status widen_2d(std::vector<float>& out, const TensorView& v) {
  out.resize(size_t(v.numel()));
  VLPAR_FLOAT_SWITCH(v.dtype, T, "linear_cross_entropy", {
    for (int64_t r = 0; r < v.size(0); ++r)
      for (int64_t c = 0; c < v.size(1); ++c) out[size_t(r * v.size(1) + c)] = to_float(v.ptr<T>()[r * v.stride(0) + c]);
  });
  return Status::Ok();
}

}  // namespace

Result<CrossEntropyResult> linear_cross_entropy(const Context& ctx, TensorView dhidden, TensorView dweight,
                                                TensorView hidden, TensorView weight, TensorView labels,
                                                const CrossEntropyDesc& desc, float grad_loss) {
  const int64_t N = hidden.size(0), Hd = hidden.size(1), V = weight.size(0);
  const int64_t valid = count_valid(labels, N, desc.ignore_index);
  constexpr int64_t kChunkBytes = int64_t(32) << 20;  // fp32 logits per chunk
  const int64_t chunk = desc.chunk_tokens > 0 ? desc.chunk_tokens : std::max<int64_t>(1, kChunkBytes / (4 * V));
  const float scale = float(double(grad_loss) / norm_of(desc, valid));
  const bool want_grad = !dhidden.empty() || !dweight.empty();

  std::vector<float> w32, h32;
  const float* w = weight.ptr<float>();
  int64_t ldw = weight.stride(0);
  if (weight.dtype != DType::kF32) {
    VLPAR_RETURN_IF_ERROR(widen_2d(w32, weight));
    w = w32.data();
    ldw = Hd;
  }
  std::vector<float> logits(size_t(std::min(chunk, N) * V));
  double loss_sum = 0.0;
  for (int64_t c0 = 0; c0 < N; c0 += chunk) {
    const int64_t rows = std::min(chunk, N - c0);
    const float* h = nullptr;
    int64_t ldh = Hd;
    if (hidden.dtype == DType::kF32) {
      h = hidden.ptr<float>() + c0 * hidden.stride(0);
      ldh = hidden.stride(0);
    } else {
      VLPAR_RETURN_IF_ERROR(widen_2d(h32, hidden.slice(0, c0, c0 + rows)));
      h = h32.data();
    }
    // logits [rows, V] = h [rows, Hd] · Wᵀ
    cpu::gemm_f32(ctx, {rows, V, Hd, h, ldh, false, w, ldw, true, logits.data(), V, 1.f, 0.f});
    const int64_t parts = num_parts(ctx, rows, 4 * V);
    std::vector<double> partial(size_t(parts), 0.0);
    parallel_for_n_parts(ctx, rows, parts, [&](int64_t part, int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* z = logits.data() + r * V;
        const int64_t y = index_at(labels, c0 + r);
        if (y == desc.ignore_index) {
          if (want_grad) std::fill(z, z + V, 0.f);
          continue;
        }
        const float l = row_lse(z, V);
        partial[size_t(part)] += double(l) - double(z[y]);
        if (!want_grad) continue;
        for (int64_t v = 0; v < V; ++v) z[v] = scale * std::exp(z[v] - l);  // dlogits in place
        z[y] -= scale;
      }
    });
    for (double p : partial) loss_sum += p;
    if (!dhidden.empty())  // dh [rows, Hd] = dlogits [rows, V] · W [V, Hd]
      cpu::gemm_f32(ctx, {rows, Hd, V, logits.data(), V, false, w, ldw, false,
                          dhidden.ptr<float>() + c0 * Hd, Hd, 1.f, 0.f});
    if (!dweight.empty())  // dW [V, Hd] += dlogitsᵀ [V, rows] · h [rows, Hd]
      cpu::gemm_f32(ctx, {V, Hd, rows, logits.data(), V, true, h, ldh, false, dweight.ptr<float>(), Hd, 1.f, 1.f});
  }
  return CrossEntropyResult{loss_sum / norm_of(desc, valid), valid};
}

Status shift_labels_for_causal_lm(TensorView out, TensorView labels, TensorView cu_seqlens, int64_t ignore_index) {
  const int32_t* cu = cu_seqlens.ptr<int32_t>();
  const int64_t B = cu_seqlens.size(0) - 1;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = cu[b]; s < cu[b + 1]; ++s) {
      const int64_t v = s + 1 < cu[b + 1] ? index_at(labels, s + 1) : ignore_index;
      if (out.dtype == DType::kI32) out.ptr<int32_t>()[s] = int32_t(v);
      else out.ptr<int64_t>()[s] = v;
    }
  }
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
