#pragma once
// Qwen3-VL weights in Hugging Face layout, both ways (spec qwen3vl.md §7, v4.57 on-disk layout):
//   import : HF directory (config.json + model.safetensors or sharded index) → Model. Every registry parameter is
//            built as its FULL vlpar tensor from one or more HF tensors, then this rank takes its shard
//            (vlpar::gather_shard_from_full): "convert then split", so any tp layout loads from the same files.
//   export : Model → HF directory that transformers loads (config.json + safetensors, sharded above a limit).
// Name/layout rules (HfPart lists): identity for every tensor except
//   - the dense SwiGLU: vlpar `mlp.gate_up_proj.weight` [2I, H] = rows of HF `mlp.gate_proj.weight` [I, H] then
//     `mlp.up_proj.weight` [I, H];
//   - the patch embedding: vlpar [Hv, C·Tp·P·P] = HF Conv3d weight [Hv, C, Tp, P, P] (same bytes);
//   - the fused vision qkv [3Hv, Hv] and the fused MoE experts gate_up_proj [E, H, 2I] / down_proj [E, I, H] are
//     kept fused as on disk (the blocks read them in that layout).
// Tied models: HF omits lm_head.weight; an lm_head.weight present in a tied checkpoint is ignored, as transformers
// does. Any other HF tensor the model does not consume is an error naming it (a checkpoint of another model).
// A load → export round trip reproduces every tensor bit for bit in its file dtype.
// Test: examples/qwen3vl/tests/test_hf_weights.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include "model.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/io/safetensors.hpp"
#include "vlpar/obs/progress_bar.hpp"

namespace qwen3vl {

/// One HF tensor making up rows [row_begin, row_begin + shape[0]) of a vlpar parameter (viewed as rows).
struct HfPart {
  std::string name;
  vlpar::Shape shape;  // HF shape
};

/// @brief The HF tensors that make up registry parameter `index`, in row order.
std::vector<HfPart> hf_parts(const Model& model, size_t index);

enum class HfWhich { kValues, kGrads };

/// @brief Every parameter's value (or gradient; frozen ones have none and are left out) as HF-named views into the
/// registry (tp 1), the dense SwiGLU split into gate_proj/up_proj views; names get `prefix` in front.
/// `whole` (optional, values only): per registry index a whole-shape view to read instead of a sharded parameter
/// (gather_experts); an empty view there, or no vector, means the registry's own (which must be whole).
Result<std::vector<vlpar::io::NamedTensor>> hf_tensors(const Model& model, HfWhich which,
                                                       const std::string& prefix = "",
                                                       const std::vector<vlpar::TensorView>* whole = nullptr);

/// @brief Every expert tensor of an expert-parallel model gathered whole (each ep rank holds E / ep experts along
/// dim 0, in rank order: an all-gather over ep; under expert tensor parallelism each etp rank its block of every
/// expert's width, placed by the pieces the etp ranks all-gather first; collective, every ep and etp rank calls
/// it), as views indexed by registry index for hf_tensors / export_hf (empty where the parameter is not an expert
/// shard); `storage` owns them. Without expert parallelism (no ep, no etp group) all views are empty.
Result<std::vector<vlpar::TensorView>> gather_experts(const Model& model, const vlpar::nn::ExpertParallel& ep,
                                                      Allocator& alloc, std::vector<Tensor>& storage);

/// @brief Reads every parameter of `model` from the HF directory `dir` (shapes checked against the config).
/// `progress` (optional) counts parameter bytes as they are read.
Status load_hf_weights(Model& model, const std::string& dir, vlpar::obs::ProgressBar* progress = nullptr);

/// @brief load_hf_config(dir) + Model::create + load_hf_weights.
/// `dtype`: the model's training precision (Config::dtype); the file's weights are converted to it.
Result<Model> load_hf_model(const Context& ctx, const std::string& dir, const Freeze& freeze, Allocator& alloc,
                            vlpar::DType dtype = vlpar::DType::kF32);

/// @brief Writes config.json and the weights of `model` (tp 1) into `dir` with storage dtype `dtype`
/// (F32, BF16 or F16); shards above max_shard_bytes with an index, as save_pretrained does. `progress` (optional)
/// counts the stored bytes as each file is written.
/// `whole`: as hf_tensors (the gathered experts of an expert-parallel run: the export equals the ep 1 one).
Status export_hf(const Model& model, const std::string& dir, vlpar::DType dtype = vlpar::DType::kF32,
                 uint64_t max_shard_bytes = 5'000'000'000ull, vlpar::obs::ProgressBar* progress = nullptr,
                 const std::vector<vlpar::TensorView>* whole = nullptr);

}  // namespace qwen3vl
