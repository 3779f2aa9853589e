#!/usr/bin/env python3
"""Deliberate-breakage check (STYLE §14): applies one known bug at a time to a scratch copy of HEAD, rebuilds the
test that should catch it and prints which tests failed. A breakage reported NOT CAUGHT means a test is too weak.
Usage: tools/breakage_check.py [substring of case names ...]    (takes ~10 minutes for all cases on 2 cores)"""
import os, subprocess, sys, tempfile
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
 ("grad norm forgets second tensor", "src/kernels/cpu/optimizer.cpp", "for (size_t i = 0; i < grads.size(); ++i) {", "for (size_t i = 0; i + 1 < grads.size(); ++i) {", "test_optimizer"),
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
]
only = sys.argv[1:] 
subprocess.run(f"cmake -S {ROOT} -B {ROOT}/build -DVLPAR_ENABLE_CUDA=OFF -DVLPAR_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Release > /dev/null", shell=True, check=True)
for name, path, old, new, test in cases:
    if only and not any(o in name for o in only): continue
    p = f"{ROOT}/{path}"; src = open(p).read()
    assert src.count(old) == 1, (name, old)
    open(p, 'w').write(src.replace(old, new))
    try:
        b = subprocess.run(f"cmake --build {ROOT}/build -j2 --target {test}", shell=True, capture_output=True, text=True)
        if b.returncode != 0:
            print(f"{name}: BUILD FAILED", flush=True); continue
        r = subprocess.run(f"{ROOT}/build/tests/{test} 2>&1 | grep -E '^\\[  FAILED  \\] [A-Za-z]' | sort -u", shell=True, capture_output=True, text=True)
        caught = [l.split('] ')[1].split(' (')[0].split(',')[0] for l in r.stdout.splitlines() if 'FAILED' in l]
        print(f"{name}: {'CAUGHT by ' + ', '.join(sorted(set(caught))) if caught else 'NOT CAUGHT'}", flush=True)
    finally:
        open(p, 'w').write(src)
