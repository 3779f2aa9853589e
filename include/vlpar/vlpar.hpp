#pragma once
// Umbrella header: everything public in vlpar. Each include names what it provides.
#include "vlpar/core/status.hpp"      // provides: Status, StatusCode, Result<T>, VLPAR_CHECK, VLPAR_RETURN_IF_ERROR
#include "vlpar/core/dtype.hpp"       // provides: DType, bf16, f16, RNE conversions, dtype_of<T>
#include "vlpar/core/device.hpp"      // provides: Device, built_with_cuda(), cuda_device_count()
#include "vlpar/core/allocator.hpp"   // provides: Allocator with current/peak bytes per device
#include "vlpar/core/tensor.hpp"      // provides: Shape, TensorView, Tensor, zero_, copy_, convert_
#include "vlpar/core/rows.hpp"        // provides: RowsView, as_rows (leading dims collapsed into rows)
#include "vlpar/core/context.hpp"     // provides: Context, parallel_for (deterministic static partitions)
#include "vlpar/core/batch.hpp"       // provides: Batch (the packed-batch contract), VisionGrid
#include "vlpar/core/cli.hpp"         // provides: cli::Parser (typed command-line options), run_main
#include "vlpar/core/dispatch.hpp"    // provides: VLPAR_FLOAT_SWITCH, VLPAR_BOOL_SWITCH
#include "vlpar/core/log.hpp"         // provides: log_info/log_warn with a rank@host prefix
#include "vlpar/core/philox.hpp"      // provides: Philox-4x32-10, philox_uniform/normal per element
#include "vlpar/core/init.hpp"        // provides: InitRule, init_shard/init_full (layout-invariant init)
#include "vlpar/kernels/gemm.hpp"     // provides: gemm, linear_forward/backward
#include "vlpar/kernels/embedding.hpp"      // provides: embedding_forward/backward
#include "vlpar/kernels/norm.hpp"           // provides: rmsnorm_*, layernorm_* (CPU; RMSNorm also CUDA)
#include "vlpar/kernels/activation.hpp"     // provides: gelu_*, silu_*, swiglu_* (SwiGLU also CUDA)
#include "vlpar/kernels/rotary.hpp"         // provides: rotary_forward/backward: 1D, MRoPE, vision 2D (also CUDA)
#include "vlpar/kernels/attention.hpp"      // provides: varlen_attention_forward/backward (FlashAttention-2)
#include "vlpar/kernels/cross_entropy.hpp"  // provides: cross_entropy_*, linear_cross_entropy (chunked), label shift
#include "vlpar/kernels/router.hpp"         // provides: router_forward/backward, RouterAuxStats, aux loss
#include "vlpar/kernels/optimizer.hpp"      // provides: adamw_step, global_grad_norm, clip_grad_norm
#include "vlpar/comm/communicator.hpp"         // provides: Communicator, Work, CommOptions (group name, watchdog timeout), ReduceOp
#include "vlpar/comm/mpi_communicator.hpp"     // provides: MpiSession (init/finalize guard), MpiCommunicator, local_rank
#include "vlpar/comm/single_communicator.hpp"  // provides: SingleCommunicator (a group of one)
#include "vlpar/comm/nccl_communicator.hpp"    // provides: NcclCommunicator (CUDA tensors; kNotSupported without CUDA)
#include "vlpar/comm/conjugate.hpp"            // provides: CopyToRegion, ReduceFromRegion, Scatter/GatherRegion+Sequence, ReduceScatterToSequence, AllToAll
#include "vlpar/parallel/parallel_config.hpp"  // provides: ParallelConfig (tp, cp, ep, etp, pp, dp, order, vision_tp), ModelDims, validate()
#include "vlpar/parallel/mesh.hpp"             // provides: Mesh (rank <-> coordinates, groups per Axis, MoE folding, vision TP), RankGrid
#include "vlpar/parallel/process_groups.hpp"   // provides: ProcessGroups (one Communicator per Axis, split from the world)
#include "vlpar/parallel/lr_schedule.hpp"      // provides: LrSchedule (warmup, cosine / linear / constant decay)
#include "vlpar/nn/config.hpp"             // provides: TransformerConfig (validate, validate_tp)
#include "vlpar/core/shard.hpp"              // provides: even_shard, kv_head_shard, vocab_owner, ParamShard, init_param_shard
#include "vlpar/nn/tensor_parallel.hpp"    // provides: TensorParallel, region_enter/exit forward/backward (TP/SP boundaries)
#include "vlpar/nn/attention_block.hpp"    // provides: AttentionBlock (TP by heads, GQA kv replication), AttentionWeights/Stash
#include "vlpar/nn/mlp_block.hpp"          // provides: MlpBlock (fused gate/up column-parallel, down row-parallel)
#include "vlpar/nn/vocab_parallel.hpp"     // provides: vocab-parallel embedding, LM head and cross-entropy
#include "vlpar/nn/layer.hpp"              // provides: Layer / RecomputableLayer concepts, LayerStack, Recompute
#include "vlpar/nn/decoder_layer.hpp"      // provides: DecoderLayer (attention + MLP or MoE), MoeLoss
#include "vlpar/nn/kv_cache.hpp"           // provides: KvCache (incremental decoding)
#include "vlpar/nn/decoder.hpp"            // provides: DecoderModel (params/grads, forward/backward, param_layout)
#include "vlpar/nn/lm_head.hpp"            // provides: LmHead (final RMSNorm + vocab-parallel head + CE, tied or untied)
#include "vlpar/nn/moe_block.hpp"          // provides: MoeBlock, MoeConfig, MoeWeights (router, experts, Switch aux loss)
#include "vlpar/nn/vision_config.hpp"      // provides: VisionConfig, vision cu_seqlens / patch coordinates of grids
#include "vlpar/nn/vision_block.hpp"       // provides: VisionBlock (LayerNorm, fused qkv, 2D rotary, bidirectional attention)
#include "vlpar/nn/patch_merger.hpp"       // provides: PatchMerger (final and deepstack mergers)
#include "vlpar/nn/vision_layer.hpp"       // provides: VisionLayer (a vision block as an nn::Layer)
#include "vlpar/nn/vision_encoder.hpp"     // provides: VisionEncoder (patch embed, pos-embed interpolation, blocks, mergers)
#include "vlpar/nn/param_registry.hpp"     // provides: ParamRegistry (one list of parameters: name, shard, group, frozen)
#include "vlpar/kernels/moe.hpp"           // provides: MoeDispatch, grouped_gemm, moe_permute/unpermute
#include "vlpar/kernels/pos_embed.hpp"     // provides: VisionGrid, learned position-embedding interpolation fwd/bwd
#include "vlpar/io/safetensors.hpp"        // provides: SafetensorsFile, TensorInfo, write_safetensors, atomic_write_file
#include "vlpar/io/hf_checkpoint.hpp"      // provides: HfTensorSource, write_hf_safetensors, plan_hf_shards
#include "vlpar/data/mrope_positions.hpp"  // provides: compute_mrope_positions (HF get_rope_index over a packed batch)
