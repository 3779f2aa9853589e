#pragma once
// AdamW with decoupled weight decay and bias correction; global gradient L2 norm; clipping.
//   m = β1·m + (1−β1)·g ; v = β2·v + (1−β2)·g² ; p −= lr·wd·p ; p −= lr · (m/(1−β1^t)) / (sqrt(v/(1−β2^t)) + eps)
// Master weights, m and v are fp32; the gradient may be any float dtype; an optional low-precision copy of
// the updated parameter is written for the model's storage dtype.
#include <cmath>
#include <cstdint>
#include <span>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;

  /// Inline, like every configuration check: a program's config parser (the trainer's TOML) links no kernel.
  Status validate() const {
    VLPAR_CHECK(lr >= 0.f && std::isfinite(lr), "adamw: lr must be finite and >= 0, got {}", lr);
    VLPAR_CHECK(beta1 >= 0.f && beta1 < 1.f, "adamw: beta1 must be in [0, 1), got {}", beta1);
    VLPAR_CHECK(beta2 >= 0.f && beta2 < 1.f, "adamw: beta2 must be in [0, 1), got {}", beta2);
    VLPAR_CHECK(eps > 0.f, "adamw: eps must be positive, got {}", eps);
    VLPAR_CHECK(weight_decay >= 0.f, "adamw: weight_decay must be >= 0, got {}", weight_decay);
    return Status::Ok();
  }
};

/// @param param      [n] f32 master weights, updated in place
/// @param param_copy [n] storage-dtype copy written after the update (empty view: none)
/// @param grad       [n] any float dtype
/// @param m, v       [n] f32 optimizer state
/// @param step       1-based step count used for bias correction
Status adamw_step(const Context& ctx, TensorView param, TensorView param_copy, TensorView grad, TensorView m,
                  TensorView v, const AdamWConfig& cfg, int64_t step);

/// @brief sqrt(Σ_tensors Σ g²), accumulated in fp64 with a fixed partition (bitwise reproducible).
Result<double> global_grad_norm(const Context& ctx, std::span<const TensorView> grads);

/// @brief Scales every gradient by min(1, max_norm / (norm + 1e-6)) when norm > max_norm; returns the
/// pre-clip norm. Non-finite norms are returned unchanged and nothing is scaled (the trainer skips the step).
Result<double> clip_grad_norm(const Context& ctx, std::span<const TensorView> grads, double max_norm);

/// @brief t ← alpha · t in place (any float dtype, CPU).
Status scale_(const Context& ctx, TensorView t, float alpha);

}  // namespace vlpar
