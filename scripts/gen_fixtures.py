#!/usr/bin/env python3
"""Builds tiny random Gemma 4 text checkpoints and their Hugging Face transformers references.

For each variant (moe, dense, ple) this writes a folder with:
  config.json               release-style text config (global_head_dim / num_global_key_value_heads
                            as flat fields, the layout of the published checkpoints)
  config.transformers.json  the config exactly as this transformers version's save_pretrained wrote it
                            (5.15+ folds the full-layer overrides into `per_layer_config`)
  model.safetensors         bfloat16 weights, text-only layout (`model.layers.*`, tied embeddings)
  logits_<i>.f32            float32 little-endian full-sequence logits [n_prompt][vocab]
  expected.json             prompts, greedy continuations, margins, per-layer facts, diagnostics
plus `moe_mm/`: the moe weights in the multimodal layout (`model.language_model.*`), sharing the
moe references (`same_as: "moe"`).

References are exact float32 math on the stored bfloat16 weights: the checkpoint is reloaded from
disk with dtype float32 and eager attention. An independent float32 re-implementation of the
architecture spec (docs: /work/shared/spec/gemma4-architecture.md) is run on the same weights and
its distance to transformers is recorded as a diagnostic.

Run (needs torch and transformers with models.gemma4; CPU is enough):
  PYTHONUNBUFFERED=1 python3 scripts/gen_fixtures.py --out tests/fixtures
Options: --tar-dir DIR also writes DIR/<variant>.tar for each folder (for copying back from a
remote machine).
"""

import argparse
import copy
import json
import math
import os
import shutil
import sys
import tarfile
import traceback
import zlib

VOCAB = 512
HIDDEN = 256
N_LAYERS = 6
LAYER_TYPES = ["sliding_attention", "full_attention"] * 3
PROMPT_LENGTHS = [1, 7, 19, 40]
N_GREEDY = 12
PROMPT_SEED = 1234
FIRST_TOKEN_ID = 3  # prompts avoid pad/eos/bos

# Init scales (see docs/fixtures.md). With tied embeddings a large embedding in the residual
# stream makes every position predict its own input token (e . e dominates the LM head) and greedy
# output repeats one token. So the embedding is small (sqrt(H) * std, rms 1..2), the post-branch
# norms (rms ~4) let the attention/FFN/PLE branches dominate the residual, and the final norm
# weight brings the logits to std ~8, inside the softcap of 30. The q_norm range sets how peaked
# attention is (scores use scale 1.0 after QK-norm).
# Candidate scale sets are tried in order per variant; the first whose greedy continuations are not
# degenerate (see pick_scales) is kept. Deterministic: same seeds, same choice.
SCALE_CANDIDATES = [
    {"embed": 0.125, "branch_norm": (2.0, 6.0), "final_norm": (2.0, 6.0), "q_norm": (0.25, 0.75)},
    {"embed": 0.125, "branch_norm": (2.0, 6.0), "final_norm": (2.0, 6.0), "q_norm": (0.5, 1.5)},
    {"embed": 0.0625, "branch_norm": (2.0, 6.0), "final_norm": (4.0, 12.0), "q_norm": (0.5, 1.5)},
    {"embed": 0.25, "branch_norm": (4.0, 12.0), "final_norm": (1.0, 3.0), "q_norm": (0.25, 0.75)},
]
PLE_EMBED_STD = 0.15
ROUTER_PROJ_STD = 2.0
NORM_RANGE = (0.5, 1.5)
BRANCH_NORMS = (
    "post_attention_layernorm.weight",
    "post_feedforward_layernorm.weight",
    "post_per_layer_input_norm.weight",
)
SCALAR_RANGE = (0.5, 1.5)

ROPE_PARAMETERS = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
}

COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN,
    "num_hidden_layers": N_LAYERS,
    "num_attention_heads": 4,
    "head_dim": 64,
    "global_head_dim": 128,
    "layer_types": LAYER_TYPES,
    "sliding_window": 8,
    "final_logit_softcapping": 30.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "max_position_embeddings": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "rope_parameters": ROPE_PARAMETERS,
    "attention_bias": False,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
    "vocab_size_per_layer_input": VOCAB,
}

VARIANTS = {
    # like 26B-A4B: dense MLP + routed experts on every layer, K=V on full layers
    "moe": dict(
        COMMON,
        intermediate_size=96,
        num_key_value_heads=2,
        num_global_key_value_heads=1,
        attention_k_eq_v=True,
        enable_moe_block=True,
        num_experts=8,
        top_k_experts=2,
        moe_intermediate_size=64,
        hidden_size_per_layer_input=0,
        num_kv_shared_layers=0,
        use_double_wide_mlp=False,
    ),
    # like 31B: dense, K=V on full layers
    "dense": dict(
        COMMON,
        intermediate_size=128,
        num_key_value_heads=2,
        num_global_key_value_heads=1,
        attention_k_eq_v=True,
        enable_moe_block=False,
        hidden_size_per_layer_input=0,
        num_kv_shared_layers=0,
        use_double_wide_mlp=False,
    ),
    # like E2B: per-layer embeddings, KV sharing on the last 2 layers, double-wide MLP there
    "ple": dict(
        COMMON,
        intermediate_size=128,
        num_key_value_heads=1,
        num_global_key_value_heads=None,
        attention_k_eq_v=False,
        enable_moe_block=False,
        hidden_size_per_layer_input=64,
        num_kv_shared_layers=2,
        use_double_wide_mlp=True,
    ),
}
VARIANT_SEEDS = {"moe": 101, "dense": 202, "ple": 303}


def log(msg):
    print(msg, flush=True)


# ----------------------------------------------------------------------------------------------
# Per-layer facts derived from the spec (section 1.1); used to check what transformers built.


def layer_facts(cfg):
    n = cfg["num_hidden_layers"]
    types = cfg["layer_types"]
    n_shared = cfg.get("num_kv_shared_layers") or 0
    first_shared = n - n_shared if n_shared > 0 else n
    facts = []
    for l in range(n):
        full = types[l] == "full_attention"
        k_eq_v = bool(cfg.get("attention_k_eq_v")) and full
        head_dim = cfg["global_head_dim"] if (full and cfg.get("global_head_dim")) else cfg["head_dim"]
        n_kv = cfg["num_global_key_value_heads"] if k_eq_v else cfg["num_key_value_heads"]
        shared = l >= first_shared
        source = None
        if shared:
            source = max(i for i in range(first_shared) if types[i] == types[l])
        mlp = cfg["intermediate_size"] * (2 if (cfg.get("use_double_wide_mlp") and shared) else 1)
        facts.append(
            {
                "layer": l,
                "type": types[l],
                "head_dim": head_dim,
                "n_head": cfg["num_attention_heads"],
                "n_kv_head": n_kv,
                "k_eq_v": k_eq_v,
                "kv_shared": shared,
                "kv_source": source,
                "mlp_width": mlp,
            }
        )
    return facts


def check_model_shapes(model, cfg, where):
    """Fails loudly when transformers built a different geometry than the spec says."""
    layers = model.model.layers
    if len(layers) != cfg["num_hidden_layers"]:
        raise RuntimeError(f"{where}: {len(layers)} layers, expected {cfg['num_hidden_layers']}")
    H = cfg["hidden_size"]
    for f in layer_facts(cfg):
        layer = layers[f["layer"]]
        attn = layer.self_attn
        d, nh, nkv = f["head_dim"], f["n_head"], f["n_kv_head"]
        got_q = tuple(attn.q_proj.weight.shape)
        if got_q != (nh * d, H):
            raise RuntimeError(f"{where}: layer {f['layer']} q_proj {got_q}, expected {(nh * d, H)}")
        k_proj = getattr(attn, "k_proj", None)
        v_proj = getattr(attn, "v_proj", None)
        if f["kv_shared"]:
            if k_proj is not None or v_proj is not None:
                raise RuntimeError(f"{where}: KV-shared layer {f['layer']} has its own k/v projection")
        else:
            if k_proj is None or tuple(k_proj.weight.shape) != (nkv * d, H):
                raise RuntimeError(
                    f"{where}: layer {f['layer']} k_proj "
                    f"{None if k_proj is None else tuple(k_proj.weight.shape)}, expected {(nkv * d, H)}"
                )
            if f["k_eq_v"] != (v_proj is None):
                raise RuntimeError(f"{where}: layer {f['layer']} v_proj presence disagrees with k_eq_v")
        gate = getattr(layer.mlp, "gate_proj", None)
        got_mlp = f["mlp_width"] if gate is None else gate.weight.shape[0]
        if gate is None:
            log(f"  {where}: layer {f['layer']} has no mlp.gate_proj; MLP width not checked")
        if got_mlp != f["mlp_width"]:
            raise RuntimeError(f"{where}: layer {f['layer']} MLP width {got_mlp}, expected {f['mlp_width']}")


# ----------------------------------------------------------------------------------------------
# Random parameters


def fill_parameters(torch, model, seed, sc):
    """Overwrites every parameter and persistent buffer with random values of realistic scale,
    rounded to bfloat16. Returns (rules used per tensor, names that fell back to a default rule)."""
    embed = model.model.embed_tokens.weight
    seen = set()
    rules = {}
    fallback = []
    with torch.no_grad():
        for name, t in model.state_dict(keep_vars=True).items():
            if name.startswith("lm_head."):
                continue  # tied to model.embed_tokens.weight
            if id(t) in seen:
                continue
            seen.add(id(t))
            if not t.is_floating_point():
                continue
            g = torch.Generator().manual_seed(seed * 1000003 + zlib.crc32(name.encode()))
            short = name[len("model.") :] if name.startswith("model.") else name

            def normal(std):
                return torch.randn(t.shape, generator=g, dtype=torch.float32) * std

            def uniform(lo, hi):
                return lo + (hi - lo) * torch.rand(t.shape, generator=g, dtype=torch.float32)

            if short == "embed_tokens.weight":
                v, rule = normal(sc["embed"]), f"normal std {sc['embed']}"
            elif short == "embed_tokens_per_layer.weight":
                v, rule = normal(PLE_EMBED_STD), f"normal std {PLE_EMBED_STD}"
            elif short == "norm.weight":
                v, rule = uniform(*sc["final_norm"]), f"uniform {sc['final_norm']}"
            elif short.endswith(BRANCH_NORMS):
                v, rule = uniform(*sc["branch_norm"]), f"uniform {sc['branch_norm']}"
            elif short.endswith("q_norm.weight"):
                v, rule = uniform(*sc["q_norm"]), f"uniform {sc['q_norm']}"
            elif short.endswith("layer_scalar"):
                v, rule = uniform(*SCALAR_RANGE), f"uniform {SCALAR_RANGE}"
            elif short.endswith("router.scale") or short.endswith("router.per_expert_scale"):
                v, rule = uniform(*SCALAR_RANGE), f"uniform {SCALAR_RANGE}"
            elif short.endswith("router.proj.weight"):
                v, rule = normal(ROUTER_PROJ_STD), f"normal std {ROUTER_PROJ_STD}"
            elif t.dim() == 1 and "norm" in short:
                v, rule = uniform(*NORM_RANGE), f"uniform {NORM_RANGE}"
            elif t.dim() >= 2:
                fan_in = t.shape[-1]
                v, rule = normal(1.0 / math.sqrt(fan_in)), f"normal std 1/sqrt({fan_in})"
                if not (short.endswith(".weight") or short.endswith("gate_up_proj") or short.endswith("down_proj")):
                    fallback.append(name)
            else:
                v, rule = uniform(*SCALAR_RANGE), f"uniform {SCALAR_RANGE}"
                fallback.append(name)
            v = v.to(torch.bfloat16).to(torch.float32)
            if v.numel() > 1 and bool((v == v.flatten()[0]).all()):
                raise RuntimeError(f"parameter {name} is constant after randomisation")
            t.data.copy_(v.to(t.dtype))
            rules[name] = rule
    if model.lm_head.weight.data_ptr() != embed.data_ptr():
        raise RuntimeError("lm_head.weight is not tied to model.embed_tokens.weight")
    return rules, fallback


# ----------------------------------------------------------------------------------------------
# Independent float32 implementation of the spec (section 3), for a cross-check only.


def spec_forward(torch, sd, cfg, ids):
    """sd: name (without 'model.') -> float32 tensor. ids: list of ints. Returns [S, vocab]."""
    H = cfg["hidden_size"]
    L = cfg["num_hidden_layers"]
    P = cfg.get("hidden_size_per_layer_input") or 0
    nh = cfg["num_attention_heads"]
    eps = cfg["rms_norm_eps"]
    W = cfg["sliding_window"]
    S = len(ids)
    facts = layer_facts(cfg)
    idx = torch.tensor(ids, dtype=torch.long)

    def rms(x, w=None):
        y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)
        return y * w if w is not None else y

    def gelu(u):
        return 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u * u * u)))

    pos = torch.arange(S, dtype=torch.float32)

    def rope_table(layer_type, d):
        rp = cfg["rope_parameters"][layer_type]
        theta = rp["rope_theta"]
        half = d // 2
        inv = torch.tensor([theta ** (-2.0 * i / d) for i in range(half)], dtype=torch.float32)
        if rp["rope_type"] == "proportional":
            rot = int(rp.get("partial_rotary_factor", 1.0) * d // 2)
            inv[rot:] = 0.0
            inv = inv / rp.get("factor", 1.0)
        ang = pos[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        return torch.cos(ang), torch.sin(ang)

    def rope(x, cs):
        cos, sin = cs
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    i_pos = torch.arange(S)[:, None]
    j_pos = torch.arange(S)[None, :]
    masks = {
        "full_attention": j_pos <= i_pos,
        "sliding_attention": (j_pos <= i_pos) & (i_pos - j_pos < W),
    }

    x = sd["embed_tokens.weight"][idx] * math.sqrt(H)
    if P:
        t = (sd["embed_tokens_per_layer.weight"][idx] * math.sqrt(P)).view(S, L, P)
        c = (x @ sd["per_layer_model_projection.weight"].T) * (H**-0.5)
        c = rms(c.view(S, L, P), sd["per_layer_projection_norm.weight"])
        ple = (c + t) * (2.0**-0.5)

    kv = {}
    for f in facts:
        l = f["layer"]
        p = f"layers.{l}."
        d, nkv = f["head_dim"], f["n_kv_head"]
        cs = rope_table(f["type"], d)
        a = rms(x, sd[p + "input_layernorm.weight"])
        q = rope(rms((a @ sd[p + "self_attn.q_proj.weight"].T).view(S, nh, d), sd[p + "self_attn.q_norm.weight"]), cs)
        if f["kv_shared"]:
            k, v = kv[f["kv_source"]]
        else:
            kr = (a @ sd[p + "self_attn.k_proj.weight"].T).view(S, nkv, d)
            vr = kr if f["k_eq_v"] else (a @ sd[p + "self_attn.v_proj.weight"].T).view(S, nkv, d)
            k = rope(rms(kr, sd[p + "self_attn.k_norm.weight"]), cs)
            v = rms(vr)
            kv[l] = (k, v)
        group = nh // k.shape[1]
        kk = k.repeat_interleave(group, dim=1)
        vv = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("ihd,jhd->hij", q, kk)
        scores = scores.masked_fill(~masks[f["type"]][None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        o = torch.einsum("hij,jhd->ihd", probs, vv).reshape(S, nh * d) @ sd[p + "self_attn.o_proj.weight"].T
        h = x + rms(o, sd[p + "post_attention_layernorm.weight"])
        z = rms(h, sd[p + "pre_feedforward_layernorm.weight"])
        ff = (gelu(z @ sd[p + "mlp.gate_proj.weight"].T) * (z @ sd[p + "mlp.up_proj.weight"].T)) @ sd[
            p + "mlp.down_proj.weight"
        ].T
        if cfg.get("enable_moe_block"):
            f1 = rms(ff, sd[p + "post_feedforward_layernorm_1.weight"])
            r = rms(h) * sd[p + "router.scale"] * (H**-0.5)
            rp = torch.softmax(r @ sd[p + "router.proj.weight"].T, dim=-1)
            tw, ti = torch.topk(rp, cfg["top_k_experts"], dim=-1)
            tw = tw / tw.sum(-1, keepdim=True)
            tw = tw * sd[p + "router.per_expert_scale"][ti]
            z2 = rms(h, sd[p + "pre_feedforward_layernorm_2.weight"])
            I = cfg["moe_intermediate_size"]
            y = torch.zeros_like(h)
            for s in range(S):
                for kk_i in range(ti.shape[1]):
                    e = int(ti[s, kk_i])
                    gu = sd[p + "experts.gate_up_proj"][e] @ z2[s]
                    ye = sd[p + "experts.down_proj"][e] @ (gelu(gu[:I]) * gu[I:])
                    y[s] += tw[s, kk_i] * ye
            f2 = rms(y, sd[p + "post_feedforward_layernorm_2.weight"])
            ff = f1 + f2
        h2 = h + rms(ff, sd[p + "post_feedforward_layernorm.weight"])
        if P:
            g = gelu(h2 @ sd[p + "per_layer_input_gate.weight"].T) * ple[:, l, :]
            h2 = h2 + rms(g @ sd[p + "per_layer_projection.weight"].T, sd[p + "post_per_layer_input_norm.weight"])
        x = h2 * sd[p + "layer_scalar"]
    x = rms(x, sd["norm.weight"])
    logits = x @ sd["embed_tokens.weight"].T
    cap = cfg.get("final_logit_softcapping")
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


# ----------------------------------------------------------------------------------------------
# transformers helpers, tolerant of API differences between versions


def import_gemma4():
    try:
        from transformers import Gemma4ForCausalLM, Gemma4TextConfig
    except ImportError:
        try:
            from transformers.models.gemma4 import Gemma4ForCausalLM, Gemma4TextConfig
        except ImportError as e:
            sys.exit(f"gen_fixtures: this transformers has no Gemma 4 text model ({e}); need >= 5.5")
    try:
        from transformers import Gemma4ForConditionalGeneration
    except ImportError:
        Gemma4ForConditionalGeneration = None
    return Gemma4TextConfig, Gemma4ForCausalLM, Gemma4ForConditionalGeneration


def save_model(model, folder):
    try:
        model.save_pretrained(folder, safe_serialization=True)
    except TypeError:
        model.save_pretrained(folder)  # newer versions always write safetensors


def load_f32(torch, cls, folder):
    """Loads a checkpoint as float32 with eager attention (and eager experts where supported)."""
    attempts = [
        dict(dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"),
        dict(dtype=torch.float32, attn_implementation="eager"),
        dict(torch_dtype=torch.float32, attn_implementation="eager"),
    ]
    errors = []
    for kw in attempts:
        try:
            model, info = cls.from_pretrained(folder, output_loading_info=True, **kw)
            model.eval()
            return model, info, kw
        except (TypeError, ValueError) as e:
            errors.append(f"{sorted(kw)}: {e}")
    raise RuntimeError(f"cannot load {folder} as float32: " + " | ".join(errors))


def check_loading_info(info, allowed_unexpected, where):
    missing = [k for k in info.get("missing_keys", []) if not k.startswith("lm_head.")]
    mismatched = list(info.get("mismatched_keys", []))
    unexpected = set(info.get("unexpected_keys", []))
    if missing or mismatched:
        raise RuntimeError(f"{where}: missing keys {missing}, mismatched keys {mismatched}")
    extra = unexpected - set(allowed_unexpected)
    if extra:
        raise RuntimeError(f"{where}: unexpected keys {sorted(extra)}")
    return sorted(unexpected)


def release_style_config(saved, cfg):
    """The config.json layout of the published checkpoints: flat global_head_dim and
    num_global_key_value_heads, no per_layer_config."""
    out = dict(saved)
    out.pop("per_layer_config", None)
    for key in (
        "head_dim",
        "global_head_dim",
        "num_key_value_heads",
        "num_global_key_value_heads",
        "attention_k_eq_v",
        "layer_types",
        "rope_parameters",
        "sliding_window",
        "final_logit_softcapping",
        "hidden_size_per_layer_input",
        "vocab_size_per_layer_input",
        "num_kv_shared_layers",
        "use_double_wide_mlp",
        "enable_moe_block",
        "num_experts",
        "top_k_experts",
        "moe_intermediate_size",
        "intermediate_size",
    ):
        if key in cfg:
            out[key] = cfg[key]
    out["model_type"] = "gemma4_text"
    out["architectures"] = ["Gemma4ForCausalLM"]
    return dict(sorted(out.items()))


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def make_prompts(torch):
    g = torch.Generator().manual_seed(PROMPT_SEED)
    return [torch.randint(FIRST_TOKEN_ID, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def margin_of(torch, row):
    top = torch.topk(row, 2)
    return int(top.indices[0]), float(top.values[0] - top.values[1])


# ----------------------------------------------------------------------------------------------


def greedy(torch, model, ids):
    """Greedy decoding with the KV cache, one token per step, no EOS stop."""
    out_ids, margins, step_logits = [], [], []
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
        cache = out.past_key_values
        row = out.logits[0, -1].float()
        n = len(ids)
        for step in range(N_GREEDY):
            tok, m = margin_of(torch, row)
            if tok != int(torch.argmax(row)):
                raise RuntimeError("topk and argmax disagree")
            out_ids.append(tok)
            margins.append(m)
            step_logits.append(row.clone())
            if step == N_GREEDY - 1:
                break
            out = model(
                input_ids=torch.tensor([[tok]]),
                position_ids=torch.tensor([[n]]),
                past_key_values=cache,
                use_cache=True,
            )
            cache = out.past_key_values
            row = out.logits[0, -1].float()
            n += 1
    return out_ids, margins, torch.stack(step_logits)


def router_gap_hooks(torch, model, k, gaps):
    """Records, per routed token, log(p_k) - log(p_{k+1}) of the router softmax (the top-k cut)."""
    handles = []
    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("TextRouter"):

            def hook(_m, _inp, out):
                probs = out[0].detach().float()
                top = torch.topk(probs, k + 1, dim=-1).values
                gaps.append(float((torch.log(top[:, k - 1]) - torch.log(top[:, k])).min()))

            handles.append(mod.register_forward_hook(hook))
    return handles


HIDDEN_PROMPT = 2  # prompt index whose per-layer hidden states are stored (19 tokens > window)


def capture_hidden(torch, model, ids):
    """[L + 2, S, H] float32: scaled embedding, each decoder layer's output (after layer_scalar,
    after PLE), and the final-norm output, from forward hooks on one uncached forward."""
    rows = []

    def keep(_m, _inp, out):
        rows.append((out[0] if isinstance(out, tuple) else out)[0].detach().float().clone())

    inner = model.model
    mods = [inner.embed_tokens] + list(inner.layers) + [inner.norm]
    handles = [m.register_forward_hook(keep) for m in mods]
    try:
        model(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    if len(rows) != len(mods):
        raise RuntimeError(f"captured {len(rows)} hidden states, expected {len(mods)}")
    return torch.stack(rows)


def quick_quality(torch, model):
    """Greedy (no cache) on the prompts: mean distinct ids and how often a position predicts its
    own input token. Used only to pick a scale set."""
    distinct, self_hits, positions = [], 0, 0
    for ids in make_prompts(torch):
        seq = list(ids)
        logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0]
        self_hits += int((torch.argmax(logits, -1) == torch.tensor(ids)).sum())
        positions += len(ids)
        gen = []
        for _ in range(N_GREEDY):
            tok = int(torch.argmax(model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]))
            gen.append(tok)
            seq.append(tok)
        distinct.append(len(set(gen)))
    return sum(distinct) / len(distinct), self_hits / positions


def pick_scales(torch, Gemma4TextConfig, Gemma4ForCausalLM, name, cfg):
    tried, best = [], None
    for i, sc in enumerate(SCALE_CANDIDATES):
        torch.manual_seed(VARIANT_SEEDS[name])
        model = Gemma4ForCausalLM(Gemma4TextConfig(**copy.deepcopy(cfg))).to(torch.float32).eval()
        check_model_shapes(model, cfg, f"{name} (built)")
        rules, fallback = fill_parameters(torch, model, VARIANT_SEEDS[name], sc)
        mean_distinct, self_frac = quick_quality(torch, model)
        tried.append({"candidate": i, "mean_distinct_greedy_ids": mean_distinct, "frac_self_prediction": self_frac})
        log(f"  scale candidate {i}: mean distinct greedy ids {mean_distinct:.2f}, self-prediction {self_frac:.2f}")
        score = mean_distinct - 10.0 * self_frac
        if best is None or score > best[0]:
            best = (score, i, model, rules, fallback)
        if mean_distinct >= 4.0 and self_frac <= 0.2:
            break
    _, i, model, rules, fallback = best
    return model, rules, fallback, SCALE_CANDIDATES[i], tried


def generate_variant(torch, classes, name, out_root, versions):
    Gemma4TextConfig, Gemma4ForCausalLM, _ = classes
    cfg = VARIANTS[name]
    folder = os.path.join(out_root, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    notes = []
    log(f"== {name}")

    model, rules, fallback, sc, pick_log = pick_scales(torch, Gemma4TextConfig, Gemma4ForCausalLM, name, cfg)
    notes.append(f"scale set chosen: {json.dumps(sc)}; candidates tried: {json.dumps(pick_log)}")
    if fallback:
        notes.append(f"parameters initialised by a fallback rule: {fallback}")
        log(f"  fallback init rule for {fallback}")
    rounded = {k: v.detach().clone().float() for k, v in model.state_dict().items()}

    model = model.to(torch.bfloat16)
    save_model(model, folder)
    del model

    # config.json: keep what transformers wrote as config.transformers.json, then write the
    # release-style layout that the published checkpoints use.
    cfg_path = os.path.join(folder, "config.json")
    with open(cfg_path) as f:
        saved_cfg = json.load(f)
    shutil.copyfile(cfg_path, os.path.join(folder, "config.transformers.json"))
    release_cfg = release_style_config(saved_cfg, cfg)
    write_json(cfg_path, release_cfg)

    # The published E2B/E4B files still carry k/v tensors for the KV-shared layers, which
    # transformers ignores; put random ones in so that converters must ignore them too.
    from safetensors.torch import load_file, save_file

    st_path = os.path.join(folder, "model.safetensors")
    if not os.path.exists(st_path):
        raise RuntimeError(f"{name}: save_pretrained wrote no single model.safetensors: {os.listdir(folder)}")
    tensors = load_file(st_path)
    ignored_extra = []
    for fct in layer_facts(cfg):
        if not fct["kv_shared"]:
            continue
        d, nkv, l = fct["head_dim"], fct["n_kv_head"], fct["layer"]
        g = torch.Generator().manual_seed(9000 + l)
        extra = {
            f"model.layers.{l}.self_attn.k_proj.weight": torch.randn(nkv * d, HIDDEN, generator=g) / 16.0,
            f"model.layers.{l}.self_attn.v_proj.weight": torch.randn(nkv * d, HIDDEN, generator=g) / 16.0,
            f"model.layers.{l}.self_attn.k_norm.weight": 0.5 + torch.rand(d, generator=g),
        }
        for k, v in extra.items():
            tensors[k] = v.to(torch.bfloat16)
            ignored_extra.append(k)
    if ignored_extra:
        save_file(tensors, st_path, metadata={"format": "pt"})
        notes.append(
            "model.safetensors also holds random k_proj/v_proj/k_norm tensors for the KV-shared layers "
            "(as the published E2B/E4B files do); transformers ignores them and so must a converter: "
            + ", ".join(ignored_extra)
        )
    stored = load_file(st_path)
    keys = sorted(stored)
    dtypes = {str(v.dtype) for v in stored.values()}
    del stored
    bad = [k for k in keys if not k.startswith("model.")]
    if bad:
        raise RuntimeError(f"{name}: tensors outside model.*: {bad}")
    log(f"  {len(keys)} tensors, dtypes {sorted(dtypes)}, {os.path.getsize(st_path)} bytes")

    # Reload from disk in float32: the reference is float32 math on exactly the stored weights.
    ref, info, load_kw = load_f32(torch, Gemma4ForCausalLM, folder)
    unexpected = check_loading_info(info, ignored_extra, name)
    check_model_shapes(ref, cfg, f"{name} (reloaded)")
    sd = ref.state_dict()
    not_f32 = []
    for k, v in rounded.items():
        if k not in sd:
            if k.startswith("lm_head."):
                continue
            raise RuntimeError(f"{name}: reloaded model lacks {k}")
        if sd[k].dtype != torch.float32:
            not_f32.append(f"{k}:{sd[k].dtype}")
        if not torch.equal(sd[k].float(), v):
            raise RuntimeError(f"{name}: reloaded {k} differs from the stored bf16 value")
    if not_f32:
        notes.append(f"tensors not float32 after the float32 load (values still exact): {not_f32}")
        log(f"  not float32 after load: {not_f32}")
    notes.append(f"reference loaded with {sorted(k for k in load_kw)}; unexpected keys ignored: {len(unexpected)}")

    spec_sd = {k[len("model.") :]: v.float() for k, v in sd.items() if k.startswith("model.")}
    prompts = make_prompts(torch)
    gaps = []
    handles = router_gap_hooks(torch, ref, cfg.get("top_k_experts") or 0, gaps) if cfg.get("enable_moe_block") else []
    entries, diag = [], {"prompts": []}
    for i, ids in enumerate(prompts):
        with torch.no_grad():
            try:
                out = ref(input_ids=torch.tensor([ids]), use_cache=False, output_hidden_states=True)
                hs = out.hidden_states
            except TypeError:
                out = ref(input_ids=torch.tensor([ids]), use_cache=False)
                hs = None
        logits = out.logits[0].float().contiguous()
        if not bool(torch.isfinite(logits).all()):
            raise RuntimeError(f"{name}: non-finite logits for prompt {i}")
        fname = f"logits_{i}.f32"
        with open(os.path.join(folder, fname), "wb") as f:
            f.write(logits.numpy().astype("<f4").tobytes())
        g_ids, g_margins, g_logits = greedy(torch, ref, ids)
        # Cross-check the cached decode against one uncached forward over prompt + continuation.
        with torch.no_grad():
            full = ref(input_ids=torch.tensor([ids + g_ids[:-1]]), use_cache=False).logits[0].float()
        nocache = full[len(ids) - 1 :]
        cache_diff = float((nocache - g_logits).abs().max())
        if not torch.equal(torch.argmax(nocache, -1), torch.tensor(g_ids)):
            notes.append(f"prompt {i}: greedy ids differ between cached and uncached forward")
        try:
            spec_logits = spec_forward(torch, spec_sd, cfg, ids)
            spec_diff = float((spec_logits - logits).abs().max())
        except Exception as e:  # diagnostic only
            spec_diff = None
            notes.append(f"spec re-implementation failed: {type(e).__name__}: {e}")
            traceback.print_exc()
        margins_all = torch.topk(logits, 2, dim=-1).values
        margins_all = margins_all[:, 0] - margins_all[:, 1]
        d = {
            "logits_std": float(logits.std()),
            "logits_max_abs": float(logits.abs().max()),
            "frac_abs_logit_gt_25": float((logits.abs() > 25).float().mean()),
            "min_top2_margin_all_positions": float(margins_all.min()),
            "median_top2_margin_all_positions": float(margins_all.median()),
            "greedy_min_margin": min(g_margins),
            "greedy_distinct_ids": len(set(g_ids)),
            "frac_argmax_equals_input_token": float(
                (torch.argmax(logits, -1) == torch.tensor(ids)).float().mean()
            ),
            "cache_vs_nocache_max_abs_diff": cache_diff,
            "spec_reimplementation_max_abs_diff": spec_diff,
        }
        if hs is not None:
            d["hidden_rms_per_layer"] = [float(h.float().pow(2).mean().sqrt()) for h in hs]
        diag["prompts"].append(d)
        log(f"  prompt {i} (n={len(ids)}): {json.dumps({k: v for k, v in d.items() if k != 'hidden_rms_per_layer'})}")
        log(f"    greedy {g_ids}")
        entry = {"ids": ids, "logits": fname, "greedy": g_ids, "margins": g_margins}
        if i == HIDDEN_PROMPT:
            try:
                hidden = capture_hidden(torch, ref, ids).contiguous()
                hname = f"hidden_{i}.f32"
                with open(os.path.join(folder, hname), "wb") as f:
                    f.write(hidden.numpy().astype("<f4").tobytes())
                entry["hidden"] = hname
                entry["hidden_shape"] = list(hidden.shape)
            except Exception as e:  # optional debugging aid
                notes.append(f"hidden-state capture failed: {type(e).__name__}: {e}")
                traceback.print_exc()
        entries.append(entry)
    for h in handles:
        h.remove()
    if gaps:
        diag["router_min_log_prob_gap_at_top_k_cut"] = min(gaps)
        log(f"  router: smallest log-prob gap at the top-k cut {min(gaps):.4g}")

    notes += [
        "weights: random (seeded), every value rounded to bfloat16 and stored as bfloat16",
        "logits_<i>.f32: float32 little-endian, row-major [len(ids)][vocab], transformers forward in float32 "
        "with eager attention on the stored weights, softcap applied, no BOS added (ids are the whole input)",
        f"greedy: {N_GREEDY} argmax tokens decoded one at a time with the KV cache (positions continue "
        "from the prompt), no EOS stop; margins[k] = top-1 minus top-2 logit at step k",
        "init scales: " + json.dumps(sorted(set(rules.values()))),
        f"hidden_{HIDDEN_PROMPT}.f32: float32 [num_hidden_layers + 2][len(ids)][hidden_size] for prompt "
        f"{HIDDEN_PROMPT}: row 0 the scaled token embedding, row 1 + l the output of decoder layer l (after "
        "PLE and layer_scalar), the last row the final RMSNorm output (input of the LM head)",
    ]
    expected = {
        "variant": name,
        "transformers_version": versions["transformers"],
        "torch_version": versions["torch"],
        "config": release_cfg,
        "layers": layer_facts(cfg),
        "prompts": entries,
        "diagnostics": diag,
        "notes": notes,
    }
    write_json(os.path.join(folder, "expected.json"), expected)
    return release_cfg, ref, prompts


def generate_mm(torch, classes, out_root, moe_cfg, moe_ref, prompts, versions):
    """moe weights in the multimodal layout; references shared with moe."""
    from safetensors.torch import load_file, save_file

    _, _, CondGen = classes
    src = os.path.join(out_root, "moe")
    folder = os.path.join(out_root, "moe_mm")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    log("== moe_mm")
    tensors = load_file(os.path.join(src, "model.safetensors"))
    mm = {"model.language_model." + k[len("model.") :]: v for k, v in tensors.items()}
    g = torch.Generator().manual_seed(4242)
    mm["model.vision_tower.dummy.weight"] = (0.5 + torch.rand(4, 8, generator=g)).to(torch.bfloat16)
    save_file(mm, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    text_cfg = dict(moe_cfg)
    text_cfg.pop("architectures", None)
    text_cfg.pop("transformers_version", None)
    text_cfg.pop("dtype", None)
    mm_cfg = {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "text_config": text_cfg,
        "vision_config": None,
        "audio_config": None,
        "tie_word_embeddings": True,
        "dtype": "bfloat16",
        "transformers_version": versions["transformers"],
    }
    write_json(os.path.join(folder, "config.json"), mm_cfg)

    check = None
    if CondGen is not None:
        try:
            mm_model, info, _ = load_f32(torch, CondGen, folder)
            missing = [k for k in info.get("missing_keys", []) if not k.startswith("lm_head.")]
            diffs = []
            with torch.no_grad():
                for ids in prompts:
                    a = mm_model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
                    b = moe_ref(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
                    diffs.append(float((a - b).abs().max()))
            check = {
                "loaded_with": "Gemma4ForConditionalGeneration",
                "missing_keys": missing,
                "unexpected_keys": sorted(info.get("unexpected_keys", [])),
                "max_abs_diff_vs_moe_logits": max(diffs),
            }
        except Exception as e:
            check = {"error": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
    log(f"  transformers check: {json.dumps(check)}")
    expected = {
        "variant": "moe_mm",
        "same_as": "moe",
        "transformers_version": versions["transformers"],
        "torch_version": versions["torch"],
        "config": mm_cfg,
        "transformers_check": check,
        "notes": [
            "same weights as ../moe under model.language_model.*, plus a dummy model.vision_tower.dummy.weight "
            "[4, 8] bf16 that a text converter must ignore; no lm_head (tied)",
            "prompts, logits, greedy ids and margins: see ../moe/expected.json",
        ],
    }
    write_json(os.path.join(folder, "expected.json"), expected)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures", help="output folder (one sub-folder per variant)")
    ap.add_argument("--tar-dir", default=None, help="also write <tar-dir>/<variant>.tar per folder")
    ap.add_argument("--variants", default="moe,dense,ple", help="comma-separated subset of moe,dense,ple")
    args = ap.parse_args()

    try:
        import torch
        import transformers
    except ImportError as e:
        sys.exit(f"gen_fixtures: needs torch and transformers ({e})")
    torch.set_grad_enabled(False)
    classes = import_gemma4()
    versions = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]}
    log(f"torch {torch.__version__}, transformers {transformers.__version__}")

    names = [v for v in args.variants.split(",") if v]
    for v in names:
        if v not in VARIANTS:
            sys.exit(f"gen_fixtures: unknown variant {v!r}")
    os.makedirs(args.out, exist_ok=True)
    written, problems = [], []
    for v in names:
        # One failing variant must not cost the others (the script is run on a remote machine).
        try:
            cfg, ref, prompts = generate_variant(torch, classes, v, args.out, versions)
            written.append(v)
            if v == "moe":
                generate_mm(torch, classes, args.out, cfg, ref, prompts, versions)
                written.append("moe_mm")
        except Exception as e:
            traceback.print_exc()
            problems.append(f"{v}: {type(e).__name__}: {e}")
            if os.path.isdir(os.path.join(args.out, v)):
                written.append(v)
    for v in written:
        folder = os.path.join(args.out, v)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        log(f"{v}: {size} bytes in {sorted(os.listdir(folder))}")
        if args.tar_dir:
            os.makedirs(args.tar_dir, exist_ok=True)
            with tarfile.open(os.path.join(args.tar_dir, f"{v}.tar"), "w") as tar:
                tar.add(folder, arcname=v)
    if problems:
        log("FAILED: " + " | ".join(problems))
        sys.exit(1)
    log("done")


if __name__ == "__main__":
    main()
