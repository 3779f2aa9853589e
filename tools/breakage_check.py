#!/usr/bin/env python3
"""Deliberate-breakage check (STYLE §14): applies one known bug at a time to a scratch copy of HEAD, rebuilds the
test that should catch it and prints which tests failed. A breakage reported NOT CAUGHT means a test is too weak.
Usage: tools/breakage_check.py [substring of case names ...]    (takes ~10 minutes for all cases on 2 cores)
The last field of a case names the test binaries to run, space-separated; `name:npN` runs it under mpirun -np N."""
import os, re, subprocess, sys, tempfile
ROOT = tempfile.mkdtemp(prefix="vlpar-breakage-")
subprocess.run(f"git -C {os.path.dirname(os.path.abspath(__file__))}/.. archive HEAD | tar -x -C {ROOT}", shell=True, check=True)
cases = [
 ("rmsnorm bwd drops the mean term", "src/kernels/cpu/norm.cpp", "rs * gi * to_float(w[i]) - xi * c", "rs * gi * to_float(w[i]) - xi * c * 0.f", "test_norm"),
 ("layernorm uses unbiased variance", "src/kernels/cpu/norm.cpp", "std::sqrt(var / float(H) + eps)", "std::sqrt(var / float(H - 1) + eps)", "test_norm"),
 ("gelu tanh cubic coefficient 0.04", "src/kernels/cpu/activation.cpp", "kGeluCubic = 0.044715f", "kGeluCubic = 0.04f", "test_activation"),
 ("swiglu bwd forgets silu' (uses sigmoid)", "src/kernels/cpu/activation.cpp", "MapF(odg, n) = dy * b * s * (1.f + a * (1.f - s));", "MapF(odg, n) = dy * b * s;", "test_activation"),
 ("gelu tanh derivative drops sech2 term", "src/kernels/cpu/activation.cpp", "0.5f * x * p.sech2 * kSqrt2OverPi", "0.5f * x * 0.f * p.sech2 * kSqrt2OverPi", "test_activation"),
 ("mrope H/W axes swapped", "include/vlpar/kernels/rotary_math.hpp", "if (j % 3 == 1 && j < 3 * section[1]) return 1;", "if (j % 3 == 1 && j < 3 * section[1]) return 2;", "test_rotary"),
 ("vision rotary uses full head_dim for frequencies", "include/vlpar/kernels/rotary_math.hpp", "rope_inv_freq(d.theta, j - axis * q, d.head_dim / 2)", "rope_inv_freq(d.theta, j - axis * q, d.head_dim)", "test_rotary"),
 ("rotary backward rotates by +theta", "src/kernels/cpu/rotary.cpp", "rotary_cpu<T>(ctx, dx, dy, positions, desc, -1.f)", "rotary_cpu<T>(ctx, dx, dy, positions, desc, 1.f)", "test_rotary"),
 ("gemm ignores beta", "src/kernels/cpu/gemm.cpp", "if (g.beta == 0.f) C.setZero();", "if (g.beta == 0.f || g.beta == 1.f) C.setZero();", "test_gemm"),
 ("gemm drops one split block (off by one)", "src/kernels/cpu/gemm.cpp", "else gemm_block(g, 0, g.M, begin, end - begin);", "else gemm_block(g, 0, g.M, begin, end - begin - (begin > 0));", "test_gemm"),
 ("linear dbias overwritten, not accumulated", "src/kernels/cpu/gemm.cpp", "for (int64_t c = 0; c < out; ++c) db[c] += partial", "for (int64_t c = 0; c < out; ++c) db[c] = partial", "test_gemm"),
 ("embedding bwd assigns instead of accumulating", "src/kernels/cpu/embedding.cpp", "dst[i] = from_float<D>(to_float(dst[i]) + to_float(src[i]));", "dst[i] = from_float<D>(to_float(src[i]));", "test_losses"),
 ("cross-entropy mean over all rows, not valid rows", "src/kernels/cpu/cross_entropy.cpp", "return d.reduction == Reduction::kMean ? double(std::max<int64_t>(valid, 1)) : 1.0;", "return d.reduction == Reduction::kMean ? double(valid + 3) : 1.0;", "test_losses"),
 ("fused CE overwrites dW per chunk", "src/kernels/cpu/cross_entropy.cpp", "dweight.ptr<float>(), Hd, 1.f, 1.f});", "dweight.ptr<float>(), Hd, 1.f, 0.f});", "test_losses"),
 ("router ties go to the higher expert id", "src/kernels/cpu/router.cpp", "(p[a] == p[b] && a < b)", "(p[a] == p[b] && a > b)", "test_losses"),
 ("router bwd skips the renormalisation term", "src/kernels/cpu/router.cpp", "dp[size_t(idx[k])] = (dw[k] - dot) / S;", "dp[size_t(idx[k])] = dw[k] / S;", "test_losses"),
 ("aux backward uses counts/R^2 without E", "src/kernels/cpu/router.cpp", "float(double(grad_aux) * double(E) * (stats.counts", "float(double(grad_aux) * (stats.counts", "test_losses"),
 ("adamw without bias correction", "src/kernels/cpu/optimizer.cpp", "const float step_size = float(double(cfg.lr) / bc1)", "const float step_size = float(double(cfg.lr) / (bc1 > 2 ? bc1 : 1.0))", "test_optimizer"),
 ("grad norm forgets the last tensor", "src/kernels/cpu/optimizer.cpp", "  for (const TensorView& g : grads) {\n    if (g.empty()) continue;", "  for (const TensorView& g : grads.first(grads.size() - 1)) {\n    if (g.empty()) continue;", "test_optimizer"),
 ("bf16 rounding truncates", "include/vlpar/core/dtype.hpp", "return bf16{uint16_t((u + 0x7fffu + lsb) >> 16)};", "return bf16{uint16_t((u + 0x7fffu + lsb * 0u) >> 16)};", "test_core"),
 ("philox one round short", "include/vlpar/core/philox.hpp", "for (int round = 0; round < 10; ++round)", "for (int round = 0; round < 9; ++round)", "test_core"),
 ("init_shard ignores shard offsets", "src/core/init.cpp", "global += (local + offsets[d]) * full_strides", "global += (local) * full_strides", "test_core"),
 ("mesh: order string read backwards (pp fastest)", "src/parallel/mesh.cpp", "out[count++] = OrderSlot(slot);", "out[4 - count++] = OrderSlot(slot);", "test_mesh"),
 ("mesh: dp stride skips cp (wrong stride)", "src/parallel/mesh.cpp", "strides_[i] = world_;", "strides_[i] = i == 3 ? world_ / sizes_[1] : world_;", "test_mesh"),
 ("mesh: groups list their members in reverse rank order", "src/parallel/mesh.cpp", "= base + offset(i, in_sizes, in_strides);", "= base + offset(group_size - 1 - i, in_sizes, in_strides);", "test_mesh"),
 ("mesh: slot group index drops a scale", "src/parallel/mesh.cpp", "group_scale *= sizes_[i];", "group_scale *= 1;", "test_mesh"),
 ("mesh: expert layout uses tp instead of etp", "src/parallel/mesh.cpp", "return {c.etp_size(), 1, c.ep, c.edp_size(), c.pp};", "return {c.tp, 1, c.ep, c.edp_size(), c.pp};", "test_mesh"),
 ("mesh: expert layout puts ep in the cp slot", "src/parallel/mesh.cpp", "return {c.etp_size(), 1, c.ep, c.edp_size(), c.pp};", "return {c.etp_size(), c.ep, 1, c.edp_size(), c.pp};", "test_mesh"),
 ("mesh: edp off by one", "include/vlpar/parallel/parallel_config.hpp", "world / (etp_size() * ep * pp) : 0;", "world / (etp_size() * ep * pp) - (ep > 1) : 0;", "test_mesh"),
 ("mesh: vision layout ignores vision_tp", "src/parallel/mesh.cpp", "return {c.vision_tp_size(), 1, 1, c.vision_dp_size(), c.pp};", "return {c.tp, 1, 1, c.vision_dp_size(), c.pp};", "test_mesh"),
 ("mesh: dp_cp group forgets cp", "src/parallel/mesh.cpp", "case Axis::kDpCp:\n      set(OrderSlot::kDp);\n      set(OrderSlot::kCp);", "case Axis::kDpCp:\n      set(OrderSlot::kDp);", "test_mesh"),
 ("mesh: duplicate order axis accepted", "src/parallel/mesh.cpp", "VLPAR_CHECK(!seen[slot],", "VLPAR_CHECK(true || !seen[slot],", "test_mesh"),
 ("mesh: kv heads never replicated", "src/parallel/parallel_config.cpp", "d.num_kv_heads % tp == 0 || tp % d.num_kv_heads == 0", "d.num_kv_heads % tp == 0", "test_mesh"),
 ("mesh: world product forgets pp", "src/parallel/parallel_config.cpp", "VLPAR_CHECK(int64_t(tp) * cp * pp * dp == world,", "VLPAR_CHECK(int64_t(tp) * cp * dp == world,", "test_mesh"),
 ("mesh: folding check dropped", "src/parallel/parallel_config.cpp", "VLPAR_CHECK(stage % (int64_t(etp_size()) * ep) == 0,", "VLPAR_CHECK(true || stage % (int64_t(etp_size()) * ep) == 0,", "test_mesh"),
 ("mesh: vision stage check dropped", "src/parallel/parallel_config.cpp", "VLPAR_CHECK(stage % vision_tp_size() == 0,", "VLPAR_CHECK(true || stage % vision_tp_size() == 0,", "test_mesh"),
 ("mesh: pipeline agreement not checked", "src/parallel/parallel_config.cpp", "return detail::check_layouts_agree(*this, slots);", "(void)slots;\n  return Status::Ok();", "test_mesh"),
 ("mesh: process groups swap color and key", "src/parallel/process_groups.cpp", "world.split(s.group, s.index,", "world.split(s.index, s.group,", "test_mesh"),
 ("nn: column-parallel input grad not all-reduced", "src/nn/tensor_parallel.cpp", "return comm::CopyToRegion::backward(*tp.comm, din, dfull);", "return copy_(din, dfull);", "test_tp_equivalence:np2 test_tp_dp:np4"),
 ("nn: SP reduce-scatter replaced by all-reduce (first token block kept)", "src/nn/tensor_parallel.cpp", "if (tp.sp()) return comm::ReduceScatterToSequence::forward(*tp.comm, out, partial);", "if (tp.sp()) { VLPAR_RETURN_IF_ERROR(tp.comm->all_reduce(partial, comm::ReduceOp::kSum)); return copy_(out, partial.slice(0, 0, out.size(0))); }", "test_tp_equivalence:np2 test_tp_dp:np4"),
 ("nn: o_proj shard offset in heads, not head_dim columns", "src/nn/decoder.cpp", "{heads.begin * D, heads.end * D}, id(), w));\n    out.push_back(make_replicated_param(p + \"post", "{heads.begin, heads.begin + heads.size() * D}, id(), w));\n    out.push_back(make_replicated_param(p + \"post", "test_nn_shard test_tp_equivalence:np2"),
 ("nn: fused gate/up shard takes up rows from block 0", "src/nn/shard.cpp", "ShardPiece{block.size(), intermediate + block.begin, block.size()}", "ShardPiece{block.size(), intermediate, block.size()}", "test_nn_shard test_tp_equivalence:np2"),
 ("nn: replicated kv head is rank % H_kv", "include/vlpar/nn/shard.hpp", "const int64_t h = int64_t(rank) * kv_heads / tp;", "const int64_t h = rank % kv_heads;", "test_nn_shard test_tp_equivalence:np4"),
 ("nn: vocab-parallel CE without the max all-reduce", "src/nn/vocab_parallel.cpp", "if (tp.active()) VLPAR_RETURN_IF_ERROR(tp.comm->all_reduce(row_max, comm::ReduceOp::kMax));", "", "test_tp_equivalence:np2"),
 ("nn: vocab-parallel embedding ignores the block offset", "src/nn/vocab_parallel.cpp", "embedding_forward(ctx, partial, table, ids, vocab_block(block, vocab))", "embedding_forward(ctx, partial, table, ids, VocabBlock{0, vocab})", "test_tp_equivalence:np2"),
 ("nn: replicated kv-head weight grads not summed over tp", "src/nn/attention_block.cpp", "VLPAR_RETURN_IF_ERROR(tp_sum_partial_grad(tp_, full));", "", "test_tp_equivalence:np4"),
 ("nn: SP norm-weight grad not summed over tp", "src/nn/nn_util.hpp", "rmsnorm_backward_tp(ctx, tp, dx, dnorm_w, dhn, x, norm_w, rstd, tp.sp())", "rmsnorm_backward_tp(ctx, tp, dx, dnorm_w, dhn, x, norm_w, rstd, false)", "test_tp_equivalence:np2 test_tp_dp:np4"),
 ("nn: attention reports q grad ready before computing it", "src/nn/attention_block.cpp", "VLPAR_RETURN_IF_ERROR(detail::weight_grad(ctx, g_.q, dq2, st.h));\n  VLPAR_RETURN_IF_ERROR(mark(1, g_.q));", "VLPAR_RETURN_IF_ERROR(mark(1, g_.q));\n  VLPAR_RETURN_IF_ERROR(detail::weight_grad(ctx, g_.q, dq2, st.h));", "test_nn_stack test_data_parallel:np2"),
 ("dp: GradBuckets sums without averaging", "src/parallel/grad_buckets.cpp", "const float scale = cfg_.average ? 1.0f / float(dp_->size()) : 1.0f;", "const float scale = 1.0f;", "test_data_parallel:np2 test_tp_dp:np4 test_distributed_optimizer:np2"),
 ("zero: segments ignore their offset inside the parameter", "src/parallel/distributed_optimizer.cpp", "s.segments.push_back({i, a - offset, a - lo, e - a});", "s.segments.push_back({i, 0, a - lo, e - a});", "test_distributed_optimizer:np2 test_data_parallel:np2"),
 ("zero: norm not summed over dp", "src/parallel/distributed_optimizer.cpp", "if (cfg_.zero1 && grp.comms.replicas->size() > 1)\n", "if (false)\n", "test_distributed_optimizer:np2"),
 ("optimizer: weight decay on every parameter", "src/parallel/distributed_optimizer.cpp", "if (!params_[param].weight_decay) c.weight_decay = 0.f;", "(void)param;", "test_distributed_optimizer:np2"),
 ("optimizer: replicated mode never clips", "src/parallel/distributed_optimizer.cpp", "if (clip != 1.0f) VLPAR_RETURN_IF_ERROR(scale_(ctx, p.grad, clip));", "(void)clip;", "test_distributed_optimizer:np2"),
 ("zero: loaded state keeps the old master weights", "src/parallel/distributed_optimizer.cpp", "  }\n  return read_master_from_params();\n}", "  }\n  return Status::Ok();\n}", "mpi_trainer_zero:np2"),
 ("optim params: norm weight = copies, not 1/copies", "src/parallel/optim_params.cpp", "p.norm_weight = 1.0 / holders;", "p.norm_weight = holders;", "test_distributed_optimizer:np2"),
 ("kv cache attention: a new token does not see itself", "src/kernels/cpu/kv_cache_attention.cpp", "len = past + i + 1;", "len = past + i + (i == 0);", "test_kv_cache_attention"),
 ("layer stack: full recompute reruns the layer on the next layer's input", "include/vlpar/nn/layer.hpp", "return layers_[i].recompute(ctx, st.inputs[i], seq, st.layer[i], recompute_);", "return layers_[i].recompute(ctx, st.inputs[i + 1], seq, st.layer[i], recompute_);", "test_layer_stack"),
 ("decoder layer: stash bytes forget the attention output", "src/nn/decoder_layer.cpp", "int64_t bytes = 4 * Nl * H;", "int64_t bytes = 0;", "test_layer_stack"),
 ("moe: frozen weights reported ready", "src/nn/moe_block.cpp", "return ready && !grads_by_offset[k].empty() ? ready(first_param_ + k) : Status::Ok();", "(void)grads_by_offset;\n    return ready ? ready(first_param_ + k) : Status::Ok();", "test_freeze"),
 ("placement: partial -> replicate does not reduce", "include/vlpar/parallel/placement.hpp", "    return comm::ReduceFromRegion::forward(c, out, in);", "    return out.data == in.data ? Status::Ok() : copy_(out, in);", "test_placement:np4"),
 ("placement: every rank takes the first block", "include/vlpar/parallel/placement.hpp", "r = {r.begin + i * len, r.begin + (i + 1) * len};", "r = {r.begin, r.begin + len};", "test_placement:np4"),
 ("cpu isa: a request for a lower path is ignored", "src/kernels/cpu_isa.cpp", "  return {want.value(), Status::Ok()};", "  return {best, Status::Ok()};", "test_cpu_isa"),
 ("cpu isa: avx512 chosen without AVX-512 support", "src/kernels/cpu_isa.cpp", "if (int(c) <= int(supported) && int(c) > int(best)) best = c;", "if (int(c) > int(best)) best = c;", "test_cpu_isa"),
 ("trainer: every micro-batch's backward reports ready", "examples/qwen3vl/trainer.cpp", "if (i + 1 == micro.size()) {\n        ready =", "{\n        ready =", "mpi_trainer_zero:np2"),
 ("comm: every reduction uses MPI_MAX", "src/comm/mpi_communicator.cpp", "MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }", "MPI_Op mpi_op(ReduceOp) { return MPI_MAX; }", "test_collectives:np2 test_conjugate:np2"),
 ("comm: bf16 all_reduce result truncated instead of rounded", "src/comm/mpi_communicator.cpp", "for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);", "for (int64_t i = 0; i < n; ++i) d[i] = bf16{uint16_t(float_bits(src[i]) >> 16)};", "test_collectives:np4"),
 ("comm: 16-bit all_reduce result never written back", "src/comm/mpi_communicator.cpp", "w->set_on_complete([inout, &stage] { narrow(inout, stage.data()); });", "", "test_collectives:np2 test_conjugate:np2"),
 ("comm: all_to_all send displacement off by one row", "src/comm/mpi_communicator.cpp", "b.send_displs[p] = sd;", "b.send_displs[p] = sd > 0 ? sd - 1 : 0;", "test_collectives:np4 test_conjugate:np2"),
 ("comm: in-place reduce_scatter result left at block 0", "src/comm/mpi_communicator.cpp", "if (rank_ != 0) w->set_on_complete", "if (false) w->set_on_complete", "test_collectives:np2 test_conjugate:np2"),
 ("comm: broadcast always from rank 0", "src/comm/mpi_communicator.cpp", "wire_type(inout.dtype), root, comm_", "wire_type(inout.dtype), 0, comm_", "test_collectives:np2"),
 ("comm: split swaps color and key", "src/comm/mpi_communicator.cpp", "MPI_Comm_split(comm_, color, key, &sub)", "MPI_Comm_split(comm_, key, color, &sub)", "test_collectives:np4"),
 ("comm: watchdog never times out", "src/comm/mpi_communicator.cpp", "if (Clock::now() >= deadline) return on_timeout();", "if (false && Clock::now() >= deadline) return on_timeout();", "test_watchdog:np2"),
 ("comm: timeout message lists itself as a peer", "src/comm/mpi_communicator.cpp", "      if (r == rank) continue;\n      g.push_back(r);", "      g.push_back(r);", "test_watchdog:np2"),
 ("comm: group stays usable after a collective timeout", "src/comm/mpi_communicator.cpp", "if (group_->broken_by.empty()) group_->broken_by = site;", "", "test_watchdog:np2"),
 ("comm: all_gather in-place offset in elements, not bytes", "src/comm/comm_checks.cpp", "size_t(c.rank()) * in.nbytes();", "size_t(c.rank()) * size_t(in.numel());", "test_collectives:np2 test_conjugate:np2"),
 ("comm: all_to_all accepts send_rows summing below the rows", "src/comm/comm_checks.cpp", "VLPAR_CHECK(send_total == in.size(0),", "VLPAR_CHECK(send_total <= in.size(0),", "test_collectives:np2"),
 ("comm: copy_to_region backward forgets the all-reduce", "src/comm/conjugate.cpp", "  VLPAR_RETURN_IF_ERROR(copy_flat(grad_in, grad_out));\n  return c.all_reduce(grad_in, ReduceOp::kSum);", "  return copy_flat(grad_in, grad_out);", "test_conjugate:np2"),
 ("comm: last-dim gather interleaves rank-major wrongly", "src/comm/conjugate.cpp", "stage.data() + size_t((p * rows + r) * w) * es", "stage.data() + size_t((r * n + p) * w) * es", "test_conjugate:np2"),
 ("comm: scatter_to_region keeps chunk 0", "src/comm/conjugate.cpp", "  split_last_dim(out, in, c.rank());\n  return Status::Ok();\n}\nStatus ScatterToRegion::backward", "  split_last_dim(out, in, 0);\n  return Status::Ok();\n}\nStatus ScatterToRegion::backward", "test_conjugate:np2"),
 ("comm: gather_from_sequence backward reduces with max", "src/comm/conjugate.cpp", "return c.reduce_scatter(grad_in, grad_out, ReduceOp::kSum);\n}\n\nStatus ReduceScatterToSequence", "return c.reduce_scatter(grad_in, grad_out, ReduceOp::kMax);\n}\n\nStatus ReduceScatterToSequence", "test_conjugate:np2"),
 ("comm: all_to_all backward does not swap counts", "src/comm/conjugate.cpp", "return c.all_to_all(grad_in, counts.send_rows, grad_out, counts.recv_rows);", "return c.all_to_all(grad_in, counts.recv_rows, grad_out, counts.send_rows);", "test_conjugate:np2"),
 ("comm: single-process all_to_all does not copy", "src/comm/single_communicator.cpp", "  VLPAR_RETURN_IF_ERROR(copy_flat(out, in));\n  return done();\n}\n\nResult<WorkHandle> SingleCommunicator::isend", "  return done();\n}\n\nResult<WorkHandle> SingleCommunicator::isend", "test_single_communicator"),
 ("decoder layer recompute adds to the router statistics again", "src/nn/decoder_layer.cpp", "return feed_forward(ctx, scratch, seq, st, nullptr);", "return feed_forward(ctx, scratch, seq, st, moe_loss_.stats);", "test_layer_stack"),
 ("MoE stash bytes forget the dispatch plan's row maps", "src/nn/decoder_layer.cpp", "bytes += 8 * (E + 1) + 4 * 2 * R;", "bytes += 8 * (E + 1);", "test_layer_stack"),
 ("selective recompute keeps the MoE stash", "src/nn/decoder_layer.cpp", "  st.moe = MoeStash{};\n  if (mode", "  if (mode", "test_layer_stack"),
 ("batch: host cu_seqlens copy never compared", "src/core/batch.cpp", "index_at(cu_seqlens, i) == c,", "true,", "test_batch"),
 ("sample_of_pack skips one image too few", "src/data/packing.cpp", "const int64_t row = sum_patches({grids.data(), size_t(first)});", "const int64_t row = sum_patches({grids.data(), size_t(first > 0 ? first - 1 : 0)});", "test_batch"),
 ("qwen3vl: first deepstack level never added", "examples/qwen3vl/model.cpp", "    if (k < stash.deepstack.size())\n      VLPAR_RETURN_IF_ERROR(vlpar::scatter_add_rows(", "    if (k > 0 && k < stash.deepstack.size())\n      VLPAR_RETURN_IF_ERROR(vlpar::scatter_add_rows(", "test_parity"),
 ("models take the labels unshifted", "src/nn/block.cpp", "VLPAR_RETURN_IF_ERROR(shift_labels_for_causal_lm(t.labels, batch.labels, t.cu_seqlens, ignore_index));", "VLPAR_RETURN_IF_ERROR(copy_(t.labels, batch.labels));", "test_nn_stack test_parity"),
 ("cli: out-of-range integers accepted", "src/core/cli.cpp", "if (text.empty() || ec != std::errc() || q != text.data() + text.size()) return false;", "if (text.empty() || q != text.data() + text.size()) return false;", "test_cli"),
 ("cli: a bare flag sets false", "src/core/cli.cpp", "text = \"true\";  // a bare flag", "text = \"false\";  // a bare flag", "test_cli"),
 ("train config: token_budget bound to the patch budget", "examples/qwen3vl/train_config.cpp", "{\"data\", \"token_budget\", &c.data.loader.packing.max_tokens},", "{\"data\", \"token_budget\", &c.data.loader.packing.max_patches},", "test_train_config"),
 ("train config: bucket size not derived", "examples/qwen3vl/train_config.cpp", "  optimizer.bucket_bytes = bucket_bytes_of(parallel.bucket_mb);", "", "test_train_config"),
 ("lr schedule: cosine floor dropped", "include/vlpar/parallel/lr_schedule.hpp", "return lr * (r + (1.0 - r) * 0.5 *", "return lr * ((1.0 - r) * 0.5 *", "test_lr_schedule"),
 ("ops: swiglu_forward sends CUDA views to the CPU path", "src/kernels/ops/activation.cpp", "  if (gate.device.is_cuda()) return cuda_impl::swiglu_forward(ctx, y, gate, up);\n", "", "test_cuda_kernels"),
 ("ops: rotary checks no longer reject a bad head dim", "src/kernels/ops/rotary.cpp", "VLPAR_CHECK(x.size(2) == d.head_dim,", "VLPAR_CHECK(true ||x.size(2) == d.head_dim,", "test_rotary"),
 ("vision layer: ready skips the last parameter", "src/nn/vision_layer.cpp", "for (size_t i = kNumParams; i-- > 0;)", "for (size_t i = kNumParams - 1; i-- > 0;)", "test_vision_encoder"),
 ("vision layer: stash bytes forget the qkv output", "src/nn/vision_layer.cpp", "4 * N * Hv + 3 * N * Hv", "4 * N * Hv", "test_vision_encoder"),
 ("vision encoder: deepstack reads a segment's input, not its output", "src/nn/vision_encoder.cpp", "if (cfg_.deepstack_indexes[j] != cuts[k].second - 1) continue;", "if (cfg_.deepstack_indexes[j] != cuts[k].first) continue;", "test_vision_encoder"),
 ("layer stack: backward ignores stop", "include/vlpar/nn/layer.hpp", "for (size_t i = n; i-- > stop;)", "for (size_t i = n; i-- > 0;)", "test_vision_encoder"),
 ("ops: embedding ids not checked against the vocabulary", "src/kernels/ops/embedding.cpp", "VLPAR_CHECK(id >= 0 && id < vocab,", "VLPAR_CHECK(true || (id >= 0 && id < vocab),", "test_losses test_nn_stack"),
 ("ops: shift_labels accepts decreasing cu_seqlens", "src/kernels/ops/cross_entropy.cpp", "VLPAR_CHECK(cu[b + 1] >= cu[b],", "VLPAR_CHECK(true || cu[b + 1] >= cu[b],", "test_losses"),
 ("ops: moe plan accepts an expert chosen twice", "src/kernels/ops/moe.cpp", "VLPAR_CHECK(idx[t * K + j] != e,", "VLPAR_CHECK(true || idx[t * K + j] != e,", "test_moe"),
 ("embedding: a vocab block reads its row at the global id", "include/vlpar/kernels/vocab_block.hpp", "? id - begin : -1;", "? id : -1;", "test_losses"),
 ("embedding bwd ignores the skip mask", "src/kernels/cpu/embedding.cpp", "if (local < 0 || id == padding_idx || (!skip.empty() && index_at(skip, n) != 0)) continue;", "if (local < 0 || id == padding_idx || (!skip.empty() && index_at(skip, n) > 1)) continue;", "test_losses test_nn_stack"),
 ("vocab shard: every block reports a target logit", "src/kernels/cpu/cross_entropy.cpp", "target[n] = y >= 0 ? to_float(z[y]) : 0.f;", "target[n] = to_float(z[y >= 0 ? y : 0]);", "test_losses test_tp_equivalence:np2"),
 ("ce backward: the one-hot ignores the vocab block", "src/kernels/cpu/cross_entropy.cpp", "const int64_t y = desc.block.local(label, V);", "const int64_t y = label < V ? label : -1;", "test_losses test_tp_equivalence:np2"),
 ("add_: overwrites instead of accumulating", "src/kernels/cpu/elementwise.cpp", "d[i] = from_float<D>(to_float(d[i]) + to_float(s[i]));", "d[i] = from_float<D>(to_float(s[i]));", "test_activation test_nn_stack"),
 ("rmsnorm_weight_grad drops the last chunk", "src/kernels/cpu/norm.cpp", "for (int64_t c = 0; c < chunks; ++c) s += partial[size_t(c * H + i)];", "for (int64_t c = 0; c + 1 < chunks; ++c) s += partial[size_t(c * H + i)];", "test_norm test_moe"),
 ("vision flops ignore the host segments", "src/nn/vision_layer.cpp", "const double len = double(cu[s + 1] - cu[s]);", "const double len = 0.0;", "test_vision_encoder"),
 ("index rows: scatter_add overwrites", "src/kernels/cpu/index_rows.cpp", "b[j] = from_float<B>(to_float(b[j]) + to_float(s[j]));", "b[j] = from_float<B>(to_float(s[j]));", "test_index_rows test_parity"),
 ("index rows: scatters accept a repeated row", "src/kernels/ops/index_rows.cpp", "VLPAR_CHECK(!seen[size_t(r)],", "VLPAR_CHECK(true || !seen[size_t(r)],", "test_index_rows"),
 ("qwen3vl: deepstack rows of the video pass go to the image positions", "examples/qwen3vl/model.cpp", "pass.visual_index.push_back(int64_t(stash.visual_rows.size()));", "pass.visual_index.push_back(int64_t(pass.visual_index.size()));", "test_parity"),
 ("optimizer: expert Σg² not summed over the expert pieces", "src/parallel/distributed_optimizer.cpp", "if (c != nullptr && c->size() > 1) VLPAR_RETURN_IF_ERROR(c->all_reduce(sq, comm::ReduceOp::kSum));", "if (c != nullptr && c->size() > 1 && grp.kind == nn::ReplicaGroup::kDense) VLPAR_RETURN_IF_ERROR(c->all_reduce(sq, comm::ReduceOp::kSum));", "test_distributed_optimizer:np4"),
 ("optimizer: every group's buckets over the dense replicas", "src/parallel/distributed_optimizer.cpp", "GradBuckets::create(*rep, std::move(grads), bc, alloc)", "GradBuckets::create(*groups.by_group[0].replicas, std::move(grads), bc, alloc)", "test_distributed_optimizer:np4"),
 ("optim params: norm weight ignores the group's norm ranks", "src/parallel/optim_params.cpp", "const int pieces = groups[s.replica].norm_ranks();", "const int pieces = groups[s.replica].norm_ranks() > 0 ? 1 : 0;", "test_distributed_optimizer:np2"),
 ("placements: a shard lands on the replica axis", "include/vlpar/parallel/placement.hpp", "if (s.shard_dim >= 0) p.on(piece_axes(s.replica).front(), Shard{s.shard_dim});", "if (s.shard_dim >= 0) p.on(replica_axis(s.replica), Shard{s.shard_dim});", "test_nn_shard"),
 ("placements: experts reduce over dp", "include/vlpar/parallel/placement.hpp", "return g == nn::ReplicaGroup::kExpert ? Axis::kEdp :", "return g == nn::ReplicaGroup::kExpert ? Axis::kDpCp :", "test_nn_shard"),
 ("grids: t·h·w multiplied without an overflow check", "src/core/batch.cpp", "const std::optional<int64_t> thw = hw ? checked_mul(g.t, *hw) : std::nullopt;", "const std::optional<int64_t> thw = hw ? std::optional<int64_t>(int64_t(uint64_t(g.t) * uint64_t(*hw))) : std::nullopt;", "test_batch test_mrope_positions test_pos_embed"),
 ("grids: the sum of patches is not bounded", "src/core/batch.cpp", "VLPAR_CHECK(sum && *sum <= kMaxGridPatches,", "VLPAR_CHECK(sum.has_value(),", "test_pos_embed"),
 ("embedding bwd: padding_idx ignored", "src/kernels/cpu/embedding.cpp", "if (local < 0 || id == padding_idx || (!skip.empty() && index_at(skip, n) != 0)) continue;", "if (local < 0 || (id == padding_idx && false) || (!skip.empty() && index_at(skip, n) != 0)) continue;", "test_losses test_freeze"),
 ("qwen3vl: pad_token_id not passed to the embedding backward", "examples/qwen3vl/model.cpp", "vocab_block_, TensorView{}, cfg_.text.pad_token_id));", "vocab_block_, TensorView{}, -1));", "test_freeze"),
 ("emu: block sum without the barrier before reusing its buffer", "src/kernels/cuda/reduce.cuh", "  __syncthreads();  // red may be reused by the next call\n", "", "test_cuda_kernels"),
 ("emu: 16-byte vector store writes 8 bytes", "src/kernels/cuda/vector_io.cuh", "  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);", "  *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);", "test_cuda_kernels"),
 ("emu tile: ldmatrix without .trans for an N-major B", "tests/emu/warp_matrix_kernels.cu", "ptx::ldmatrix<2, true>(bfr, bs + (l % 16) * 8);", "ptx::ldmatrix<2, false>(bfr, bs + (l % 16) * 8);", "test_cuda_warp_matrix"),
 ("emu tile: A row index off by one", "tests/emu/warp_matrix_kernels.cu", "ptx::ldmatrix<4, false>(af, as + (l % 16) * 16 + (l / 16) * 8 + misalign);", "ptx::ldmatrix<4, false>(af, as + ((l + 1) % 16) * 16 + (l / 16) * 8 + misalign);", "test_cuda_warp_matrix"),
 ("emu tile: no cp.async wait", "tests/emu/warp_matrix_kernels.cu", "  if (fault != int(TileFault::kNoWait)) ptx::cp_async_wait<0>();", "", "test_emu_warp_matrix test_cuda_warp_matrix"),
 ("emu tile: no barrier after the copies", "tests/emu/warp_matrix_kernels.cu", "  if (fault != int(TileFault::kNoBarrier) && fault != int(TileFault::kNoWait)) __syncthreads();", "", "test_emu_warp_matrix test_cuda_warp_matrix"),
 ("emu tile: mma A registers in the wrong order", "tests/emu/warp_matrix_kernels.cu", "    ptx::mma_m16n8k16_bf16(df, af, bfr, cf);", "    const uint32_t swapped[4] = {af[2], af[3], af[0], af[1]};\n    ptx::mma_m16n8k16_bf16(df, swapped, bfr, cf);", "test_cuda_warp_matrix"),
 ("emu shadow: accesses always ordered (races unseen)", "src/kernels/cuda/emu/shared_memory.cpp", "  return prev_tid == a.tid || a.vc[prev_tid / 32] > prev_stamp || (prev_tid / 32 == a.warp && a.clock > prev_clock);", "  return a.tid < 100000 || prev_tid == a.tid || a.vc[prev_tid / 32] > prev_stamp || (prev_tid / 32 == a.warp && a.clock > prev_clock);", "test_emu_runtime"),
 ("emu shadow: uninitialised reads allowed", "src/kernels/cuda/emu/shared_memory.cpp", "  if (!(s.state & kWritten) && !write) {", "  if (off > (size_t(1) << 40) && !(s.state & kWritten) && !write) {", "test_emu_runtime"),
 ("emu layout: ldmatrix .trans coordinates not transposed", "src/kernels/cuda/emu/fragment_layout.hpp", "  return trans ? RowCol{2 * (lane & 3) + h, lane >> 2} : RowCol{lane >> 2, 2 * (lane & 3) + h};", "  return trans ? RowCol{lane >> 2, 2 * (lane & 3) + h} : RowCol{lane >> 2, 2 * (lane & 3) + h};", "test_emu_fragment_layouts test_cuda_warp_matrix"),
 ("emu layout: mma B elements in the wrong order", "src/kernels/cuda/emu/fragment_layout.hpp", "constexpr RowCol mma_b_coord(int lane, int i) { return {2 * (lane & 3) + (i & 1) + 8 * (i >> 1), lane >> 2}; }", "constexpr RowCol mma_b_coord(int lane, int i) { return {2 * (lane & 3) + (i >> 1) + 8 * (i & 1), lane >> 2}; }", "test_emu_fragment_layouts test_cuda_warp_matrix"),
 ("emu cp.async: destination not marked pending", "src/kernels/cuda/emu/shared_memory.cpp", "  for (size_t i = 0; i < n; ++i) shadow_[base_off + (p + i - base)].state |= kPending;", "  for (size_t i = 0; i < n; ++i) shadow_[base_off + (p + i - base)].state |= 0;", "test_emu_warp_matrix test_cuda_warp_matrix"),
 ("emu global: accesses 4 bytes past the end allowed", "src/kernels/cuda/emu/device_memory.cpp", "  if (addr + n > base + bytes)", "  if (addr + n > base + bytes + 4)", "test_emu_runtime"),
 ("emu shuffle: xor reads lanes of later segments", "src/kernels/cuda/emu/runtime.cpp", "      return (j < 0 || j > seg + width - 1) ? lane : j;", "      return (j < 0 || j > 31) ? lane : j;", "test_emu_runtime"),
 ("emu barrier: different call sites accepted", "src/kernels/cuda/emu/runtime.cpp", "  } else if (b.launch->opt.strict && (!same_site(bar.site, loc) || bar.reduce != reduce)) {", "  } else if (b.launch->opt.strict && bar.reduce != reduce) {", "test_emu_runtime"),
 ("emu atomics: atomicInc never wraps", "src/kernels/cuda/emu/atomics.cpp", "      case AtomicOp::kInc: return old >= v ? T(0) : T(old + 1);", "      case AtomicOp::kInc: return T(old + 1);", "test_emu_runtime"),
 ("emu atomics: atomicCAS stores unconditionally", "src/kernels/cuda/emu/atomics.cpp", "    case AtomicOp::kCas: return old == cmp ? v : old;", "    case AtomicOp::kCas: return old == cmp ? v : v;", "test_emu_runtime"),
 ("emu match: 64-bit values compared on their low word", "src/kernels/cuda/emu/runtime.cpp", "  const bool wide = c.variant == 8;", "  const bool wide = c.variant == 9;", "test_emu_runtime"),
 ("emu clocks: a barrier merges without advancing the warps' own clocks", "src/kernels/cuda/emu/runtime.cpp", "    ++w.vc[__builtin_ctz(m)];\n", "", "test_emu_runtime test_emu_warp_matrix test_cuda_kernels"),
 ("emu named barrier: completes without ordering its warps", "src/kernels/cuda/emu/runtime.cpp", "    merge_clocks(b, nb.warps);\n", "", "test_emu_warp_matrix test_cuda_warp_matrix"),
 ("emu named barrier: releases at half the count", "src/kernels/cuda/emu/runtime.cpp", "  if (nb.arrived == nb.expected) {  // the last arrival", "  if (nb.arrived * 2 >= nb.expected) {  // the last arrival", "test_emu_warp_matrix test_cuda_warp_matrix"),
 ("emu stack overflow: not recognised", "src/kernels/cuda/emu/launch.cpp", "const bool overflow = (sp != 0 && sp < t.stack_lo + 256) || (fault < t.stack_lo && fault + 8192 >= t.stack_lo);", "const bool overflow = sp == 1 && fault == 1;", "test_emu_runtime"),
 ("flash: K-by-N operands (V, dO, Q, K) read without .trans", "src/kernels/cuda/mma_tiles.cuh", "ptx::ldmatrix<4, true>(b, tile", "ptx::ldmatrix<4, false>(b, tile", "test_cuda_attention"),
 ("flash fwd: O not rescaled by the new max", "src/kernels/cuda/flash_fwd_kernel.cuh", "        o[s][ot][2 * h] *= alpha;\n        o[s][ot][2 * h + 1] *= alpha;\n", "        o[s][ot][2 * h] *= 1.f;\n        o[s][ot][2 * h + 1] *= 1.f;\n", "test_cuda_attention"),
 ("flash: causal diagonal off by one (forward and backward)", "src/kernels/cuda/flash_common.cuh", "(!p.causal || c <= r + s.seqlen_k - s.seqlen_q)", "(!p.causal || c <= r + 1 + s.seqlen_k - s.seqlen_q)", "test_cuda_attention"),
 ("flash: rows past the sequence not zero-filled", "src/kernels/cuda/mma_tiles.cuh", "const bool ok = r < valid_rows && c * 8 < head_dim;", "const bool ok = (r < valid_rows || r >= 0) && c * 8 < head_dim;", "test_cuda_attention"),
 ("flash fwd: GQA maps query heads to the wrong kv head", "src/kernels/cuda/flash_fwd_kernel.cuh", "h_kv = h / (p.num_heads / p.num_kv_heads);", "h_kv = h % p.num_kv_heads;", "test_cuda_attention"),
 ("flash fwd: no barrier before P.V reads V", "src/kernels/cuda/flash_fwd_kernel.cuh", "    __syncthreads();  // V[n] landed; every warp is done reading K[n]\n", "", "test_cuda_attention"),
 ("flash fwd: lse in log2 units", "src/kernels/cuda/flash_fwd_kernel.cuh", "m[s][hr] * 0.69314718055994531f + logf(sum)", "m[s][hr] + logf(sum)", "test_cuda_attention"),
 ("flash fwd: row sum reduced over 2 lanes, not 4", "src/kernels/cuda/flash_fwd_kernel.cuh", "      sum += __shfl_xor_sync(0xffffffffu, sum, 2);\n", "", "test_cuda_attention"),
 ("flash fwd op: head_dim % 8 not checked first", "src/kernels/cuda/attention_ops.cu", "  VLPAR_CHECK_CODE(desc.head_dim % 8 == 0,", "  VLPAR_CHECK_CODE(desc.head_dim % 4 == 0,", "test_cuda_attention"),
 ("flash bwd: dS without the delta term", "src/kernels/cuda/flash_bwd_kernel.cuh", "dpt[nt][i] = pt * (dpt[nt][i] - sdelta[qi]);", "dpt[nt][i] = pt * dpt[nt][i];", "test_cuda_attention"),
 ("flash bwd: dK not scaled", "src/kernels/cuda/flash_bwd_kernel.cuh", "flash_store_rows<T, kD>(dkp, p.dk_tok_stride, dk, f.scale,", "flash_store_rows<T, kD>(dkp, p.dk_tok_stride, dk, 1.f,", "test_cuda_attention"),
 ("flash bwd: dK/dV summed over one head of the GQA group", "src/kernels/cuda/flash_bwd_kernel.cuh", "for (int h = h_kv * group; h < (h_kv + 1) * group; ++h)", "for (int h = h_kv * group; h < h_kv * group + 1; ++h)", "test_cuda_attention"),
 ("flash bwd: causal dK/dV skip the first query block", "src/kernels/cuda/flash_bwd_kernel.cuh", "const int m_begin = (first_row > 0 ? first_row : 0) / Tile::kBlockM;", "const int m_begin = (first_row > 0 ? first_row : 0) / Tile::kBlockM + 1;", "test_cuda_attention"),
 ("flash bwd: delta reduced over half the warp", "src/kernels/cuda/flash_bwd_kernel.cuh", "for (int off = 16; off > 0; off /= 2)", "for (int off = 8; off > 0; off /= 2)", "test_cuda_attention"),
 ("flash bwd: dQ reloads K, V while warps still read them", "src/kernels/cuda/flash_bwd_kernel.cuh", "    __syncthreads();  // every warp is done with the previous K, V\n", "", "test_cuda_attention"),
 ("attention cpu: causal diagonal not shifted by S_k - S_q", "src/kernels/cpu/attention.cpp", "int64_t off() const { return k_len - q_len; }", "int64_t off() const { return 0; }", "test_attention test_cuda_attention"),
 ("attention cpu: rows without keys divided by l = 0", "src/kernels/cpu/attention.cpp", "    if (l(r) > 0.f) {", "    if (l(r) >= 0.f) {", "test_attention test_cuda_attention"),
 ("attention reference: causal ignores S_k - S_q", "include/vlpar/reference/attention.hpp", "return causal ? std::min(len_k, i + 1 + len_k - len_q) : len_k;", "return causal ? std::min(len_k, i + 1 + (len_k - len_q) * 0) : len_k;", "test_attention test_cuda_attention"),
 ("grouped gemm: second n8 tile multiplied by the first's B", "src/kernels/cuda/grouped_gemm_kernel.cuh", "mma16816<T>(acc[mi][2 * nj + 1], af[mi], b[2], b[3]);", "mma16816<T>(acc[mi][2 * nj + 1], af[mi], b[0], b[1]);", "test_cuda_grouped_gemm"),
 ("grouped gemm: beta ignored", "src/kernels/cuda/grouped_gemm_kernel.cuh", "if (beta != 0.f) x0 += beta * dst->x, x1 += beta * dst->y;", "if (beta != 0.f) x0 += 0.f * dst->x, x1 += 0.f * dst->y;", "test_cuda_grouped_gemm"),
 ("grouped gemm: rows past the group stored", "src/kernels/cuda/grouped_gemm_kernel.cuh", "      if (r >= rows) continue;", "      if (r >= rows * 0 + 128) continue;", "test_cuda_grouped_gemm"),
 ("grouped gemm: no wait for the k-step's copies", "src/kernels/cuda/grouped_gemm_kernel.cuh", "      ptx::cp_async_wait<1>();  // k-step kt landed; kt + 1 may still be in flight\n", "", "test_cuda_grouped_gemm"),
 ("grouped gemm: tiles mapped to the group before", "src/kernels/cuda/grouped_gemm_kernel.cuh", "    if (tile_offsets[mid] <= tile) lo = mid;", "    if (tile_offsets[mid] < tile) lo = mid;", "test_cuda_grouped_gemm"),
    ("grouped wgrad: aᵀ fragment matrices 1 and 2 swapped", "src/kernels/cuda/mma_tiles.cuh", "swizzled_offset<kPitch>(k0 + (lane / 16) * 8 + lane % 8, m0 + ((lane / 8) % 2) * 8)", "swizzled_offset<kPitch>(k0 + ((lane / 8) % 2) * 8 + lane % 8, m0 + (lane / 16) * 8)", "test_cuda_grouped_gemm"),
    ("grouped wgrad: dw overwritten, not accumulated", "src/kernels/cuda/grouped_gemm_kernel.cuh", "p.beta, acc, wm, wn, lane);\n  }\n}\n\n}  // namespace", "p.beta * 0.f, acc, wm, wn, lane);\n  }\n}\n\n}  // namespace", "test_cuda_grouped_gemm"),
    ("grouped wgrad: rows past the group summed", "src/kernels/cuda/grouped_gemm_kernel.cuh", "const int valid = int(w.rows - k0 < Tile::kK ? w.rows - k0 : Tile::kK);", "const int valid = int(w.rows * 0) + Tile::kK;", "test_cuda_grouped_gemm"),
    ("dense gemm on CUDA: every batch entry reads A's first matrix", "src/kernels/cuda/moe_ops.cu", "const auto* ai = static_cast<const char*>(a.data) + batch_bytes(a, i);", "const auto* ai = static_cast<const char*>(a.data) + batch_bytes(a, i) * 0;", "test_cuda_grouped_gemm"),
    ("pipeline 1f1b: one warm-up forward too many", "src/parallel/pipeline_schedule.cpp", "const int warmup = std::min(ranks - 1 - r, microbatches);  // Megatron's num_warmup, capped at m", "const int warmup = std::min(ranks - r, microbatches);  // Megatron's num_warmup, capped at m", "test_pipeline_schedule"),
    ("pipeline lower: receive not recorded", "src/parallel/pipeline_schedule.cpp", "        received.insert(key(recv));", "        received.insert(key(act(recv.stage, ActionKind::kF, recv.mb)));", "test_pipeline_schedule"),
    ("pipeline sim: I does not free the activation stash", "src/parallel/pipeline_schedule.cpp", "act_stash[size_t(r)] += f ? 1 : (b || a.kind == ActionKind::kI ? -1 : 0);", "act_stash[size_t(r)] += f ? 1 : (b ? -1 : 0);", "test_pipeline_schedule"),
    ("pipeline validator: W before I accepted", "src/parallel/pipeline_schedule.cpp", "VLPAR_CHECK(w < 0 || in < w,", "VLPAR_CHECK(w < 0 || in < w || w >= 0,", "test_pipeline_schedule"),
    ("moe padded plan: padding rows keep garbage on CUDA", "src/kernels/cuda/moe_permute_kernel.cuh", "      float x[kVec] = {};\n      if (a >= 0) load_pack<T, kVec>(x, src + f);", "      float x[kVec] = {};\n      load_pack<T, kVec>(x, src + f);", "test_cuda_moe_permute"),
    ("moe plan: rows inside an expert in descending assignment order", "src/kernels/cuda/moe_plan.cu", "      p.row_assignment[row + before] = int32_t(a);\n      p.assignment_row[a] = row + before;", "      p.row_assignment[row + total - 1 - before] = int32_t(a);\n      p.assignment_row[a] = row + total - 1 - before;", "test_cuda_moe_permute"),
    ("moe plan: offsets off by one", "src/kernels/cuda/moe_plan.cu", "p.offsets[e] = p.counts[int64_t(e) * p.chunks];", "p.offsets[e] = p.counts[int64_t(e) * p.chunks] + 1;", "test_cuda_moe_permute"),
    ("moe plan: repeated ids not flagged", "src/kernels/cuda/moe_plan.cu", "if (p.indices[b] == id) return true;", "if (p.indices[b] == id && id < 0) return true;", "test_cuda_moe_permute"),
    ("moe permute: row gathered from the slot, not the token", "src/kernels/cuda/moe_permute_kernel.cuh", "(p.gather && a >= 0 ? a / p.top_k : r)", "(p.gather && a >= 0 ? a % p.top_k : r)", "test_cuda_moe_permute"),
    ("moe unpermute: routing weights ignored", "src/kernels/cuda/moe_permute_kernel.cuh", "acc[v] += ws[j] * x[v];", "acc[v] += x[v] + ws[j] * 0.f;", "test_cuda_moe_permute"),
    ("moe row_dot: one lane's partial sum", "src/kernels/cuda/moe_permute_kernel.cuh", "    s = warp_sum(s);", "    s = s + 0.f * warp_sum(s);", "test_cuda_moe_permute"),
]
only = sys.argv[1:] 
# The ctest environment of tests/CMakeLists.txt (VLPAR_MPI_TEST_ENV): root in containers, more ranks than cores.
MPI_ENV = ("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
           "PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_btl_vader_single_copy_mechanism=none "
           "OMPI_MCA_hwloc_base_binding_policy=none OMP_NUM_THREADS=1")
# The emulated CUDA build (its cases break kernels and the emulator); CuTe headers from this checkout when fetched
# (tools/fetch_test_tools.py cute) for the fragment-layout cross-check.
CUTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build/third_party/cute-4.2.0.0/include")
CUTE_ARG = f"-DVLPAR_CUTE_INCLUDE={os.path.abspath(CUTE)}" if os.path.isdir(CUTE) else ""
subprocess.run(f"cmake -S {ROOT} -B {ROOT}/build -DVLPAR_ENABLE_CUDA=OFF -DVLPAR_CUDA_EMULATION=ON {CUTE_ARG} -DVLPAR_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Release > /dev/null", shell=True, check=True)
for name, path, old, new, test in cases:
    if only and not any(o in name for o in only): continue
    p = f"{ROOT}/{path}"; src = open(p).read()
    assert src.count(old) == 1, (name, old)
    open(p, 'w').write(src.replace(old, new))
    try:
        targets = [t.partition(":np")[0] for t in test.split()]
        b = subprocess.run(f"cmake --build {ROOT}/build -j2 --target {' '.join(targets)}", shell=True, capture_output=True, text=True)
        if b.returncode != 0:
            print(f"{name}: BUILD FAILED", flush=True); continue
        caught = []
        for t in test.split():
            target, _, np = t.partition(":np")
            exe = next((f"{ROOT}/build/{d}/{target}" for d in ("tests", "examples/qwen3vl") if os.path.exists(f"{ROOT}/build/{d}/{target}")), target)
            run = exe if not np else f"env {MPI_ENV} mpirun -np {np} {exe} --gtest_color=no"
            # A broken watchdog hangs instead of failing: `timeout` turns that into a catch (the ctest TIMEOUT's job).
            r = subprocess.run(f"timeout 60 {run} 2>&1", shell=True, capture_output=True, text=True)
            if r.returncode == 124: caught.append(f"{target} hung, killed after 60 s" + (f" (np {np})" if np else ""))
            failed = sorted({l for l in r.stdout.splitlines() if re.match(r'^\[  FAILED  \] [A-Za-z]', l)})
            caught += [l.split('] ')[1].split(' (')[0].split(',')[0] + (f" (np {np})" if np else "") for l in failed]
            if r.returncode not in (0, 124) and not failed:  # a crash (signal) is a catch too
                caught.append(f"{target} crashed (exit {r.returncode})" + (f" (np {np})" if np else ""))
        print(f"{name}: {'CAUGHT by ' + ', '.join(sorted(set(caught))) if caught else 'NOT CAUGHT'}", flush=True)
    finally:
        open(p, 'w').write(src)
