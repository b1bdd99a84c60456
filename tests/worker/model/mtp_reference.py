#!/usr/bin/python3
"""Golden reference for multi-token prediction (MTP) as DeepSeek-V3's technical report describes it
(§2.2), written from that description, not from precon's code.

D sequential modules after the main model. Module k (1..D) at position i combines the previous depth's
representation h^{k-1}_i (h^0: the main model's last hidden state, before its final norm) with the
embedding of token t_{i+k}: h'_i = M_k [RMSNorm(Emb(t_{i+k})) ; RMSNorm(h^{k-1}_i)], M_k a (C, 2C)
projection (eh_proj; its input ordered as its name says, embedding then hidden, as DeepseekV3
checkpoints store it), then one transformer block of the model's kind over the positions
1..T-k: h^k = TRM_k(h'). The output head (and the embedding) are the main model's, shared; module k's
logits are head(RMSNorm_k(h^k_i)) and predict t_{i+k+1}; its loss is the mean cross-entropy over the
positions whose target exists (an ignored target, -1, stays ignored). The training objective is
main loss + λ · mean_k(loss_k). Here each module simply runs on the truncated sequence of T - k
positions (the rotary positions 0..T-k-1), which is what causal attention over the full length
computes at those positions. Plain torch, fp64 arithmetic on fp32 weights.

Hugging Face DeepseekV3 names: module k's tensors at model.layers.{n_layer + k - 1}: enorm, hnorm,
eh_proj, the block's usual names, shared_head.norm (embed_tokens and shared_head.head are the main
model's here, not copies).

Variants, each in its own directory: gqa/ (Llama's grouped-query attention, D = 1), mla/ (multi-head
latent attention with a query latent, D = 1), chain/ (grouped-query attention, D = 2, tied embedding),
moe/ (MLA, the first layer dense, then sigmoid-routed experts plus a shared one, the MTP block a
mixture of experts as the last layer is; no sequence-wise balance loss). Each: model.safetensors,
config.json, a batch, the main logits and loss, the mean MTP loss, every gradient of the training
objective; gqa/ and mla/ also 12-step AdamW and Muon trajectories of (main loss, MTP loss).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "optim"))  # optim_reference
import deepseek_moe_reference as dsm  # noqa: E402
import llama_reference as llr  # noqa: E402
import mla_reference as mlr  # noqa: E402
from gpt_reference import write_safetensors  # noqa: E402

B = 3
LAMBDA = 0.3
TRAJECTORY_CASES = ("adamw", "muon")
GQA = dict(llr.CFG)
MLA = dict(mlr.BASE, mla=mlr.VARIANTS["q_lora"])
MOE = dict(dsm.CFG, moe=dict(dsm.CFG["moe"], seq_aux_loss_coeff=0.0))
VARIANTS = {
    "gqa": dict(GQA, mtp_layers=1, mtp_loss_coeff=LAMBDA),
    "mla": dict(MLA, mtp_layers=1, mtp_loss_coeff=LAMBDA),
    "chain": dict(GQA, mtp_layers=2, mtp_loss_coeff=0.5, tie_embeddings=1),
    "moe": dict(MOE, mtp_layers=1, mtp_loss_coeff=LAMBDA),
}


def base_table(c):
    """(name, shape, kind, fan_in, fan_out, qkv_blocks) of the model without MTP, for n_layer blocks."""
    if "moe" in c:
        t = dsm.param_table(c)
    elif "mla" in c:
        t = mlr.optim_table(c)
    else:
        t = llr.param_table(c)
    return [row for row in t if not (c["tie_embeddings"] and row[0] == "lm_head.weight")]


def param_table(c):
    """The model's rows, then module k's: enorm, hnorm, eh_proj, its block's, shared_head.norm."""
    C, L, D = c["d_model"], c["n_layer"], c["mtp_layers"]
    t = base_table(c)
    longer = base_table(dict(c, n_layer=L + D))
    for l in range(L, L + D):
        p = f"model.layers.{l}"
        t.append((f"{p}.enorm.weight", (C,), "norm", 0, 0, 1))
        t.append((f"{p}.hnorm.weight", (C,), "norm", 0, 0, 1))
        t.append((f"{p}.eh_proj.weight", (C, 2 * C), "matrix", 2 * C, C, 1))
        t += [row for row in longer if row[0].startswith(p + ".")]
        t.append((f"{p}.shared_head.norm.weight", (C,), "norm", 0, 0, 1))
    return t


def block(p, c, l, x):
    """Block l (the model's kind of attention and MLP) on x (B, T', C)."""
    Bn, T, C = x.shape
    pre, eps = f"model.layers.{l}", c["norm_eps"]
    if "mla" in c:
        x = x + mlr.mla(p, pre, rms_norm(x, p[f"{pre}.input_layernorm.weight"], eps), c)
    else:
        cos, sin, mask = llr.rope_and_mask(c, T, x.dtype)
        x = llr.attention(p, pre, x, c, cos, sin, mask)
    m = rms_norm(x, p[f"{pre}.post_attention_layernorm.weight"], eps)
    if "moe" in c and l >= c["moe"]["first_dense_layers"]:
        y, _, _ = dsm.moe_mlp(p, pre, m.reshape(Bn * T, C), c, Bn, T)
        return x + y.view(Bn, T, C)
    return x + llr.swiglu(m, p[f"{pre}.mlp.gate_proj.weight"], p[f"{pre}.mlp.up_proj.weight"],
                          p[f"{pre}.mlp.down_proj.weight"])


rms_norm = llr.rms_norm


def cross_entropy(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)


def forward(p, c, tokens, targets):
    """(main logits, main loss, mean MTP loss)."""
    eps, L, T = c["norm_eps"], c["n_layer"], tokens.shape[1]
    emb = p["model.embed_tokens.weight"]
    head = emb if c["tie_embeddings"] else p["lm_head.weight"]
    h = emb[tokens]
    for l in range(L):
        h = block(p, c, l, h)
    logits = rms_norm(h, p["model.norm.weight"], eps) @ head.T
    main = cross_entropy(logits, targets)
    mtp = []
    for k in range(1, c["mtp_layers"] + 1):
        pre = f"model.layers.{L + k - 1}"
        # Positions i = 0 .. T-k-1: token t_{i+k} is tokens[i+k]; its successor t_{i+k+1} is targets[i+k].
        e = rms_norm(emb[tokens[:, k:]], p[f"{pre}.enorm.weight"], eps)
        hn = rms_norm(h[:, :T - k], p[f"{pre}.hnorm.weight"], eps)
        h = block(p, c, L + k - 1, torch.cat([e, hn], dim=-1) @ p[f"{pre}.eh_proj.weight"].T)
        mtp_logits = rms_norm(h, p[f"{pre}.shared_head.norm.weight"], eps) @ head.T
        mtp.append(cross_entropy(mtp_logits, targets[:, k:]))
    return logits, main, torch.stack(mtp).mean()


def step_loss(params, c, tokens, targets):
    _, main, mtp = forward(params, c, tokens, targets)
    return main + c["mtp_loss_coeff"] * mtp, (main.item(), mtp.item())


def heads_of(c):
    """Every block's attention heads (the modules' too), as the reference optimizers take them."""
    longer = dict(c, n_layer=c["n_layer"] + c["mtp_layers"])
    return mlr.attention_heads(longer) if "mla" in c else llr.attention_heads(longer)


def init_params(c, table, gen):
    if "moe" in c:
        return dsm.init_params(table, gen)
    return llr.init_params(c, gen, table)


def write_variant(out, name, c, gen):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    table = param_table(c)
    p = init_params(c, table, gen)
    write_safetensors(os.path.join(d, "model.safetensors"), p)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(c, batch_size=B), f)
    successor = torch.randperm(c["vocab_size"], generator=gen)
    tokens, targets = llr.batch(c, gen, successor)
    np.save(os.path.join(d, "tokens.npy"), tokens.numpy().astype(np.int32))
    np.save(os.path.join(d, "targets.npy"), targets.numpy().astype(np.int32))
    p64 = {n: t.detach().double().requires_grad_(t.requires_grad) for n, t in p.items()}
    logits, main, mtp = forward(p64, c, tokens, targets)
    (main + c["mtp_loss_coeff"] * mtp).backward()
    np.save(os.path.join(d, "logits.npy"), logits.detach().float().numpy())
    np.save(os.path.join(d, "loss.npy"), np.array([main.item()], dtype=np.float64))
    np.save(os.path.join(d, "mtp_loss.npy"), np.array([mtp.item()], dtype=np.float64))
    for n, t in p64.items():
        g = t.grad if t.grad is not None else torch.zeros_like(t)
        np.save(os.path.join(d, f"grad.{n}.npy"), g.float().numpy())
    summary = f"loss {main.item():.5f} mtp {mtp.item():.5f}"
    if name not in ("gqa", "mla"):
        return summary
    batches = [llr.batch(c, gen, successor) for _ in range(llr.STEPS)]
    for step, (tk, tg) in enumerate(batches):
        np.save(os.path.join(d, f"traj_tokens_{step}.npy"), tk.numpy().astype(np.int32))
        np.save(os.path.join(d, f"traj_targets_{step}.npy"), tg.numpy().astype(np.int32))
    cases = [k for k in llr.CASES if k["name"] in TRAJECTORY_CASES]
    for case in cases:
        records = llr.run_case(case, c, p, batches, table=table, step_loss=step_loss, heads=heads_of(c))
        np.save(os.path.join(d, f"traj_losses.{case['name']}.npy"), np.array([r[0] for r in records]))
        np.save(os.path.join(d, f"traj_mtp.{case['name']}.npy"), np.array([r[1] for r in records]))
        summary += f"; {case['name']} {records[0][0]:.4f}/{records[0][1]:.4f} -> {records[-1][0]:.4f}/{records[-1][1]:.4f}"
    with open(os.path.join(d, "cases.json"), "w") as f:
        json.dump(dict(steps=llr.STEPS, cases=cases), f, indent=1)
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20251206)
    summaries = {name: write_variant(args.out, name, c, gen) for name, c in VARIANTS.items()}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(batch_size=B, variants=list(VARIANTS)), f)
    print(f"wrote MTP reference to {args.out}: " + " | ".join(f"{n}: {s}" for n, s in summaries.items()))


if __name__ == "__main__":
    main()
