// Model FLOPs of a Qwen3-VL step (spec §8). See flops.hpp.
#include "flops.hpp"

namespace qwen3vl {

int64_t text_layer_active_params(const Config& c, int l) {
  const TextConfig& t = c.text;
  const int64_t h = t.hidden;
  const int64_t q = int64_t(t.heads) * t.head_dim, kv = int64_t(t.kv_heads) * t.head_dim;
  const int64_t attn = h * q + 2 * h * kv + q * h;  // q, k, v, o projections
  const int64_t mlp = t.is_moe_layer(l) ? h * t.num_experts + int64_t(t.top_k) * 3 * h * t.moe_intermediate
                                        : 3 * h * t.intermediate;
  return attn + mlp;
}

int64_t text_active_params(const Config& c) {
  int64_t n = 0;
  for (int l = 0; l < c.text.layers; ++l) n += text_layer_active_params(c, l);
  return n;
}

LinearFlops text_fwd_flops_per_token(const Config& c) {
  const TextConfig& t = c.text;
  LinearFlops f;
  f.a = 2.0 * double(text_active_params(c)) + 2.0 * double(t.hidden) * double(t.vocab);
  f.b = 4.0 * double(t.layers) * double(t.heads) * double(t.head_dim);
  return f;
}

LinearFlops vision_fwd_flops_per_patch(const Config& c) {
  const VisionConfig& v = c.vision;
  const double hv = double(v.hidden), iv = double(v.intermediate), d = double(v.out_hidden);
  const double m2 = double(v.merge) * double(v.merge);
  const double hm = m2 * hv;  // merged width m²·Hv
  const double mergers = double(1 + v.deepstack_indexes.size()) * (2.0 * hm * hm + 2.0 * hm * d) / m2;
  LinearFlops f;
  f.a = 2.0 * double(v.patch_dim()) * hv + double(v.depth) * (8.0 * hv * hv + 4.0 * hv * iv) + mergers;
  f.b = 4.0 * double(v.depth) * hv;
  return f;
}

StepFlops count_flops(const Config& c, std::span<const int64_t> sample_lengths,
                      std::span<const vlpar::VisionGrid> grids) {
  const LinearFlops tok = text_fwd_flops_per_token(c);
  const double head = 2.0 * double(c.text.hidden) * double(c.text.vocab);
  const LinearFlops patch = vision_fwd_flops_per_patch(c);
  StepFlops s;
  for (int64_t len : sample_lengths) {
    const double n = double(len);
    s.llm_fwd += n * (tok.a - head) + tok.b * n * n;  // every token of the sample attends over S = len
    s.lm_head_fwd += n * head;
    s.tokens += len;
  }
  for (const vlpar::VisionGrid& g : grids) {
    const double seg = double(g.h) * double(g.w);  // S_seg: one image or one video frame
    s.vision_fwd += double(g.t) * seg * patch.at(seg);
    s.patches += g.t * g.h * g.w;
  }
  return s;
}

}  // namespace qwen3vl
