#!/usr/bin/python3
"""Golden reference for the mixture-of-experts Llama: llama_reference.py's model (RMSNorm, RoPE with
rotate_half, grouped-query attention, no biases, untied head) with the MLP of every layer
l >= moe.first_dense_layers replaced by a dropless top-k mixture of SwiGLU experts plus an optional
shared SwiGLU expert (Hugging Face Qwen-MoE names), and the Switch-style load-balancing loss.
Written from the specification in plain torch ops, independent of the C++ code.

Writes into --out the same files as llama_reference.py (model.safetensors in table order,
config.json, tokens.npy, targets.npy, logits.npy, loss.npy, grad.<name>.npy, traj_tokens_<i>.npy,
traj_targets_<i>.npy, traj_losses.<case>.npy, cases.json) plus aux.npy (the golden batch's aux loss),
traj_aux.<case>.npy (aux per step) and load.npy (per MoE layer, per expert, the fraction of the
golden batch's top-k assignments it got). loss.npy and traj_losses hold the cross-entropy only;
the gradients and the optimizer steps use the total loss = cross-entropy + aux.

--self-check compares the MoE forward and gradients with a second, dense implementation (every
expert on every token, masked) and checks the aux loss, the router gradient and the trajectories.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "optim"))  # optim_reference
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import write_safetensors  # noqa: E402
from llama_reference import (CASES, STEPS, attention, batch, head_loss, init_params, rms_norm,  # noqa: E402
                             rope_and_mask, run_case, swiglu, to_adamw)

CFG = dict(arch="llama", n_layer=2, n_head=4, n_kv_head=2, d_model=32, ffn_hidden=48, seq_len=32, vocab_size=67,
           rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=0,
           moe=dict(experts=4, top_k=2, ffn_hidden=24, shared_experts=1, first_dense_layers=0, aux_loss_coeff=1e-2))
B = 2
SEED = 20240612


def is_moe_layer(c, l):
    return l >= c["moe"]["first_dense_layers"]


def param_table(c):
    """(name, shape, kind, fan_in, fan_out, qkv_blocks) in HF Qwen-MoE's names and order; Linear (out, in)."""
    C, V, F_ = c["d_model"], c["vocab_size"], c["ffn_hidden"]
    moe = c["moe"]
    E, FE, FS = moe["experts"], moe["ffn_hidden"], moe["shared_experts"] * moe["ffn_hidden"]
    hd = C // c["n_head"]
    t = [("model.embed_tokens.weight", (V, C), "embedding", 0, 0, 1)]

    def linear(name, fin, fout, kind="matrix"):
        t.append((name, (fout, fin), kind, fin, fout, 1))

    def swiglu_params(prefix, width):
        linear(f"{prefix}.gate_proj.weight", C, width)
        linear(f"{prefix}.up_proj.weight", C, width)
        linear(f"{prefix}.down_proj.weight", width, C)

    for l in range(c["n_layer"]):
        p = f"model.layers.{l}"
        t.append((f"{p}.input_layernorm.weight", (C,), "norm", 0, 0, 1))
        linear(f"{p}.self_attn.q_proj.weight", C, c["n_head"] * hd)
        linear(f"{p}.self_attn.k_proj.weight", C, c["n_kv_head"] * hd)
        linear(f"{p}.self_attn.v_proj.weight", C, c["n_kv_head"] * hd)
        linear(f"{p}.self_attn.o_proj.weight", c["n_head"] * hd, C)
        t.append((f"{p}.post_attention_layernorm.weight", (C,), "norm", 0, 0, 1))
        if not is_moe_layer(c, l):
            swiglu_params(f"{p}.mlp", F_)
            continue
        linear(f"{p}.mlp.gate.weight", C, E, kind="router")
        for e in range(E):
            swiglu_params(f"{p}.mlp.experts.{e}", FE)
        if FS > 0:
            swiglu_params(f"{p}.mlp.shared_expert", FS)
    t.append(("model.norm.weight", (C,), "norm", 0, 0, 1))
    t.append(("lm_head.weight", (V, C), "embedding", 0, 0, 1))
    return t


def expert(p, prefix, x):
    return swiglu(x, p[f"{prefix}.gate_proj.weight"], p[f"{prefix}.up_proj.weight"], p[f"{prefix}.down_proj.weight"])


def aux_and_load(moe, probs, counts):
    """aux_l = coeff · E · Σ_e f_e · P_e: f_e = counts_e / (N·k), a constant; P_e = mean_n probs[n, e]."""
    N, E = probs.shape
    f = (counts / (N * moe["top_k"])).detach()
    P = probs.mean(dim=0)
    return moe["aux_loss_coeff"] * E * (f * P).sum(), f


def moe_mlp(p, pre, m, c):
    """The dropless MoE MLP on m (N, C): index_select the tokens of each expert, one matmul chain per
    expert, index_add back weighted by the renormalised top-k router probabilities.
    Returns (output (N, C), aux loss of the layer, f (E,): each expert's share of the assignments)."""
    moe = c["moe"]
    E, k = moe["experts"], moe["top_k"]
    N = m.shape[0]
    probs = (m @ p[f"{pre}.mlp.gate.weight"].T).softmax(dim=-1)  # (N, E), in the weights' dtype
    # top-k by a stable descending sort: among equal probabilities the lower expert index comes first.
    order = torch.sort(probs, dim=-1, descending=True, stable=True).indices
    chosen = order[:, :k]  # (N, k) expert ids
    top = probs.gather(1, chosen)  # (N, k)
    w = top / top.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(m)
    counts = torch.zeros(E, dtype=m.dtype)
    for e in range(E):
        token, slot = (chosen == e).nonzero(as_tuple=True)
        counts[e] = token.numel()
        # an expert with no tokens still runs (on 0 rows), so that its weights get a zero gradient, not None.
        y = expert(p, f"{pre}.mlp.experts.{e}", m.index_select(0, token))
        out = out.index_add(0, token, w[token, slot].unsqueeze(-1) * y)
    if moe["shared_experts"] > 0:
        out = out + expert(p, f"{pre}.mlp.shared_expert", m)
    aux, f = aux_and_load(moe, probs, counts)
    return out, aux, f


def moe_mlp_dense(p, pre, m, c):
    """The same MoE written another way, for --self-check: every expert on every token, then a (N, E)
    gate matrix that is zero off the top-k; top-k by rank (count of experts ahead of each one)."""
    moe = c["moe"]
    E, k = moe["experts"], moe["top_k"]
    logits = torch.einsum("nc,ec->ne", m, p[f"{pre}.mlp.gate.weight"])
    probs = torch.exp(logits - logits.max(dim=-1, keepdim=True).values)
    probs = probs / probs.sum(dim=-1, keepdim=True)
    idx = torch.arange(E)
    ahead = (probs[:, None, :] > probs[:, :, None]) | \
            ((probs[:, None, :] == probs[:, :, None]) & (idx[None, None, :] < idx[None, :, None]))
    selected = (ahead.sum(dim=-1) < k).to(m.dtype)  # (N, E): 1 where expert e is among token n's top-k
    gates = probs * selected
    gates = gates / gates.sum(dim=-1, keepdim=True)
    ys = torch.stack([expert(p, f"{pre}.mlp.experts.{e}", m) for e in range(E)], dim=1)  # (N, E, C)
    out = (gates[:, :, None] * ys).sum(dim=1)
    if moe["shared_experts"] > 0:
        out = out + expert(p, f"{pre}.mlp.shared_expert", m)
    aux, f = aux_and_load(moe, probs, selected.sum(dim=0))
    return out, aux, f


def forward(p, c, tokens, targets, mlp=moe_mlp):
    """(logits, cross-entropy, aux = Σ over MoE layers, load (n_moe_layers, E))."""
    Bn, T = tokens.shape
    C = c["d_model"]
    cos, sin, mask = rope_and_mask(c, T, p["model.embed_tokens.weight"].dtype)
    x = p["model.embed_tokens.weight"][tokens]
    aux, load = x.new_zeros(()), []
    for l in range(c["n_layer"]):
        pre = f"model.layers.{l}"
        h = attention(p, pre, x, c, cos, sin, mask)
        m = rms_norm(h, p[f"{pre}.post_attention_layernorm.weight"], c["norm_eps"])
        if is_moe_layer(c, l):
            y, aux_l, f = mlp(p, pre, m.reshape(Bn * T, C), c)
            x = h + y.view(Bn, T, C)
            aux = aux + aux_l
            load.append(f)
        else:
            x = h + swiglu(m, p[f"{pre}.mlp.gate_proj.weight"], p[f"{pre}.mlp.up_proj.weight"],
                           p[f"{pre}.mlp.down_proj.weight"])
    logits, ce = head_loss(p, c, x, targets)
    return logits, ce, aux, torch.stack(load) if load else x.new_zeros((0, c["moe"]["experts"]))


def moe_step_loss(params, c, tokens, targets):
    """Differentiate the total loss, record (cross-entropy, aux)."""
    _, ce, aux, _ = forward(params, c, tokens, targets)
    return ce + aux, (ce.item(), aux.item())


def moe_to_adamw(kind, cfg):
    """llama_reference's routing, with the router explicitly on AdamW in every case (shampoo_routed
    would send an unknown kind to AdamW anyway; Muon's rule takes only kind "matrix")."""
    return kind == "router" or to_adamw(kind, cfg)


def trajectories(c, p, batches):
    """{case name: (cross-entropy per step, aux per step)}."""
    table = param_table(c)
    out = {}
    for case in CASES:
        rec = run_case(case, c, p, batches, table=table, step_loss=moe_step_loss, routed_to_adamw=moe_to_adamw)
        out[case["name"]] = ([r[0] for r in rec], [r[1] for r in rec])
    return out


def setup(c):
    gen = torch.Generator().manual_seed(SEED)
    p = init_params(c, gen, param_table(c))
    successor = torch.randperm(c["vocab_size"], generator=gen)
    tokens, targets = batch(c, gen, successor, B)
    batches = [batch(c, gen, successor, B) for _ in range(STEPS)]
    return p, tokens, targets, batches


def golden(p, c, tokens, targets, mlp=moe_mlp):
    """The golden pass: fp64 arithmetic on the fp32 weights; gradients of the total loss."""
    p64 = {n: t.detach().double().requires_grad_(True) for n, t in p.items()}
    logits, ce, aux, load = forward(p64, c, tokens, targets, mlp)
    (ce + aux).backward()
    return logits.detach(), ce.detach(), aux.detach(), load, {n: t.grad for n, t in p64.items()}


def self_check(c):
    p, tokens, targets, batches = setup(c)
    ok = True

    def check(what, cond, detail):
        nonlocal ok
        ok &= bool(cond)
        print(f"  {'ok  ' if cond else 'FAIL'} {what}: {detail}")

    a = golden(p, c, tokens, targets, moe_mlp)
    b = golden(p, c, tokens, targets, moe_mlp_dense)
    err = max([(a[i] - b[i]).abs().max().item() for i in range(4)] +
              [(a[4][n] - b[4][n]).abs().max().item() for n in a[4]])
    check("index_select MoE vs dense masked MoE (logits, loss, aux, load, every gradient), float64", err < 1e-12,
          f"max abs diff {err:.3e}")
    # One MoE layer alone with an expert that no token reaches (the Shampoo trajectory meets one, at step 5):
    # positive inputs and an all-negative router row keep the last expert out of every top-k.
    gen = torch.Generator().manual_seed(SEED + 1)
    pre, E = "model.layers.0", c["moe"]["experts"]
    q = {n: t.detach().double().clone() for n, t in p.items() if n.startswith(pre + ".mlp.")}
    q[f"{pre}.mlp.gate.weight"][E - 1] = -1.0
    m = torch.rand(64, c["d_model"], generator=gen, dtype=torch.float64) + 0.1
    outs = []
    for mlp in (moe_mlp, moe_mlp_dense):
        qq = {n: t.clone().requires_grad_(True) for n, t in q.items()}
        y, aux_l, f = mlp(qq, pre, m, c)
        ((y * y).sum() + aux_l).backward()
        outs.append((y.detach(), aux_l.detach(), f, {n: t.grad for n, t in qq.items()}))
    (ya, auxa, fa, ga), (yb, auxb, fb, gb) = outs
    err0 = max([(ya - yb).abs().max().item(), (auxa - auxb).abs().item(), (fa - fb).abs().max().item()] +
               [(ga[n] - gb[n]).abs().max().item() for n in ga])
    zero = all(ga[f"{pre}.mlp.experts.{E - 1}.{w}_proj.weight"].abs().max().item() == 0 for w in ("gate", "up", "down"))
    check("an expert with no tokens: both implementations agree, its weights' gradients are zero",
          fa[E - 1].item() == 0 and zero and err0 < 1e-12, f"load {fa.tolist()}, max abs diff {err0:.3e}")
    n_moe = sum(is_moe_layer(c, l) for l in range(c["n_layer"]))
    coeff = c["moe"]["aux_loss_coeff"]
    per_layer = a[2].item() / (coeff * n_moe)
    check("aux at init ≈ coeff · n_moe_layers · ~1", 0.9 < per_layer < 1.5,
          f"aux {a[2].item():.6f} = {coeff} · {n_moe} · {per_layer:.4f}")
    check("load rows sum to 1", torch.allclose(a[3].sum(-1), torch.ones(n_moe, dtype=a[3].dtype)),
          f"load {a[3].tolist()}")
    routers = [n for n, _, kind, *_ in param_table(c) if kind == "router"]
    c0 = dict(c, moe=dict(c["moe"], aux_loss_coeff=0.0))
    g0 = golden(p, c0, tokens, targets)[4]
    for n in routers:
        norm, diff = a[4][n].norm().item(), (a[4][n] - g0[n]).norm().item()
        check(f"{n} gradient non-zero and moved by aux", norm > 0 and diff > 1e-6 * norm,
              f"|g| {norm:.4e}, |g - g(coeff=0)| {diff:.4e}, |g(coeff=0)| {g0[n].norm().item():.4e}")
    for name, (ce, aux) in trajectories(c, p, batches).items():
        check(f"{name} cross-entropy falls over {STEPS} steps", ce[-1] < ce[0] - 0.1,
              f"{ce[0]:.4f} -> {ce[-1]:.4f}, aux {aux[0]:.5f} -> {aux[-1]:.5f}")
    print("self-check " + ("passed" if ok else "FAILED"))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--self-check", action="store_true")
    args = ap.parse_args()
    if not args.out and not args.self_check:
        ap.error("--out is required (unless --self-check)")
    torch.set_num_threads(1)
    c = CFG
    if args.self_check and not self_check(c):
        sys.exit(1)
    if not args.out:
        return
    os.makedirs(args.out, exist_ok=True)
    p, tokens, targets, batches = setup(c)
    write_safetensors(os.path.join(args.out, "model.safetensors"), p)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(c, batch_size=B), f)

    np.save(os.path.join(args.out, "tokens.npy"), tokens.numpy().astype(np.int32))
    np.save(os.path.join(args.out, "targets.npy"), targets.numpy().astype(np.int32))
    logits, ce, aux, load, grads = golden(p, c, tokens, targets)
    np.save(os.path.join(args.out, "logits.npy"), logits.float().numpy())
    np.save(os.path.join(args.out, "loss.npy"), np.array([ce.item()], dtype=np.float64))
    np.save(os.path.join(args.out, "aux.npy"), np.array([aux.item()], dtype=np.float64))
    np.save(os.path.join(args.out, "load.npy"), load.numpy().astype(np.float64))
    for name, g in grads.items():
        np.save(os.path.join(args.out, f"grad.{name}.npy"), g.float().numpy())

    for step, (tk, tg) in enumerate(batches):
        np.save(os.path.join(args.out, f"traj_tokens_{step}.npy"), tk.numpy().astype(np.int32))
        np.save(os.path.join(args.out, f"traj_targets_{step}.npy"), tg.numpy().astype(np.int32))
    summary = []
    for name, (losses, auxes) in trajectories(c, p, batches).items():
        np.save(os.path.join(args.out, f"traj_losses.{name}.npy"), np.array(losses, dtype=np.float64))
        np.save(os.path.join(args.out, f"traj_aux.{name}.npy"), np.array(auxes, dtype=np.float64))
        summary.append(f"{name} {losses[0]:.4f} -> {losses[-1]:.4f}")
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(dict(steps=STEPS, cases=CASES), f, indent=1)
    print(f"wrote MoE reference to {args.out}: loss {ce.item():.6f} aux {aux.item():.6f}; " + ", ".join(summary))


if __name__ == "__main__":
    main()
