#!/usr/bin/python3
"""Golden reference for the Llama model: a PyTorch implementation of the published architecture
(Hugging Face LlamaForCausalLM: RMSNorm, RoPE with rotate_half, grouped-query attention, SwiGLU
MLP, no biases, untied head), in plain torch ops and independent of the C++ code.

Builds a small Llama with random weights (HF names; every Linear stored (out, in)), writes them
as model.safetensors (gpt_reference.py's writer), then a batch, the logits, the loss and every
gradient as .npy files for test_llama_reference.cpp, and a 12-step loss trajectory for each of
AdamW, Muon (with and without split heads) and Shampoo (optim_reference.py's implementations, routed
as precon routes them), and
one of AdamW with QK-clip (MuonClip's clip, Kimi K2: after each update, the query and key weights
of every kv group whose largest attention logit in the step passed tau are rescaled by
gamma^alpha and gamma^(1 - alpha), gamma = tau / that logit).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "optim"))  # optim_reference
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import write_safetensors  # noqa: E402
from optim_reference import (TorchAdamW, adamw_group_hyper, muon_step, shampoo_block_step,  # noqa: E402
                             shampoo_routed, split)

CFG = dict(arch="llama", n_layer=2, n_head=4, n_kv_head=2, d_model=32, ffn_hidden=48, seq_len=16, vocab_size=67,
           rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=0)
B = 3
STEPS = 12

# Constant lr (lr_scales all 1), no clipping (grad_scale 1), weight decay 0.1 everywhere; the
# AdamW-routed tensors of the muon and shampoo cases (embeddings, head, norms) use adamw.lr.
ADAMW_PART = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8)
CASES = [
    dict(name="adamw", config=dict(name="adamw", lr=3e-3, weight_decay=0.1,
                                   adamw=dict(beta1=0.9, beta2=0.95, eps=1e-8))),
    dict(name="muon", config=dict(name="muon", lr=0.02, weight_decay=0.1, adamw=ADAMW_PART,
                                  muon=dict(momentum=0.95, nesterov=True, momentum_form="ema", ns_steps=5,
                                            coefficients="keller", scale="shape", split_qkv=True))),
    dict(name="muon_split_heads", config=dict(name="muon", lr=0.02, weight_decay=0.1, adamw=ADAMW_PART,
                                              muon=dict(momentum=0.95, nesterov=True, momentum_form="ema",
                                                        ns_steps=5, coefficients="keller", scale="shape",
                                                        split_heads=True))),
    dict(name="shampoo", config=dict(name="shampoo", lr=0.02, weight_decay=0.1, adamw=ADAMW_PART,
                                     shampoo=dict(beta1=0.9, beta2=1.0, epsilon=1e-6, precondition_frequency=1,
                                                  start_preconditioning_step=1, grafting="adam",
                                                  grafting_beta2=0.999, grafting_epsilon=1e-8))),
]


def param_table(c):
    """(name, shape, kind, fan_in, fan_out, qkv_blocks): HF's names, in HF's order; Linear (out, in)."""
    C, V, F_ = c["d_model"], c["vocab_size"], c["ffn_hidden"]
    hd = C // c["n_head"]
    t = [("model.embed_tokens.weight", (V, C), "embedding", 0, 0, 1)]

    def linear(name, fin, fout):
        t.append((name, (fout, fin), "matrix", fin, fout, 1))

    for l in range(c["n_layer"]):
        p = f"model.layers.{l}"
        t.append((f"{p}.input_layernorm.weight", (C,), "norm", 0, 0, 1))
        linear(f"{p}.self_attn.q_proj.weight", C, c["n_head"] * hd)
        linear(f"{p}.self_attn.k_proj.weight", C, c["n_kv_head"] * hd)
        linear(f"{p}.self_attn.v_proj.weight", C, c["n_kv_head"] * hd)
        linear(f"{p}.self_attn.o_proj.weight", c["n_head"] * hd, C)
        t.append((f"{p}.post_attention_layernorm.weight", (C,), "norm", 0, 0, 1))
        linear(f"{p}.mlp.gate_proj.weight", C, F_)
        linear(f"{p}.mlp.up_proj.weight", C, F_)
        linear(f"{p}.mlp.down_proj.weight", F_, C)
    t.append(("model.norm.weight", (C,), "norm", 0, 0, 1))
    t.append(("lm_head.weight", (V, C), "embedding", 0, 0, 1))
    return t


def init_params(c, gen, table=None):
    """Norms 1 + 0.1·randn, everything else 0.1·randn, drawn in table order (param_table(c) by default)."""
    params = {}
    for name, shape, kind, *_ in (param_table(c) if table is None else table):
        if kind == "norm":
            p = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:
            p = 0.1 * torch.randn(shape, generator=gen)
        params[name] = p.float().requires_grad_(True)
    return params


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_cos_sin(T, hd, theta, dtype):
    """HF's default rotary embedding: inv_freq over even dims, emb = cat(freqs, freqs); in fp64, then rounded."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    """(B, NKV, T, hd) -> (B, NKV·n_rep, T, hd): kv head g serves query heads g·n_rep … (g+1)·n_rep − 1."""
    return x.repeat_interleave(n_rep, dim=1)


def attention(p, pre, x, c, cos, sin, mask):
    """x + o_proj(causal GQA attention of rms_norm(x, input_layernorm)) for layer prefix pre; x is (B, T, C)."""
    Bn, T, _ = x.shape
    NH, NKV = c["n_head"], c["n_kv_head"]
    hd = c["d_model"] // NH
    a = rms_norm(x, p[f"{pre}.input_layernorm.weight"], c["norm_eps"])
    q = (a @ p[f"{pre}.self_attn.q_proj.weight"].T).view(Bn, T, NH, hd).transpose(1, 2)
    k = (a @ p[f"{pre}.self_attn.k_proj.weight"].T).view(Bn, T, NKV, hd).transpose(1, 2)
    v = (a @ p[f"{pre}.self_attn.v_proj.weight"].T).view(Bn, T, NKV, hd).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k, v = repeat_kv(k, NH // NKV), repeat_kv(v, NH // NKV)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(Bn, T, NH * hd)
    return x + y @ p[f"{pre}.self_attn.o_proj.weight"].T


def swiglu(m, gate_w, up_w, down_w):
    """down(silu(gate(m)) * up(m)), every weight stored (out, in)."""
    gate = F.silu(m @ gate_w.T)
    return (gate * (m @ up_w.T)) @ down_w.T


def rope_and_mask(c, T, dtype):
    """cos, sin (T, hd), broadcast over (B, heads), and the causal mask (True above the diagonal)."""
    cos, sin = rope_cos_sin(T, c["d_model"] // c["n_head"], c["rope_theta"], dtype)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return cos, sin, mask


def head_loss(p, c, x, targets):
    """Final RMSNorm, untied lm_head, mean cross-entropy over the targets that are not -1."""
    x = rms_norm(x, p["model.norm.weight"], c["norm_eps"])
    logits = x @ p["lm_head.weight"].T
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
    return logits, loss


def forward(p, c, tokens, targets):
    T = tokens.shape[1]
    cos, sin, mask = rope_and_mask(c, T, p["model.embed_tokens.weight"].dtype)
    x = p["model.embed_tokens.weight"][tokens]
    for l in range(c["n_layer"]):
        pre = f"model.layers.{l}"
        h = attention(p, pre, x, c, cos, sin, mask)
        m = rms_norm(h, p[f"{pre}.post_attention_layernorm.weight"], c["norm_eps"])
        x = h + swiglu(m, p[f"{pre}.mlp.gate_proj.weight"], p[f"{pre}.mlp.up_proj.weight"],
                       p[f"{pre}.mlp.down_proj.weight"])
    return head_loss(p, c, x, targets)


def batch(c, gen, successor, bsz=B):
    """Walks of a fixed random successor map from random first tokens: a bigram law the model can
    learn in a few steps, so that every optimizer's loss visibly falls (uniform tokens would not)."""
    data = torch.empty(bsz, c["seq_len"] + 1, dtype=torch.int64)
    data[:, 0] = torch.randint(0, c["vocab_size"], (bsz,), generator=gen)
    for i in range(c["seq_len"]):
        data[:, i + 1] = successor[data[:, i]]
    tokens, targets = data[:, :-1].clone(), data[:, 1:].clone()
    targets[0, 3] = -1  # an ignored position
    return tokens, targets


def to_adamw(kind, cfg):
    """Whether a tensor of this kind takes the AdamW side of the case's optimizer (precon's routing)."""
    name = cfg["name"]
    if name == "adamw":
        return True
    if name == "muon":
        return kind != "matrix"
    return not shampoo_routed(kind, cfg["shampoo"].get("params", "hidden"))


def llama_step_loss(params, c, tokens, targets):
    """(the loss to differentiate, what the trajectory records): both the cross-entropy here."""
    _, loss = forward(params, c, tokens, targets)
    return loss, loss.item()


def attention_heads(c):
    """name -> (heads, on_fan_in) of the attention matrices (optim_reference.muon_step's heads): q_proj's
    query heads and k_proj's, v_proj's kv heads along their outputs, o_proj's query heads along its input."""
    out = {}
    for l in range(c["n_layer"]):
        a = f"model.layers.{l}.self_attn"
        out.update({f"{a}.q_proj.weight": (c["n_head"], False), f"{a}.k_proj.weight": (c["n_kv_head"], False),
                    f"{a}.v_proj.weight": (c["n_kv_head"], False), f"{a}.o_proj.weight": (c["n_head"], True)})
    return out


def run_case(case, c, init, batches, table=None, step_loss=llama_step_loss, routed_to_adamw=to_adamw, heads=None,
             after_step=None):
    """STEPS steps of one case: gradients from the model, updates as optim_reference.run_case makes them,
    with the (out, in) storage of Linear weights (Muon runs on the map itself, Shampoo on the storage).
    table (param_table(c) by default), step_loss, routed_to_adamw and heads (attention_heads(c) by
    default) let another model reuse it; returns step_loss's records, one per step. Rows of kind "buffer"
    take no gradient and no optimizer step; after_step(params, record), when given, runs after each
    step's update (a buffer's own rule)."""
    cfg = case["config"]
    table = param_table(c) if table is None else table
    heads = attention_heads(c) if heads is None else heads
    params = {n: init[n].detach().clone().requires_grad_(kind != "buffer") for n, _, kind, *_ in table}
    name = cfg["name"]
    lr, wd = cfg["lr"], cfg.get("weight_decay", 0.0)
    side = [n for n, _, kind, *_ in table if kind != "buffer" and routed_to_adamw(kind, cfg)]
    adamw = TorchAdamW([params[n] for n in side], adamw_group_hyper(cfg, name == "adamw"))
    states, losses = {}, []
    for t in range(1, STEPS + 1):
        tokens, targets = batches[t - 1]
        for q in params.values():
            q.grad = None
        loss, record = step_loss(params, c, tokens, targets)
        loss.backward()
        losses.append(record)
        g = {n: q.grad.detach().clone() for n, q in params.items() if q.requires_grad}
        with torch.no_grad():
            adamw.step([g[n] for n in side], 1.0)
            for n, shape, kind, fin, fout, qkv in table:
                if n in side or kind == "buffer":
                    continue
                if name == "muon":
                    # muon_step takes Conv1D's (in, out) storage: hand it transposed views of (out, in).
                    muon_step(params[n].T, g[n].T, states.setdefault(n, {}), cfg["muon"], lr, wd, qkv,
                              heads=heads.get(n))
                else:
                    s = cfg["shampoo"]
                    size = s.get("max_preconditioner_dim", 1024)
                    for bi, (r0, rn) in enumerate(split(shape[0], size)):
                        for bj, (c0, cn) in enumerate(split(shape[1], size)):
                            st = states.setdefault((n, bi, bj), {})
                            shampoo_block_step(params[n][r0:r0 + rn, c0:c0 + cn], g[n][r0:r0 + rn, c0:c0 + cn], st,
                                               s, t, lr, wd)
            if after_step is not None:
                after_step(params, record)
    return losses


QK_CLIP = dict(tau=2.5, alpha=0.5, config=dict(name="adamw", lr=2e-2, weight_decay=0.1,
                                                adamw=dict(beta1=0.9, beta2=0.95, eps=1e-8)))


def attention_logit_max(p, c, tokens):
    """(n_layer, n_head): each query head's largest pre-softmax logit q·k/sqrt(hd) over the causal
    pairs of the batch, the residual stream recomputed without gradients."""
    Bn, T = tokens.shape
    NH, NKV = c["n_head"], c["n_kv_head"]
    hd = c["d_model"] // NH
    cos, sin, mask = rope_and_mask(c, T, p["model.embed_tokens.weight"].dtype)
    out = torch.empty(c["n_layer"], NH, dtype=torch.float64)
    with torch.no_grad():
        x = p["model.embed_tokens.weight"][tokens]
        for l in range(c["n_layer"]):
            pre = f"model.layers.{l}"
            a = rms_norm(x, p[f"{pre}.input_layernorm.weight"], c["norm_eps"])
            q = (a @ p[f"{pre}.self_attn.q_proj.weight"].T).view(Bn, T, NH, hd).transpose(1, 2)
            k = (a @ p[f"{pre}.self_attn.k_proj.weight"].T).view(Bn, T, NKV, hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = repeat_kv(k * cos + rotate_half(k) * sin, NH // NKV)
            s = ((q @ k.transpose(-2, -1)) / math.sqrt(hd)).masked_fill(mask, float("-inf"))
            out[l] = s.amax(dim=(0, 2, 3)).double()
            h = attention(p, pre, x, c, cos, sin, mask)
            m = rms_norm(h, p[f"{pre}.post_attention_layernorm.weight"], c["norm_eps"])
            x = h + swiglu(m, p[f"{pre}.mlp.gate_proj.weight"], p[f"{pre}.mlp.up_proj.weight"],
                           p[f"{pre}.mlp.down_proj.weight"])
    return out


def run_qk_clip(c, init, batches, tau, alpha, cfg):
    """STEPS AdamW steps, each followed by QK-clip; per step the loss, the largest logit before the
    clip and the kv groups clipped."""
    table = param_table(c)
    params = {n: init[n].detach().clone().requires_grad_(True) for n, *_ in table}
    names = [n for n, *_ in table]
    adamw = TorchAdamW([params[n] for n in names], adamw_group_hyper(cfg, True))
    NH, NKV = c["n_head"], c["n_kv_head"]
    hd, group = c["d_model"] // NH, NH // NKV
    losses, max_logits, clipped = [], [], []
    for t in range(1, STEPS + 1):
        tokens, targets = batches[t - 1]
        for q in params.values():
            q.grad = None
        _, loss = forward(params, c, tokens, targets)
        loss.backward()
        logits = attention_logit_max(params, c, tokens)
        losses.append(loss.item())
        with torch.no_grad():
            adamw.step([params[n].grad.detach().clone() for n in names], 1.0)
            n_clipped = 0
            for l in range(c["n_layer"]):
                pre = f"model.layers.{l}.self_attn"
                for g in range(NKV):
                    S = logits[l, g * group:(g + 1) * group].max().item()
                    if S <= tau:
                        continue
                    n_clipped += 1
                    gamma = tau / S
                    params[f"{pre}.q_proj.weight"][g * group * hd:(g + 1) * group * hd] *= gamma ** alpha
                    params[f"{pre}.k_proj.weight"][g * hd:(g + 1) * hd] *= gamma ** (1 - alpha)
        max_logits.append(logits.max().item())
        clipped.append(n_clipped)
    return losses, max_logits, clipped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20240611)
    c = CFG
    p = init_params(c, gen)
    write_safetensors(os.path.join(args.out, "model.safetensors"), p)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(c, batch_size=B), f)

    # The golden tensors come from fp64 arithmetic on the fp32 weights, so that the C++ model's
    # fp32 error is all that the comparison measures.
    successor = torch.randperm(c["vocab_size"], generator=gen)
    tokens, targets = batch(c, gen, successor)
    np.save(os.path.join(args.out, "tokens.npy"), tokens.numpy().astype(np.int32))
    np.save(os.path.join(args.out, "targets.npy"), targets.numpy().astype(np.int32))
    p64 = {n: t.detach().double().requires_grad_(True) for n, t in p.items()}
    logits, loss = forward(p64, c, tokens, targets)
    loss.backward()
    np.save(os.path.join(args.out, "logits.npy"), logits.detach().float().numpy())
    np.save(os.path.join(args.out, "loss.npy"), np.array([loss.item()], dtype=np.float64))
    for name, t in p64.items():
        np.save(os.path.join(args.out, f"grad.{name}.npy"), t.grad.float().numpy())

    batches = [batch(c, gen, successor) for _ in range(STEPS)]
    for step, (tk, tg) in enumerate(batches):
        np.save(os.path.join(args.out, f"traj_tokens_{step}.npy"), tk.numpy().astype(np.int32))
        np.save(os.path.join(args.out, f"traj_targets_{step}.npy"), tg.numpy().astype(np.int32))
    summary = []
    for case in CASES:
        losses = run_case(case, c, p, batches)
        np.save(os.path.join(args.out, f"traj_losses.{case['name']}.npy"), np.array(losses, dtype=np.float64))
        summary.append(f"{case['name']} {losses[0]:.4f} -> {losses[-1]:.4f}")
    losses, max_logits, clipped = run_qk_clip(c, p, batches, QK_CLIP["tau"], QK_CLIP["alpha"], QK_CLIP["config"])
    np.save(os.path.join(args.out, "traj_losses.qk_clip.npy"), np.array(losses, dtype=np.float64))
    np.save(os.path.join(args.out, "traj_max_logit.qk_clip.npy"), np.array(max_logits, dtype=np.float64))
    np.save(os.path.join(args.out, "traj_clipped.qk_clip.npy"), np.array(clipped, dtype=np.float64))
    summary.append(f"qk_clip max logits {[round(m, 3) for m in max_logits]}, clipped {clipped}")
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(dict(steps=STEPS, cases=CASES, qk_clip=QK_CLIP), f, indent=1)
    print(f"wrote Llama reference to {args.out}: loss {loss.item():.6f}; " + ", ".join(summary))


if __name__ == "__main__":
    main()
