// MRoPE position ids of a packed batch (HF get_rope_index per sample). See include/vlpar/data/mrope_positions.hpp.
#include "vlpar/data/mrope_positions.hpp"

#include <fmt/core.h>

#include <algorithm>

namespace vlpar::data {

namespace {

struct Kind {
  const char* name;   // "image" / "video"
  const char* token;  // "<|image_pad|>" / "<|video_pad|>"
  int64_t id;
  std::span<const VisionGrid> grids;  // videos: the caller's rows; frames are addressed through `frame_of`
  bool per_frame;                     // video rows are split into t frames of (1, h, w)
  int64_t total_spans = 0;            // images: rows; videos: Σ t
  int64_t next_row = 0;               // row of the next span to consume
  int64_t next_frame = 0;             // frame inside that row (videos)
  int64_t consumed = 0;               // spans consumed so far
};

Status check_grids(const Kind& k, int64_t m) {
  for (size_t r = 0; r < k.grids.size(); ++r) {
    const VisionGrid& g = k.grids[r];
    VLPAR_RETURN_IF_ERROR(check_vision_grid(g, fmt::format("mrope_positions: {}_grids[{}]", k.name, r)));
    VLPAR_CHECK(g.h % m == 0 && g.w % m == 0,
                "mrope_positions: {}_grids[{}] = ({}, {}, {}): h and w must be multiples of spatial_merge_size {}",
                k.name, r, g.t, g.h, g.w, m);
  }
  return Status::Ok();
}

template <class CuT>
Status compute(std::span<int64_t> positions, std::span<int64_t> rope_deltas, std::span<const int64_t> ids,
               std::span<const CuT> cu, std::span<const VisionGrid> image_grids,
               std::span<const VisionGrid> video_grids, const MropeDesc& d) {
  const int64_t n_tok = static_cast<int64_t>(ids.size());
  VLPAR_CHECK(d.spatial_merge_size >= 1, "mrope_positions: spatial_merge_size must be at least 1, got {}",
              d.spatial_merge_size);
  VLPAR_CHECK(d.image_token_id != d.video_token_id && d.image_token_id != d.vision_start_token_id &&
                  d.video_token_id != d.vision_start_token_id,
              "mrope_positions: image ({}), video ({}) and vision_start ({}) token ids must differ", d.image_token_id,
              d.video_token_id, d.vision_start_token_id);
  VLPAR_CHECK(!cu.empty(), "mrope_positions: cu_seqlens is empty (it needs B+1 entries, starting with 0)");
  const int64_t n_samples = static_cast<int64_t>(cu.size()) - 1;
  VLPAR_CHECK(cu[0] == 0, "mrope_positions: cu_seqlens[0] is {}, not 0", int64_t(cu[0]));
  for (int64_t b = 0; b < n_samples; ++b)
    VLPAR_CHECK(cu[b + 1] > cu[b], "mrope_positions: cu_seqlens[{}] = {} is not above cu_seqlens[{}] = {} (sample {} "
                "is empty or negative)", b + 1, int64_t(cu[b + 1]), b, int64_t(cu[b]), b);
  VLPAR_CHECK(int64_t(cu[n_samples]) == n_tok, "mrope_positions: cu_seqlens ends at {} but input_ids has {} tokens",
              int64_t(cu[n_samples]), n_tok);
  VLPAR_CHECK(static_cast<int64_t>(positions.size()) == 3 * n_tok,
              "mrope_positions: positions has {} entries, expected 3 x {} tokens", positions.size(), n_tok);
  VLPAR_CHECK(static_cast<int64_t>(rope_deltas.size()) == n_samples,
              "mrope_positions: rope_deltas has {} entries, expected one per sample ({})", rope_deltas.size(),
              n_samples);

  const int64_t m = d.spatial_merge_size;
  Kind image{"image", "<|image_pad|>", d.image_token_id, image_grids, false};
  Kind video{"video", "<|video_pad|>", d.video_token_id, video_grids, true};
  VLPAR_RETURN_IF_ERROR(check_grids(image, m));
  VLPAR_RETURN_IF_ERROR(check_grids(video, m));
  image.total_spans = static_cast<int64_t>(image_grids.size());
  for (const VisionGrid& g : video_grids) video.total_spans += g.t;

  int64_t* pos_t = positions.data();
  int64_t* pos_h = pos_t + n_tok;
  int64_t* pos_w = pos_h + n_tok;
  for (int64_t b = 0; b < n_samples; ++b) {
    const int64_t s0 = cu[b], s1 = cu[b + 1];
    int64_t next = 0;  // 1 + largest position given so far in this sample
    int64_t i = s0;
    while (i < s1) {
      const int64_t id = ids[static_cast<size_t>(i)];
      Kind* kind = id == image.id ? &image : (id == video.id ? &video : nullptr);
      if (kind != nullptr) {
        // A pad that does not directly follow <|vision_start|>: spans are recognised by that pair (HF counts them
        // the same way), and a run's tail is consumed with its span, so this pad belongs to no span.
        const bool after_start = i > s0 && ids[static_cast<size_t>(i - 1)] == d.vision_start_token_id;
        VLPAR_CHECK(after_start,
                    "mrope_positions: sample {}: {} at pack index {} is not part of a vision span (a span is "
                    "<|vision_start|> directly followed by its pads)", b, kind->token, i);
        VLPAR_CHECK(kind->consumed < kind->total_spans,
                    "mrope_positions: sample {}: the {} span at pack index {} is {} span number {} but only {} {} "
                    "grid {} given", b, kind->name, i, kind->name, kind->consumed + 1, kind->total_spans, kind->name,
                    kind->per_frame ? "frames (Σ t over video rows) were" : "rows were");
        const VisionGrid& row = kind->grids[static_cast<size_t>(kind->next_row)];
        const int64_t gt = kind->per_frame ? 1 : row.t, gh = row.h / m, gw = row.w / m;
        const int64_t need = gt * gh * gw;
        int64_t run = 0;
        while (i + run < s1 && ids[static_cast<size_t>(i + run)] == kind->id) ++run;
        VLPAR_CHECK(run == need,
                    "mrope_positions: sample {}: the {} span at pack index {} has {} {} tokens but {}_grids[{}]{} = "
                    "({}, {}, {}) needs {}·({}/{})·({}/{}) = {}", b, kind->name, i, run, kind->token, kind->name,
                    kind->next_row,
                    kind->per_frame ? fmt::format(" frame {}", kind->next_frame) : std::string(), row.t, row.h,
                    row.w, gt, row.h, m, row.w, m, need);
        const int64_t base = next;
        int64_t k = i;
        for (int64_t ti = 0; ti < gt; ++ti)
          for (int64_t hi = 0; hi < gh; ++hi)
            for (int64_t wi = 0; wi < gw; ++wi, ++k) {
              pos_t[k] = base + ti;
              pos_h[k] = base + hi;
              pos_w[k] = base + wi;
            }
        next = base + std::max({gt, gh, gw});
        i += run;
        ++kind->consumed;
        if (kind->per_frame && ++kind->next_frame < row.t) continue;
        kind->next_frame = 0;
        ++kind->next_row;
        continue;
      }
      pos_t[i] = pos_h[i] = pos_w[i] = next++;
      ++i;
    }
    rope_deltas[static_cast<size_t>(b)] = next - (s1 - s0);
  }
  for (const Kind* k : {&image, &video})
    VLPAR_CHECK(k->consumed == k->total_spans,
                "mrope_positions: {} {} grid {} left over: the pack has {} {} spans but {} were given", 
                k->total_spans - k->consumed, k->name, k->per_frame ? "frames" : "rows", k->consumed, k->name,
                k->total_spans);
  return Status::Ok();
}

}  // namespace

Status compute_mrope_positions(std::span<int64_t> positions, std::span<int64_t> rope_deltas,
                               std::span<const int64_t> input_ids, std::span<const int64_t> cu_seqlens,
                               std::span<const VisionGrid> image_grids, std::span<const VisionGrid> video_grids,
                               const MropeDesc& desc) {
  return compute(positions, rope_deltas, input_ids, cu_seqlens, image_grids, video_grids, desc);
}

Status compute_mrope_positions(std::span<int64_t> positions, std::span<int64_t> rope_deltas,
                               std::span<const int64_t> input_ids, std::span<const int32_t> cu_seqlens,
                               std::span<const VisionGrid> image_grids, std::span<const VisionGrid> video_grids,
                               const MropeDesc& desc) {
  return compute(positions, rope_deltas, input_ids, cu_seqlens, image_grids, video_grids, desc);
}

Result<MropePositions> mrope_positions(std::span<const int64_t> input_ids, std::span<const int64_t> cu_seqlens,
                                       std::span<const VisionGrid> image_grids,
                                       std::span<const VisionGrid> video_grids, const MropeDesc& desc) {
  MropePositions out;
  out.num_tokens = static_cast<int64_t>(input_ids.size());
  out.positions.assign(static_cast<size_t>(3 * out.num_tokens), 0);
  out.rope_deltas.assign(cu_seqlens.empty() ? 0 : cu_seqlens.size() - 1, 0);
  VLPAR_RETURN_IF_ERROR(compute_mrope_positions(out.positions, out.rope_deltas, input_ids, cu_seqlens, image_grids,
                                                video_grids, desc));
  return out;
}

}  // namespace vlpar::data
