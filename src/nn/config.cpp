// TransformerConfig validation. See include/vlpar/nn/config.hpp.
#include "vlpar/nn/config.hpp"

namespace vlpar::nn {

Status TransformerConfig::validate() const {
  VLPAR_CHECK(hidden > 0 && heads > 0 && kv_heads > 0 && head_dim > 0 && intermediate > 0 && vocab > 0,
              "transformer config: hidden {}, heads {}, kv_heads {}, head_dim {}, intermediate {} and vocab {} must "
              "all be positive", hidden, heads, kv_heads, head_dim, intermediate, vocab);
  VLPAR_CHECK(num_layers > 0, "transformer config: num_layers must be positive, got {}", num_layers);
  VLPAR_CHECK(activation == DType::kF32 || activation == DType::kBF16,
              "transformer config: activation dtype {} is not supported (f32 or bf16; f16 would need loss scaling)",
              dtype_name(activation));
  VLPAR_CHECK(heads % kv_heads == 0, "transformer config: kv_heads {} does not divide heads {}", kv_heads, heads);
  VLPAR_CHECK(head_dim % 2 == 0, "transformer config: head_dim {} must be even for rotary embeddings", head_dim);
  VLPAR_CHECK(eps > 0.f, "transformer config: eps must be positive, got {}", eps);
  VLPAR_CHECK(rope_theta > 0.f, "transformer config: rope_theta must be positive, got {}", rope_theta);
  VLPAR_CHECK(init_std > 0.f, "transformer config: init_std must be positive, got {}", init_std);
  VLPAR_CHECK(ignore_index < 0 || ignore_index >= vocab,
              "transformer config: ignore_index {} is a valid token id of a vocab of {}", ignore_index, vocab);
  VLPAR_CHECK(rope == RopeKind::k1D || rope == RopeKind::kMRoPE, "transformer config: rope kind {} is unknown",
              int(rope));
  // transformers 4.57.1 (apply_interleaved_mrope) only slices frequencies [1, 3·sec[1]) and [2, 3·sec[2]) with
  // step 3, clamped to D/2; it checks nothing else, so neither do we: Σ sec = D/2 is a convention, not a rule.
  if (rope == RopeKind::kMRoPE)
    VLPAR_CHECK(mrope_section[0] >= 0 && mrope_section[1] >= 0 && mrope_section[2] >= 0,
                "transformer config: mrope_section [{}, {}, {}] must be non-negative", mrope_section[0],
                mrope_section[1], mrope_section[2]);
  return Status::Ok();
}

Status TransformerConfig::validate_tp(int tp) const {
  VLPAR_RETURN_IF_ERROR(validate());
  VLPAR_CHECK(tp >= 1, "tensor parallel size must be at least 1, got {}", tp);
  VLPAR_CHECK(heads % tp == 0, "tp={} does not divide {} attention heads", tp, heads);
  VLPAR_CHECK(kv_heads % tp == 0 || tp % kv_heads == 0,
              "tp={} and {} kv heads: one must divide the other (kv heads are split, or replicated on tp/kv ranks)",
              tp, kv_heads);
  VLPAR_CHECK(intermediate % tp == 0, "tp={} does not divide intermediate size {}", tp, intermediate);
  VLPAR_CHECK(vocab % tp == 0, "tp={} does not divide vocab {} (pad the vocab to a multiple of tp)", tp, vocab);
  return Status::Ok();
}

}  // namespace vlpar::nn
