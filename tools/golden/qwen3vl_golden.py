#!/usr/bin/env python3
"""Golden fixtures for vlpar's Qwen3-VL (dense + MoE) forward/backward parity tests.

Builds a tiny random Qwen3-VL model with Hugging Face transformers (pinned 4.57.1, fp32, eager attention, train mode),
runs a packed batch of 3 samples through it (each sample ALONE, batch size 1, as HF would), defines the packed loss
(see README.md "Packed-batch loss"), does one backward, and writes:

  DIR/config.json, DIR/model.safetensors   exactly model.save_pretrained(DIR, safe_serialization=True)
  DIR/batch.safetensors                    the packed inputs (what the C++ side feeds its model)
  DIR/expected.safetensors                 logits, losses, position ids, vision outputs, hidden states, gradients

The format is the contract read by the C++ tests; it is documented in tools/golden/README.md.

Usage:
  .venv/bin/python tools/golden/qwen3vl_golden.py --kind dense --out tests/fixtures/qwen3vl/dense
  .venv/bin/python tools/golden/qwen3vl_golden.py --kind moe   --out tests/fixtures/qwen3vl/moe
  (config overrides: --text-hidden --layers --heads --kv-heads --head-dim --intermediate --vocab --mrope-section
   --rope-theta --vision-hidden --vision-depth --vision-heads --vision-intermediate --patch --pos-embeddings
   --deepstack --experts --top-k --moe-intermediate --mlp-only-layers --aux-coef --tie; see --help)
"""
import argparse
import json
import math
import os
import shlex
import sys

import safetensors
import safetensors.torch
import torch
import torch.nn.functional as F
import transformers
from transformers import (Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLMoeConfig,
                          Qwen3VLMoeForConditionalGeneration)

try:  # the aux loss HF itself adds when output_router_logits=True (Switch load balancing, spec §5)
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import load_balancing_loss_func as hf_load_balancing
    AUX_SOURCE = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe.load_balancing_loss_func"
except ImportError:  # pragma: no cover - only for transformers versions that moved it
    hf_load_balancing = None
    AUX_SOURCE = "formula in tools/golden/qwen3vl_golden.py (switch_aux_loss)"

PINNED_TRANSFORMERS = "4.57.1"

# Small special-token ids inside the tiny vocab (HF defaults are 151652..151656, far outside it).
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 4, 5, 6, 7
FIRST_TEXT_ID = 8  # ordinary text tokens are drawn from [FIRST_TEXT_ID, vocab)

# Per-kind defaults; every field can be overridden on the command line.
DEFAULTS = {
    "dense": dict(vocab=256, text_hidden=64, layers=3, heads=4, kv_heads=2, head_dim=16, intermediate=128,
                  mrope_section="4,2,2", rope_theta=10000.0, vision_hidden=32, vision_depth=3, vision_heads=2,
                  vision_intermediate=64, patch=4, pos_embeddings=64, deepstack="0,1",
                  experts=0, top_k=0, moe_intermediate=0, mlp_only_layers="", aux_coef=0.0),
    "moe": dict(vocab=256, text_hidden=64, layers=3, heads=4, kv_heads=2, head_dim=32, intermediate=96,
                mrope_section="6,5,5", rope_theta=10000.0, vision_hidden=32, vision_depth=3, vision_heads=2,
                vision_intermediate=64, patch=4, pos_embeddings=64, deepstack="0,2",
                experts=8, top_k=2, moe_intermediate=32, mlp_only_layers="1", aux_coef=0.001),
}


def int_list(s):
    return [int(x) for x in s.split(",") if x.strip() != ""]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=["dense", "moe"], required=True)
    p.add_argument("--out", required=True, help="fixture directory (created)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--vocab", type=int)
    p.add_argument("--text-hidden", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--intermediate", type=int, help="dense SwiGLU width (dense layers / mlp_only_layers)")
    p.add_argument("--mrope-section", help="comma list, must sum to head_dim/2 (e.g. 4,2,2)")
    p.add_argument("--rope-theta", type=float)
    p.add_argument("--vision-hidden", type=int)
    p.add_argument("--vision-depth", type=int)
    p.add_argument("--vision-heads", type=int)
    p.add_argument("--vision-intermediate", type=int)
    p.add_argument("--patch", type=int, help="spatial patch size P (patch vector = 3*2*P*P)")
    p.add_argument("--pos-embeddings", type=int, help="num_position_embeddings (a perfect square)")
    p.add_argument("--deepstack", help="deepstack_visual_indexes, comma list of ViT block indices")
    p.add_argument("--experts", type=int)
    p.add_argument("--top-k", type=int)
    p.add_argument("--moe-intermediate", type=int)
    p.add_argument("--mlp-only-layers", help="comma list of layers that use the dense MLP (MoE kind)")
    p.add_argument("--aux-coef", type=float, help="router_aux_loss_coef (MoE kind)")
    p.add_argument("--tie", action="store_true", help="tie_word_embeddings=true (top level and text_config)")
    p.add_argument("--allow-other-transformers", action="store_true",
                   help=f"do not insist on transformers=={PINNED_TRANSFORMERS}")
    a = p.parse_args(argv)
    for k, v in DEFAULTS[a.kind].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.mrope_section = int_list(a.mrope_section)
    a.deepstack = int_list(a.deepstack)
    a.mlp_only_layers = int_list(a.mlp_only_layers)
    return a


def check_args(a):
    assert a.heads % a.kv_heads == 0, "heads must be a multiple of kv_heads"
    assert a.head_dim % 2 == 0 and sum(a.mrope_section) == a.head_dim // 2, "mrope_section must sum to head_dim/2"
    assert len(a.mrope_section) == 3
    assert a.vision_hidden % a.vision_heads == 0, "vision_hidden % vision_heads"
    assert (a.vision_hidden // a.vision_heads) % 4 == 0, "vision head dim must be divisible by 4 (2D RoPE)"
    g = math.isqrt(a.pos_embeddings)
    assert g * g == a.pos_embeddings, "num_position_embeddings must be a perfect square"
    assert all(0 <= j < a.vision_depth for j in a.deepstack), "deepstack index outside [0, vision_depth)"
    assert len(set(a.deepstack)) == len(a.deepstack) and a.deepstack == sorted(a.deepstack), \
        "deepstack indexes must be strictly increasing (HF maps list position j to LLM layer j)"
    assert len(a.deepstack) <= a.layers, "more deepstack levels than text layers: HF silently drops the extra ones"
    assert a.vocab > FIRST_TEXT_ID + 16
    if a.kind == "moe":
        assert a.experts > 0 and 0 < a.top_k <= a.experts and a.moe_intermediate > 0
        assert all(0 <= l < a.layers for l in a.mlp_only_layers)


def build_config(a):
    rope_scaling = {"rope_type": "default", "mrope_section": list(a.mrope_section), "mrope_interleaved": True}
    text = dict(vocab_size=a.vocab, hidden_size=a.text_hidden, intermediate_size=a.intermediate,
                num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                head_dim=a.head_dim, hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-6,
                rope_theta=a.rope_theta, rope_scaling=rope_scaling, attention_bias=False, attention_dropout=0.0,
                tie_word_embeddings=a.tie, use_cache=False, initializer_range=0.02)
    vision = dict(depth=a.vision_depth, hidden_size=a.vision_hidden, hidden_act="gelu_pytorch_tanh",
                  intermediate_size=a.vision_intermediate, num_heads=a.vision_heads, in_channels=3,
                  patch_size=a.patch, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=a.text_hidden,
                  num_position_embeddings=a.pos_embeddings, deepstack_visual_indexes=list(a.deepstack),
                  initializer_range=0.02)
    special = dict(image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD, vision_start_token_id=VISION_START,
                   vision_end_token_id=VISION_END, tie_word_embeddings=a.tie)
    if a.kind == "moe":
        text.update(num_experts=a.experts, num_experts_per_tok=a.top_k, moe_intermediate_size=a.moe_intermediate,
                    decoder_sparse_step=1, mlp_only_layers=list(a.mlp_only_layers), norm_topk_prob=True,
                    router_aux_loss_coef=a.aux_coef)
        cfg = Qwen3VLMoeConfig(text_config=text, vision_config=vision, **special)
    else:
        cfg = Qwen3VLConfig(text_config=text, vision_config=vision, **special)
    # Set on the top-level config so that both sub-configs (ViT and LLM) use eager attention.
    cfg._attn_implementation = "eager"
    return cfg


@torch.no_grad()
def init_params(model, tied, gen):
    """Deterministic, non-trivial init: every activation O(1), every norm weight != 1 and every bias != 0.

    HF's own init (normal(0.02), ones/zeros for norms and biases) leaves the ViT attention almost uniform and hides
    bugs in norm affines and biases, so every parameter is redrawn here from `gen`, in named_parameters() order."""
    def randn(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    for name, p in model.named_parameters():
        if name.endswith(".bias"):
            v = randn(p.shape, 0.1)
        elif "norm" in name and p.dim() == 1:  # LayerNorm/RMSNorm weights (incl. q_norm/k_norm)
            v = 1.0 + randn(p.shape, 0.1)
        elif name.endswith("embed_tokens.weight"):
            v = randn(p.shape, 0.3 if tied else 1.0)  # tied: it is also the LM head, keep logits O(1)
        elif name.endswith("pos_embed.weight"):
            v = randn(p.shape, 0.5)
        elif name.endswith("experts.gate_up_proj"):  # [E, H, 2I], applied as x @ W
            v = randn(p.shape, p.shape[1] ** -0.5)
        elif name.endswith("experts.down_proj"):  # [E, I, H], applied as h @ W
            v = randn(p.shape, p.shape[1] ** -0.5)
        elif name.endswith("mlp.gate.weight"):  # router [E, H]: sharper than 1/sqrt(H) so routing is not uniform
            v = randn(p.shape, 1.5 * p.shape[1] ** -0.5)
        elif p.dim() >= 2:  # Linear [out, in] or Conv3d [out, C, T, P, P]: std 1/sqrt(fan_in)
            v = randn(p.shape, (p[0].numel()) ** -0.5)
        else:
            raise AssertionError(f"init_params: unhandled parameter {name} {tuple(p.shape)}")
        p.copy_(v)


# ---------------------------------------------------------------------------------------------------------------
# Batch: 3 samples, packed. Grids are in patch units (t, h, w); each contributes t*h*w/4 LLM tokens.
IMAGE_GRIDS_SAMPLE0 = [(1, 4, 6), (1, 6, 4)]
VIDEO_GRIDS_SAMPLE1 = [(2, 4, 4)]
TIMESTAMP_TOKENS = 3  # text tokens standing for "<x.y seconds>" before each video temporal patch (spec §2.2)


def text_tokens(n, a, gen):
    return torch.randint(FIRST_TEXT_ID, a.vocab, (n,), generator=gen).tolist()


def image_span(grid):
    t, h, w = grid
    return [VISION_START] + [IMAGE_PAD] * (t * h * w // 4) + [VISION_END]


def video_spans(grid, a, gen):
    """Per temporal patch: timestamp text, vision_start, h*w/4 video pads, vision_end (processor layout, §2.2)."""
    t, h, w = grid
    out = []
    for _ in range(t):
        out += text_tokens(TIMESTAMP_TOKENS, a, gen) + [VISION_START] + [VIDEO_PAD] * (h * w // 4) + [VISION_END]
    return out


def pixels(grids, a, gen, is_image):
    """Random normalised pixels [sum t*h*w, 3*2*P*P] in [-1, 1). Images repeat their single frame over the two
    temporal slices (as the processor does); video temporal slices differ."""
    n = sum(t * h * w for t, h, w in grids)
    x = torch.rand((n, 3, 2, a.patch, a.patch), generator=gen, dtype=torch.float32) * 2 - 1
    if is_image:
        x[:, :, 1] = x[:, :, 0]
    return x.reshape(n, 3 * 2 * a.patch * a.patch)


def build_samples(a, gen):
    s0 = (text_tokens(5, a, gen) + image_span(IMAGE_GRIDS_SAMPLE0[0]) + text_tokens(4, a, gen)
          + image_span(IMAGE_GRIDS_SAMPLE0[1]) + text_tokens(5, a, gen))
    s1 = text_tokens(4, a, gen) + video_spans(VIDEO_GRIDS_SAMPLE1[0], a, gen) + text_tokens(4, a, gen)
    s2 = text_tokens(22, a, gen)
    samples = [
        dict(ids=s0, image_grids=IMAGE_GRIDS_SAMPLE0, video_grids=[]),
        dict(ids=s1, image_grids=[], video_grids=VIDEO_GRIDS_SAMPLE1),
        dict(ids=s2, image_grids=[], video_grids=[]),
    ]
    for s in samples:
        ids = torch.tensor(s["ids"], dtype=torch.long)
        s["ids"] = ids
        s["pixel_values"] = pixels(s["image_grids"], a, gen, True) if s["image_grids"] else None
        s["pixel_values_videos"] = pixels(s["video_grids"], a, gen, False) if s["video_grids"] else None
        s["image_grid_thw"] = torch.tensor(s["image_grids"], dtype=torch.long) if s["image_grids"] else None
        s["video_grid_thw"] = torch.tensor(s["video_grids"], dtype=torch.long) if s["video_grids"] else None
        vision = (ids == IMAGE_PAD) | (ids == VIDEO_PAD) | (ids == VISION_START) | (ids == VISION_END)
        drop = torch.rand(ids.shape, generator=gen) < 0.2
        labels = ids.clone()
        labels[vision | drop] = -100
        s["labels"] = labels
        # sanity: pad counts and span counts match the grids
        n_img = sum(t * h * w // 4 for t, h, w in s["image_grids"])
        n_vid = sum(t * h * w // 4 for t, h, w in s["video_grids"])
        assert int((ids == IMAGE_PAD).sum()) == n_img, "image pad count does not match image_grid_thw"
        assert int((ids == VIDEO_PAD).sum()) == n_vid, "video pad count does not match video_grid_thw"
        starts = (ids[:-1] == VISION_START).nonzero().flatten()
        assert int((ids[starts + 1] == IMAGE_PAD).sum()) == len(s["image_grids"])
        assert int((ids[starts + 1] == VIDEO_PAD).sum()) == sum(t for t, _, _ in s["video_grids"])
        assert int((labels[1:] != -100).sum()) > 0, "every sample needs at least one supervised shifted label"
    return samples


def switch_aux_loss(layer_logits, num_experts, top_k):
    """Spec §5 formula; used only if HF's load_balancing_loss_func cannot be imported, and as a cross-check."""
    x = torch.cat(layer_logits, dim=0)
    p = torch.softmax(x, dim=-1)
    sel = torch.topk(p, top_k, dim=-1).indices
    f = F.one_hot(sel, num_experts).float().mean(dim=0)  # [k, E]: mean over rows, per slot
    return num_experts * torch.sum(f * p.mean(dim=0)[None])


def aux_loss_fn(layer_logits, num_experts, top_k):
    if hf_load_balancing is not None:
        return hf_load_balancing(tuple(layer_logits), num_experts, top_k, None)
    return switch_aux_loss(layer_logits, num_experts, top_k)


def close(a, b, rtol=1e-5, atol=1e-6):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64),
                          rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------------------------
def run(model, cfg, a, samples):
    """Each sample through HF alone; packed loss; one backward. Returns (expected dict, info dict)."""
    lm = model.model.language_model
    L = cfg.text_config.num_hidden_layers
    is_moe = a.kind == "moe"

    # Hooks: ViT outputs per call, the position ids HF actually used, layer inputs/outputs (to pin down what
    # output_hidden_states contains), the final-norm output.
    rec = {}

    def reset():
        rec.clear()
        rec.update(visual=[], vblocks=[], pos=None, layer_in={}, layer_out_pre_ds={}, norm_in=None, norm_out=None)

    # (Every hook returns None: a forward hook that returns a value replaces the module output.)
    def on_visual(m, i, o):  # fires after the blocks of the same call: attach their recorded states
        rec["visual"].append((o[0], o[1], rec["vblocks"]))
        rec["vblocks"] = []

    def on_vblock_in(m, args):
        if not rec["vblocks"]:
            rec["vblocks"].append(args[0].detach().clone())  # patch_embed + pos_embed, input of block 0

    def on_vblock_out(m, i, o):
        rec["vblocks"].append(o.detach().clone())

    def on_rotary(m, i, o):
        rec["pos"] = i[1].detach().clone()

    def on_norm(m, i, o):
        rec["norm_in"], rec["norm_out"] = i[0].detach().clone(), o

    def on_layer_in(l):
        def f(m, args):
            rec["layer_in"][l] = args[0].detach().clone()
        return f

    def on_layer_out(l):  # runs before HF's in-place deepstack add, so this is the pre-deepstack output
        def f(m, i, o):
            rec["layer_out_pre_ds"][l] = o.detach().clone()
        return f

    hooks = [model.model.visual.register_forward_hook(on_visual), lm.rotary_emb.register_forward_hook(on_rotary),
             lm.norm.register_forward_hook(on_norm)]
    hooks.append(model.model.visual.blocks[0].register_forward_pre_hook(on_vblock_in))
    for blk in model.model.visual.blocks:
        hooks.append(blk.register_forward_hook(on_vblock_out))
    for l, layer in enumerate(lm.layers):
        hooks.append(layer.register_forward_pre_hook(on_layer_in(l)))
        hooks.append(layer.register_forward_hook(on_layer_out(l)))

    per = []  # per-sample results (graph tensors kept for the packed backward)
    for b, s in enumerate(samples):
        reset()
        ids = s["ids"][None]
        mask = torch.ones_like(ids)
        kwargs = dict(input_ids=ids, attention_mask=mask, labels=s["labels"][None], use_cache=False,
                      output_hidden_states=True)
        if s["pixel_values"] is not None:
            kwargs.update(pixel_values=s["pixel_values"], image_grid_thw=s["image_grid_thw"])
        if s["pixel_values_videos"] is not None:
            kwargs.update(pixel_values_videos=s["pixel_values_videos"], video_grid_thw=s["video_grid_thw"])
        if is_moe:
            kwargs.update(output_router_logits=True)
        out = model(**kwargs)

        with torch.no_grad():
            pos, _ = model.model.get_rope_index(ids, s["image_grid_thw"], s["video_grid_thw"], mask)
        pos = pos[:, 0, :]  # [3, S]
        assert torch.equal(pos, rec["pos"][:, 0, :]), "get_rope_index differs from the positions HF used"

        # output_hidden_states of the top-level model: L+1 tensors. Pin down exactly what they are.
        hs = out.hidden_states
        assert len(hs) == L + 1
        n_ds = len(cfg.vision_config.deepstack_visual_indexes)
        for l in range(L + 1):
            h = hs[l][0]
            if l < L:  # index l is the input of decoder layer l (post-deepstack output of layer l-1)
                assert torch.equal(h, rec["layer_in"][l][0]), f"hidden_states[{l}] is not the input of layer {l}"
            else:  # last: output of the last layer, BEFORE the final norm
                assert torch.equal(h, rec["norm_in"][0]), "hidden_states[L] is not the final-norm input"
                assert not torch.equal(h, rec["norm_out"][0].detach())
            if l >= 1:
                pre = rec["layer_out_pre_ds"][l - 1][0]
                has_visual = s["pixel_values"] is not None or s["pixel_values_videos"] is not None
                if l - 1 < n_ds and has_visual:  # deepstack add is done in place on the recorded tensor
                    assert not torch.equal(h, pre), "expected the deepstack add inside hidden_states"
                else:
                    assert torch.equal(h, pre)

        # Vision outputs: HF calls the ViT once for the images, then once for the videos.
        calls = list(rec["visual"])
        img = calls.pop(0) if s["pixel_values"] is not None else None
        vid = calls.pop(0) if s["pixel_values_videos"] is not None else None
        assert not calls

        logits = out.logits[0]  # [S, V]
        shift_labels = s["labels"][1:]
        ce_sum = F.cross_entropy(logits[:-1].float(), shift_labels, ignore_index=-100, reduction="sum")
        n_valid = int((shift_labels != -100).sum())
        r = dict(logits=logits, ce_sum=ce_sum, n_valid=n_valid, pos=pos, hs=[h[0].detach() for h in hs],
                 final=rec["norm_out"][0].detach(), img=img, vid=vid, hf_loss=out.loss.detach())
        # HF's own per-sample loss (mean over the sample's valid labels; MoE: + coef * per-sample aux)
        if is_moe:
            r["router"] = [x for x in out.router_logits]  # per MoE layer, [S, E]
            aux_b = aux_loss_fn(r["router"], a.experts, a.top_k)
            assert close(out.aux_loss, aux_b), "HF aux_loss differs from load_balancing_loss_func on its logits"
            assert close(out.aux_loss, switch_aux_loss(r["router"], a.experts, a.top_k)), "aux formula mismatch"
            assert close(out.loss, ce_sum / n_valid + a.aux_coef * out.aux_loss), "HF MoE loss != ce + coef*aux"
        else:
            assert close(out.loss, ce_sum / n_valid), "HF loss != per-sample mean CE"
        per.append(r)

    for h in hooks:
        h.remove()

    # Packed loss (README "Packed-batch loss").
    n_valid_total = sum(r["n_valid"] for r in per)
    ce = sum(r["ce_sum"] for r in per) / n_valid_total
    if is_moe:
        n_moe = len(per[0]["router"])
        layer_logits = [torch.cat([r["router"][i] for r in per], dim=0) for i in range(n_moe)]
        aux = aux_loss_fn(layer_logits, a.experts, a.top_k)
        loss = ce + a.aux_coef * aux
    else:
        aux = torch.zeros((), dtype=torch.float32)
        loss = ce
    model.zero_grad(set_to_none=True)
    loss.backward()

    # -------- collect expected tensors
    cat = lambda xs: torch.cat(xs, dim=0).detach().contiguous()
    exp = {}
    exp["logits"] = cat([r["logits"] for r in per]).float()
    exp["loss"] = loss.detach().reshape(())
    exp["ce_loss"] = ce.detach().reshape(())
    exp["aux_loss"] = aux.detach().float().reshape(())
    exp["position_ids"] = torch.cat([r["pos"] for r in per], dim=1).contiguous()
    D = cfg.text_config.hidden_size
    for key, mod in (("image", "img"), ("video", "vid")):
        outs = [r[mod] for r in per if r[mod] is not None]
        exp[f"{key}_embeds"] = cat([o[0] for o in outs]) if outs else torch.zeros((0, D))
        for j in range(len(cfg.vision_config.deepstack_visual_indexes)):
            exp[f"deepstack_{key}_embeds.{j}"] = cat([o[1][j] for o in outs]) if outs else torch.zeros((0, D))
        hv = cfg.vision_config.hidden_size
        for i in range(cfg.vision_config.depth + 1):
            exp[f"vision_hidden_{key}.{i}"] = cat([o[2][i] for o in outs]) if outs else torch.zeros((0, hv))
        with torch.no_grad():  # pin the convention: merger(vision_hidden.depth) and deepstack j from block idx_j
            vis = model.model.visual
            for o in outs:
                assert torch.equal(vis.merger(o[2][-1]), o[0].detach())
                for j, idx in enumerate(cfg.vision_config.deepstack_visual_indexes):
                    assert torch.equal(vis.deepstack_merger_list[j](o[2][idx + 1]), o[1][j].detach())
    for l in range(L + 1):
        exp[f"hidden_states.{l}"] = cat([r["hs"][l] for r in per])
    exp["final_hidden"] = cat([r["final"] for r in per])
    if is_moe:
        moe_layers = [l for l, layer in enumerate(lm.layers) if hasattr(layer.mlp, "experts")]
        assert len(moe_layers) == len(layer_logits)
        for l, x in zip(moe_layers, layer_logits):
            exp[f"router_logits.{l}"] = x.detach().contiguous()
    with torch.no_grad():  # interpolated learned position embeddings (spec §3.2), for debugging the ViT input
        for key, gkey in (("image", "image_grid_thw"), ("video", "video_grid_thw")):
            grids = [s[gkey] for s in samples if s[gkey] is not None]
            hv = cfg.vision_config.hidden_size
            exp[f"vision_pos_embeds_{key}"] = (model.model.visual.fast_pos_embed_interpolate(torch.cat(grids))
                                               .contiguous() if grids else torch.zeros((0, hv)))
    for name, p in model.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        exp[f"grad.{name}"] = g.detach().contiguous()

    info = dict(n_valid_total=n_valid_total, per=per, ce=ce.detach(), aux=aux.detach(), loss=loss.detach(),
                no_grad=[n for n, p in model.named_parameters() if p.grad is None],
                zero_grad=[n for n, p in model.named_parameters() if p.grad is not None and not p.grad.any()])
    if is_moe:  # routing robustness: gap between the k-th and (k+1)-th router probability over all tokens/layers
        p = torch.softmax(torch.cat(layer_logits).detach(), dim=-1).sort(dim=-1, descending=True).values
        info["min_topk_gap"] = float((p[:, a.top_k - 1] - p[:, a.top_k]).min())
    return exp, info


def packed_ce_from_saved(logits, labels, cu):
    """Recompute the packed CE from saved tensors: shift within each sample, sum, divide by the total count."""
    tot, n = torch.zeros((), dtype=torch.float64), 0
    for b in range(len(cu) - 1):
        lo, hi = int(cu[b]), int(cu[b + 1])
        sl = labels[lo + 1:hi]
        tot += F.cross_entropy(logits[lo:hi - 1].double(), sl, ignore_index=-100, reduction="sum")
        n += int((sl != -100).sum())
    return tot / n


def main(argv):
    a = parse_args(argv)
    if transformers.__version__ != PINNED_TRANSFORMERS and not a.allow_other_transformers:
        sys.exit(f"transformers {transformers.__version__} found, fixtures are pinned to {PINNED_TRANSFORMERS}")
    check_args(a)
    torch.set_num_threads(1)  # reproducible reduction order
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)

    cfg = build_config(a)
    cls = Qwen3VLMoeForConditionalGeneration if a.kind == "moe" else Qwen3VLForConditionalGeneration
    model = cls._from_config(cfg, dtype=torch.float32)
    assert model.config.text_config._attn_implementation == "eager"
    assert model.config.vision_config._attn_implementation == "eager"
    if a.tie:
        assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
    else:
        assert model.lm_head.weight is not model.model.language_model.embed_tokens.weight
    init_params(model, a.tie, gen)
    model.train()  # dropout is 0 everywhere; MoE experts take the train-mode loop + index_add_ path

    samples = build_samples(a, gen)
    exp, info = run(model, cfg, a, samples)

    # -------- batch
    lens = [len(s["ids"]) for s in samples]
    cu = torch.tensor([0] + lens).cumsum(0)
    P = a.patch
    pv_dim = 3 * 2 * P * P
    cat_or_empty = lambda key, shape: (torch.cat([s[key] for s in samples if s[key] is not None]).contiguous()
                                       if any(s[key] is not None for s in samples) else torch.zeros(shape))
    batch = {
        "input_ids": torch.cat([s["ids"] for s in samples]),
        "cu_seqlens": cu.to(torch.long),
        "labels": torch.cat([s["labels"] for s in samples]),
        "pixel_values": cat_or_empty("pixel_values", (0, pv_dim)).float(),
        "image_grid_thw": cat_or_empty("image_grid_thw", (0, 3)).long(),
        "pixel_values_videos": cat_or_empty("pixel_values_videos", (0, pv_dim)).float(),
        "video_grid_thw": cat_or_empty("video_grid_thw", (0, 3)).long(),
        "images_per_sample": torch.tensor([len(s["image_grids"]) for s in samples], dtype=torch.long),
        "videos_per_sample": torch.tensor([len(s["video_grids"]) for s in samples], dtype=torch.long),
    }
    N = int(cu[-1])
    assert exp["logits"].shape == (N, a.vocab) and exp["position_ids"].shape == (3, N)
    for k, v in exp.items():
        if k.startswith(("hidden_states.", "router_logits.")) or k == "final_hidden":
            assert v.shape[0] == N, f"{k} does not cover all {N} packed tokens"
    # The packed mean must be distinguishable from a mean of per-sample means (else a C++ reduction bug would hide).
    counts = [r["n_valid"] for r in info["per"]]
    assert len(set(counts)) > 1, f"every sample has the same number of valid labels {counts}: change the seed"
    mean_of_means = sum(float(r["ce_sum"]) / r["n_valid"] for r in info["per"]) / len(counts)
    assert abs(mean_of_means - float(exp["ce_loss"])) > 1e-4, "packed CE indistinguishable from the mean of means"

    # -------- sanity: the packed loss recomputed from what is saved
    ce_re = packed_ce_from_saved(exp["logits"], batch["labels"], batch["cu_seqlens"])
    assert close(ce_re, exp["ce_loss"], rtol=2e-6, atol=0), (float(ce_re), float(exp["ce_loss"]))
    if a.kind == "moe":
        saved_router = [exp[k] for k in sorted((k for k in exp if k.startswith("router_logits.")),
                                               key=lambda k: int(k.split(".")[1]))]
        aux_re = switch_aux_loss([x.double() for x in saved_router], a.experts, a.top_k)
        assert close(aux_re, exp["aux_loss"], rtol=2e-6, atol=0)
        assert close(ce_re + a.aux_coef * aux_re, exp["loss"], rtol=2e-6, atol=0)
        assert info["min_topk_gap"] > 1e-4, f"near-tie in top-k routing ({info['min_topk_gap']}): pick another seed"
    else:
        assert close(ce_re, exp["loss"], rtol=2e-6, atol=0)

    # -------- write
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True)
    with safetensors.safe_open(os.path.join(a.out, "model.safetensors"), "pt") as f:
        saved_names = set(f.keys())
    grad_names = {k[len("grad."):] for k in exp if k.startswith("grad.")}
    assert saved_names == grad_names, (sorted(saved_names ^ grad_names))

    meta = {
        "format": "vlpar-qwen3vl-golden-v1",
        "kind": a.kind,
        "seed": str(a.seed),
        "command": " ".join(shlex.quote(x) for x in [os.path.relpath(__file__, os.getcwd())] + list(argv)),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "dtype": "float32",
        "attn_implementation": "eager",
        "mode": "train",
        "num_samples": str(len(samples)),
        "n_valid_labels": str(info["n_valid_total"]),
        "router_aux_loss_coef": repr(float(a.aux_coef)),
        "aux_loss_source": AUX_SOURCE if a.kind == "moe" else "none (dense)",
        "hidden_states": "hidden_states.0 = inputs_embeds after the visual masked_scatter (input of layer 0); "
                         "hidden_states.l (1<=l<=L) = output of decoder layer l-1 including the deepstack add when "
                         "l-1 < len(deepstack); hidden_states.L has NO final norm; final_hidden = norm(hidden_states.L)",
        "params_without_grad": ",".join(info["no_grad"]),
        "params_with_zero_grad": ",".join(info["zero_grad"]),
    }
    if a.kind == "moe":
        meta["min_topk_gap"] = repr(info["min_topk_gap"])
    # (clone: safetensors refuses tensors that share storage, e.g. loss and ce_loss for the dense kind)
    batch = {k: v.detach().clone().contiguous() for k, v in batch.items()}
    exp = {k: v.detach().clone().contiguous() for k, v in exp.items()}
    safetensors.torch.save_file(batch, os.path.join(a.out, "batch.safetensors"), metadata=meta)
    safetensors.torch.save_file(exp, os.path.join(a.out, "expected.safetensors"), metadata=meta)

    # -------- round trip: the saved checkpoint reproduces sample 0's logits
    re = cls.from_pretrained(a.out, dtype=torch.float32, attn_implementation="eager").train()
    s = samples[0]
    # Grad mode on, as in the golden run: under no_grad torch picks other matmul kernels for the MoE expert loop and
    # the logits move by ~1e-6, so the exact comparison must run in the same mode.
    with torch.enable_grad():
        lg = re(input_ids=s["ids"][None], attention_mask=torch.ones_like(s["ids"][None]), use_cache=False,
                pixel_values=s["pixel_values"], image_grid_thw=s["image_grid_thw"]).logits[0]
    assert torch.equal(lg, exp["logits"][:len(s["ids"])]), "reloaded checkpoint gives different logits"

    sizes = {f: os.path.getsize(os.path.join(a.out, f)) for f in sorted(os.listdir(a.out))}
    print(f"{a.out}: N={N} tokens, loss={float(exp['loss']):.6f} ce={float(exp['ce_loss']):.6f} "
          f"aux={float(exp['aux_loss']):.6f}, files={sizes}"
          + (f", min top-k gap={info['min_topk_gap']:.3g}" if a.kind == "moe" else "")
          + (f", params without grad={info['no_grad']}" if info["no_grad"] else "")
          + (f", params with all-zero grad={info['zero_grad']}" if info["zero_grad"] else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
