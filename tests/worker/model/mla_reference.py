#!/usr/bin/python3
"""Golden reference for multi-head latent attention (MLA) as DeepSeek-V3 describes it (its technical
report, §2.1.1): the queries come from a low-rank latent c_q = W_DQ h (RMSNorm'd, then up-projected
per head), or from one projection when there is no query latent; keys and values from one shared
latent c_kv = W_DKV h (RMSNorm'd, then up-projected per head into k_nope and v); a decoupled RoPE key
k_rope = RoPE(W_KR h) computed once and shared by every head, appended to each head's k_nope; each
head's query [q_nope | RoPE(q_rope)]; softmax scale 1/sqrt(nope + rope). Hugging Face DeepseekV3's
parameter names (kv_a_proj_with_mqa produces [c_kv | k_rope] in one matrix). Plain torch ops, fp64
arithmetic on fp32 weights; the rest of the block is Llama's (llama_reference.py's helpers).

Writes two variants, each into its own directory: q_lora/ (a query latent, values wider than the
query/key heads) and plain/ (q_proj, values narrower): model.safetensors, config.json, a batch, the
logits, the loss and every gradient; then 12-step loss trajectories of Muon with and without split
heads (optim_reference.py's Muon; split: each head's rows of q_b_proj (q_proj) and kv_b_proj and its
input columns of o_proj orthogonalised on their own), and one of AdamW with QK-clip as MuonClip
clips MLA (Kimi K2 report; Megatron's MLA clip): per head h whose largest logit S passed tau, with
gamma = tau / S, h's q_nope rows times gamma^alpha, its q_rope rows times gamma and its k_nope rows of
kv_b_proj times gamma^(1 - alpha), so that the head's logit q.k scales by gamma; the shared rotary key
(kv_a_proj_with_mqa's last rows) and the values untouched. Per step: the loss, the largest logit
before the clip (over the model and per layer) and the heads clipped.

Then YaRN (rope_scaling, DeepSeek-V3's definition, written out in yarn_cos_sin), logits, loss and
every gradient only: yarn/ (MLA with a query latent: the rope part's frequencies blended by the ramp,
cos/sin times the attention factor, the softmax scale times mscale(factor, mscale_all_dim)^2) and
yarn_gqa/ (the same frequencies on Llama's grouped-query attention, llama_reference.py's blocks).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import write_safetensors  # noqa: E402
from llama_reference import (CASES, STEPS, attention, batch, head_loss, rms_norm, rope_cos_sin,  # noqa: E402
                             rotate_half, run_case, swiglu)
from llama_reference import init_params as llama_init_params  # noqa: E402
from optim_reference import TorchAdamW, adamw_group_hyper  # noqa: E402

BASE = dict(arch="llama", n_layer=2, n_head=4, n_kv_head=0, d_model=32, ffn_hidden=48, seq_len=16, vocab_size=67,
            rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=0)
VARIANTS = {
    "q_lora": dict(q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=16),
    "plain": dict(q_lora_rank=0, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=6, v_head_dim=5),
}
# YaRN with a ramp over the rotary pairs of an 8-channel rope head: theta 100 and 64 original positions
# put low = 0 and high = 3 for beta 8 and 1, so pairs 1 and 2 are blends; the cos/sin factor
# (0.1·0.8·ln 4 + 1) / (0.1·ln 4 + 1) and, with MLA, the softmax scale times (0.1·ln 4 + 1)^2.
YARN = dict(type="yarn", factor=4.0, original_max_position_embeddings=64, beta_fast=8.0, beta_slow=1.0, mscale=0.8,
            mscale_all_dim=1.0)
YARN_VARIANTS = {
    "yarn": dict(BASE, rope_theta=100.0, rope_scaling=YARN,
                 mla=dict(q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)),
    "yarn_gqa": dict(BASE, rope_theta=100.0, n_kv_head=2, rope_scaling=dict(YARN, mscale=1.2, mscale_all_dim=0.0)),
}
B = 3
MUON_CASES = [k for k in CASES if k["name"] in ("muon", "muon_split_heads")]
# AdamW at a learning rate that makes the logits grow; tau per variant such that the clip bites (8 and
# 18 heads over the 12 steps) and no head's logit lies within 0.7 % of tau, so that fp32 rounding in
# another implementation cannot flip a decision.
QK_CLIP = dict(alpha=0.5, tau=dict(q_lora=3.8, plain=4.0),
               config=dict(name="adamw", lr=2e-2, weight_decay=0.1, adamw=dict(beta1=0.9, beta2=0.95, eps=1e-8)))


def param_table(c):
    """(name, shape, kind): DeepseekV3's attention names in its registration order, Llama's elsewhere."""
    C, V, F_, NH, m = c["d_model"], c["vocab_size"], c["ffn_hidden"], c["n_head"], c["mla"]
    qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
    t = [("model.embed_tokens.weight", (V, C), "embedding")]
    for l in range(c["n_layer"]):
        p = f"model.layers.{l}"
        t.append((f"{p}.input_layernorm.weight", (C,), "norm"))
        if m["q_lora_rank"] > 0:
            t.append((f"{p}.self_attn.q_a_proj.weight", (m["q_lora_rank"], C), "matrix"))
            t.append((f"{p}.self_attn.q_a_layernorm.weight", (m["q_lora_rank"],), "norm"))
            t.append((f"{p}.self_attn.q_b_proj.weight", (NH * qk, m["q_lora_rank"]), "matrix"))
        else:
            t.append((f"{p}.self_attn.q_proj.weight", (NH * qk, C), "matrix"))
        t.append((f"{p}.self_attn.kv_a_proj_with_mqa.weight", (m["kv_lora_rank"] + m["qk_rope_head_dim"], C), "matrix"))
        t.append((f"{p}.self_attn.kv_a_layernorm.weight", (m["kv_lora_rank"],), "norm"))
        t.append((f"{p}.self_attn.kv_b_proj.weight",
                  (NH * (m["qk_nope_head_dim"] + m["v_head_dim"]), m["kv_lora_rank"]), "matrix"))
        t.append((f"{p}.self_attn.o_proj.weight", (C, NH * m["v_head_dim"]), "matrix"))
        t.append((f"{p}.post_attention_layernorm.weight", (C,), "norm"))
        t.append((f"{p}.mlp.gate_proj.weight", (F_, C), "matrix"))
        t.append((f"{p}.mlp.up_proj.weight", (F_, C), "matrix"))
        t.append((f"{p}.mlp.down_proj.weight", (C, F_), "matrix"))
    t.append(("model.norm.weight", (C,), "norm"))
    t.append(("lm_head.weight", (V, C), "embedding"))
    return t


def init_params(table, gen):
    params = {}
    for name, shape, kind in table:
        p = 1.0 + 0.1 * torch.randn(shape, generator=gen) if kind == "norm" else 0.2 * torch.randn(shape, generator=gen)
        params[name] = p.float().requires_grad_(True)
    return params


def yarn_mscale(scale, m):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def yarn_cos_sin(T, dim, theta, rs, dtype):
    """DeepSeek-V3's YaRN rotary embedding of dim channels: the extrapolated frequencies theta^(-2i/dim)
    and the interpolated ones (divided by factor) mixed by 1 - ramp, ramp rising linearly over the
    pairs from the one turning beta_fast times in original_max_position_embeddings positions (floored,
    at least 0) to the one turning beta_slow times (ceiled, at most dim - 1); cos and sin times
    mscale(factor, mscale) / mscale(factor, mscale_all_dim). fp64, then rounded."""
    factor, orig = rs["factor"], rs["original_max_position_embeddings"]

    def turning(rotations):
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(turning(rs["beta_fast"])), 0)
    high = min(math.ceil(turning(rs["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    extra = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    inter = extra / factor
    keep = 1.0 - ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    inv_freq = inter * (1 - keep) + extra * keep
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    a = yarn_mscale(factor, rs["mscale"]) / yarn_mscale(factor, rs["mscale_all_dim"])
    return (emb.cos() * a).to(dtype), (emb.sin() * a).to(dtype)


def cos_sin(c, T, dim, dtype):
    if c.get("rope_scaling"):
        return yarn_cos_sin(T, dim, c["rope_theta"], c["rope_scaling"], dtype)
    return rope_cos_sin(T, dim, c["rope_theta"], dtype)


def rope(x, c):
    """Rotary embeddings over the last dim of x (..., T, d), rotate-half pairing (YaRN's with rope_scaling)."""
    cos, sin = cos_sin(c, x.shape[-2], x.shape[-1], x.dtype)
    return x * cos + rotate_half(x) * sin


def softmax_scale(c):
    """1/sqrt(nope + rope), times mscale(factor, mscale_all_dim)^2 under YaRN when mscale_all_dim is set."""
    m, rs = c["mla"], c.get("rope_scaling")
    scale = 1.0 / math.sqrt(m["qk_nope_head_dim"] + m["qk_rope_head_dim"])
    if rs and rs["mscale_all_dim"]:
        scale *= yarn_mscale(rs["factor"], rs["mscale_all_dim"]) ** 2
    return scale


def mla(p, pre, h, c, logit_max=None):
    """The attention branch of layer prefix pre on h = rms_norm(x) (B, T, C): o_proj of MLA's output.
    logit_max, when given, gets each head's largest pre-softmax logit over the causal pairs (NH,)."""
    Bn, T, _ = h.shape
    NH, m, eps = c["n_head"], c["mla"], c["norm_eps"]
    dn, dr, dv, R = m["qk_nope_head_dim"], m["qk_rope_head_dim"], m["v_head_dim"], m["kv_lora_rank"]
    a = f"{pre}.self_attn"
    if m["q_lora_rank"] > 0:
        c_q = rms_norm(h @ p[f"{a}.q_a_proj.weight"].T, p[f"{a}.q_a_layernorm.weight"], eps)
        q = c_q @ p[f"{a}.q_b_proj.weight"].T
    else:
        q = h @ p[f"{a}.q_proj.weight"].T
    q = q.view(Bn, T, NH, dn + dr).transpose(1, 2)                  # (B, NH, T, dn + dr)
    q_nope, q_rope = q[..., :dn], q[..., dn:]
    compressed = h @ p[f"{a}.kv_a_proj_with_mqa.weight"].T           # (B, T, R + dr)
    c_kv, k_rope = compressed[..., :R], compressed[..., R:]
    kv = rms_norm(c_kv, p[f"{a}.kv_a_layernorm.weight"], eps) @ p[f"{a}.kv_b_proj.weight"].T
    kv = kv.view(Bn, T, NH, dn + dv).transpose(1, 2)                # (B, NH, T, dn + dv)
    k_nope, v = kv[..., :dn], kv[..., dn:]
    k_rope = rope(k_rope.unsqueeze(1), c)                           # (B, 1, T, dr): one key for all heads
    query = torch.cat([q_nope, rope(q_rope, c)], dim=-1)
    key = torch.cat([k_nope, k_rope.expand(Bn, NH, T, dr)], dim=-1)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    att = (query @ key.transpose(-2, -1)) * softmax_scale(c)
    att = att.masked_fill(mask, float("-inf"))
    if logit_max is not None:
        logit_max.append(att.detach().amax(dim=(0, 2, 3)).double())
    att = att.softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(Bn, T, NH * dv)
    return y @ p[f"{a}.o_proj.weight"].T


def forward(p, c, tokens, targets, logit_max=None):
    """Logits and loss; logit_max (a list), when given, gets each layer's largest logit per head."""
    x = p["model.embed_tokens.weight"][tokens]
    for l in range(c["n_layer"]):
        pre = f"model.layers.{l}"
        x = x + mla(p, pre, rms_norm(x, p[f"{pre}.input_layernorm.weight"], c["norm_eps"]), c, logit_max)
        m = rms_norm(x, p[f"{pre}.post_attention_layernorm.weight"], c["norm_eps"])
        x = x + swiglu(m, p[f"{pre}.mlp.gate_proj.weight"], p[f"{pre}.mlp.up_proj.weight"],
                       p[f"{pre}.mlp.down_proj.weight"])
    x = rms_norm(x, p["model.norm.weight"], c["norm_eps"])
    logits = x @ p["lm_head.weight"].T
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
    return logits, loss


def optim_table(c):
    """param_table(c) as llama_reference.run_case takes it: (name, shape, kind, fan_in, fan_out, qkv)."""
    return [(n, shape, kind, shape[1] if kind == "matrix" else 0, shape[0] if kind == "matrix" else 0, 1)
            for n, shape, kind in param_table(c)]


def attention_heads(c):
    """name -> (heads, on_fan_in): q_b_proj (q_proj) and kv_b_proj by their output rows, o_proj by its
    input columns; the latent projections are no head's."""
    NH, out = c["n_head"], {}
    for l in range(c["n_layer"]):
        a = f"model.layers.{l}.self_attn"
        q = "q_b_proj" if c["mla"]["q_lora_rank"] > 0 else "q_proj"
        out.update({f"{a}.{q}.weight": (NH, False), f"{a}.kv_b_proj.weight": (NH, False),
                    f"{a}.o_proj.weight": (NH, True)})
    return out


def mla_step_loss(params, c, tokens, targets):
    _, loss = forward(params, c, tokens, targets)
    return loss, loss.item()


def run_qk_clip(c, init, batches, tau, alpha, cfg):
    """STEPS AdamW steps, each followed by MLA's QK-clip; per step the loss, the largest logit before the
    clip and the heads clipped."""
    names = [n for n, *_ in param_table(c)]
    params = {n: init[n].detach().clone().requires_grad_(True) for n in names}
    adamw = TorchAdamW([params[n] for n in names], adamw_group_hyper(cfg, True))
    m = c["mla"]
    dn, qk, kvw = m["qk_nope_head_dim"], m["qk_nope_head_dim"] + m["qk_rope_head_dim"], m["qk_nope_head_dim"] + m["v_head_dim"]
    q_name = "q_b_proj" if m["q_lora_rank"] > 0 else "q_proj"
    losses, max_logits, layer_max, clipped = [], [], [], []
    for t in range(STEPS):
        tokens, targets = batches[t]
        for q in params.values():
            q.grad = None
        record = []
        _, loss = forward(params, c, tokens, targets, record)
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            adamw.step([params[n].grad.detach().clone() for n in names], 1.0)
            n_clipped = 0
            for l, heads in enumerate(record):
                a = f"model.layers.{l}.self_attn"
                wq, wkv = params[f"{a}.{q_name}.weight"], params[f"{a}.kv_b_proj.weight"]
                for h, S in enumerate(heads.tolist()):
                    if S <= tau:
                        continue
                    n_clipped += 1
                    gamma = tau / S
                    wq[h * qk:h * qk + dn] *= gamma ** alpha
                    wq[h * qk + dn:(h + 1) * qk] *= gamma
                    wkv[h * kvw:h * kvw + dn] *= gamma ** (1 - alpha)
        max_logits.append(max(r.max().item() for r in record))
        layer_max.append([r.max().item() for r in record])
        clipped.append(n_clipped)
    return losses, max_logits, layer_max, clipped


def write_variant(out, name, mla_cfg, gen):
    c = dict(BASE, mla=mla_cfg)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    p = init_params(param_table(c), gen)
    write_safetensors(os.path.join(d, "model.safetensors"), p)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(c, batch_size=B), f)
    successor = torch.randperm(c["vocab_size"], generator=gen)
    tokens, targets = batch(c, gen, successor)
    np.save(os.path.join(d, "tokens.npy"), tokens.numpy().astype(np.int32))
    np.save(os.path.join(d, "targets.npy"), targets.numpy().astype(np.int32))
    p64 = {n: t.detach().double().requires_grad_(True) for n, t in p.items()}
    logits, loss = forward(p64, c, tokens, targets)
    loss.backward()
    np.save(os.path.join(d, "logits.npy"), logits.detach().float().numpy())
    np.save(os.path.join(d, "loss.npy"), np.array([loss.item()], dtype=np.float64))
    for n, t in p64.items():
        np.save(os.path.join(d, f"grad.{n}.npy"), t.grad.float().numpy())

    batches = [batch(c, gen, successor) for _ in range(STEPS)]
    for step, (tk, tg) in enumerate(batches):
        np.save(os.path.join(d, f"traj_tokens_{step}.npy"), tk.numpy().astype(np.int32))
        np.save(os.path.join(d, f"traj_targets_{step}.npy"), tg.numpy().astype(np.int32))
    summary = [f"loss {loss.item():.6f}"]
    for case in MUON_CASES:
        losses = run_case(case, c, p, batches, table=optim_table(c), step_loss=mla_step_loss, heads=attention_heads(c))
        np.save(os.path.join(d, f"traj_losses.{case['name']}.npy"), np.array(losses, dtype=np.float64))
        summary.append(f"{case['name']} {losses[0]:.4f} -> {losses[-1]:.4f}")
    tau = QK_CLIP["tau"][name]
    losses, max_logits, layer_max, clipped = run_qk_clip(c, p, batches, tau, QK_CLIP["alpha"], QK_CLIP["config"])
    np.save(os.path.join(d, "traj_losses.qk_clip.npy"), np.array(losses, dtype=np.float64))
    np.save(os.path.join(d, "traj_max_logit.qk_clip.npy"), np.array(max_logits, dtype=np.float64))
    np.save(os.path.join(d, "traj_layer_max_logit.qk_clip.npy"), np.array(layer_max, dtype=np.float64))
    np.save(os.path.join(d, "traj_clipped.qk_clip.npy"), np.array(clipped, dtype=np.float64))
    summary.append(f"qk_clip at {tau}: max logits {[round(m, 3) for m in max_logits]}, clipped {clipped}")
    with open(os.path.join(d, "cases.json"), "w") as f:
        json.dump(dict(steps=STEPS, cases=MUON_CASES, qk_clip=dict(tau=tau, alpha=QK_CLIP["alpha"],
                                                                    config=QK_CLIP["config"])), f, indent=1)
    return "; ".join(summary)


def gqa_forward(p, c, tokens, targets):
    """Llama's blocks (llama_reference.py) with YaRN's cos and sin."""
    T = tokens.shape[1]
    cos, sin = cos_sin(c, T, c["d_model"] // c["n_head"], p["model.embed_tokens.weight"].dtype)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    x = p["model.embed_tokens.weight"][tokens]
    for l in range(c["n_layer"]):
        pre = f"model.layers.{l}"
        h = attention(p, pre, x, c, cos, sin, mask)
        m = rms_norm(h, p[f"{pre}.post_attention_layernorm.weight"], c["norm_eps"])
        x = h + swiglu(m, p[f"{pre}.mlp.gate_proj.weight"], p[f"{pre}.mlp.up_proj.weight"],
                       p[f"{pre}.mlp.down_proj.weight"])
    return head_loss(p, c, x, targets)


def write_yarn_variant(out, name, c, gen):
    """model.safetensors, config.json, a batch, the logits, the loss and every gradient."""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    mla_model = "mla" in c
    p = init_params(param_table(c), gen) if mla_model else llama_init_params(c, gen)
    write_safetensors(os.path.join(d, "model.safetensors"), p)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(c, batch_size=B), f)
    tokens, targets = batch(c, gen, torch.randperm(c["vocab_size"], generator=gen))
    np.save(os.path.join(d, "tokens.npy"), tokens.numpy().astype(np.int32))
    np.save(os.path.join(d, "targets.npy"), targets.numpy().astype(np.int32))
    p64 = {n: t.detach().double().requires_grad_(True) for n, t in p.items()}
    logits, loss = (forward if mla_model else gqa_forward)(p64, c, tokens, targets)
    loss.backward()
    np.save(os.path.join(d, "logits.npy"), logits.detach().float().numpy())
    np.save(os.path.join(d, "loss.npy"), np.array([loss.item()], dtype=np.float64))
    for n, t in p64.items():
        np.save(os.path.join(d, f"grad.{n}.npy"), t.grad.float().numpy())
    return f"loss {loss.item():.6f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20250839)
    summaries = {name: write_variant(args.out, name, cfg, gen) for name, cfg in VARIANTS.items()}
    summaries.update({name: write_yarn_variant(args.out, name, c, gen) for name, c in YARN_VARIANTS.items()})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(BASE, batch_size=B, variants=list(VARIANTS)), f)
    print(f"wrote MLA reference to {args.out}: " + " | ".join(f"{n}: {s}" for n, s in summaries.items()))


if __name__ == "__main__":
    main()
