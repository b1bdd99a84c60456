#!/usr/bin/python3
"""Golden reference for DeepSeek-V3's mixture of experts on the llama family, written from DeepSeek-V3's
technical report (§2.1.2 and §4.2), not from precon's code: multi-head latent attention
(mla_reference.py's), the first layer dense, then fine-grained routed SwiGLU experts plus a shared
one behind a sigmoid router; Hugging Face DeepseekV3's names (mlp.gate, mlp.gate.e_score_correction_bias,
mlp.experts.{e}, mlp.shared_experts).

Routing of a token u with input m: s_i = sigmoid(m · e_i) per routed expert; the top-k experts are
chosen by s_i + b_i, b a per-expert bias that takes no gradient (auxiliary-loss-free balancing); with
node/group-limited routing the experts form n_group equal groups, a group scores the sum of its two
largest s_i + b_i and only the topk_group best groups may be chosen; the chosen experts' gates are
s_i / Σ_chosen s_j times route_scale (routed_scaling_factor). Ties go to the lower index.

Balance: after each optimizer step b_i += γ · sign(mean load − load_i), the loads being the step's
tokens per expert; and the sequence-wise balance loss, per sequence of T tokens,
f_i = E / (K·T) · #{t : i chosen at t}, P_i = mean_t s_i,t / Σ_j s_j,t, L = α Σ_i f_i P_i,
averaged over the sequences and summed over the MoE layers, added to the cross-entropy.

Writes into --out: model.safetensors (table order, the biases non-zero so that they steer the choice),
config.json, tokens.npy, targets.npy, logits.npy, loss.npy (cross-entropy), aux.npy (the balance
loss), counts.npy (per MoE layer, tokens per expert), grad.<name>.npy (of cross-entropy + balance
loss; zero for the biases), traj_tokens_<i>.npy, traj_targets_<i>.npy, and per case (AdamW, Muon
with and without split heads, Shampoo) traj_losses.<case>.npy, traj_aux.<case>.npy and
traj_bias.<case>.npy (every bias after the last step).
"""
import argparse
import copy
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "optim"))  # optim_reference
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import write_safetensors  # noqa: E402
from llama_reference import CASES, STEPS, batch, head_loss, rms_norm, run_case, swiglu, to_adamw  # noqa: E402
from mla_reference import attention_heads, mla  # noqa: E402

CFG = dict(arch="llama", n_layer=2, n_head=4, n_kv_head=0, d_model=32, ffn_hidden=48, seq_len=16, vocab_size=67,
           rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=0,
           mla=dict(q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8),
           moe=dict(experts=8, top_k=2, ffn_hidden=16, shared_experts=1, first_dense_layers=1, aux_loss_coeff=0.0,
                    router="sigmoid", route_scale=2.5, n_group=4, topk_group=2, bias_update_rate=1e-2,
                    seq_aux_loss_coeff=3e-2))
B = 3
SEED = 20250939
# Shampoo's case here regularises its roots with ε = 1e-4 instead of llama_reference's 1e-6. At 1e-6 the
# first step's gradients (45 tokens; an expert's a handful) have singular values far below √ε, which
# (σ² + ε)^(-1/4) weighs up to 30x: fp32 rounding of the factors then moves the updated weights by
# up to 7.5e-5 (this script's own step, eigh in fp32 instead of fp64, moves them by as much), and by
# the third step a token whose top-2 choice is that close to a tie changes expert, which the
# loss and the sign-driven biases follow. At 1e-4 the same rounding stays below the routing margins.
SHAMPOO_EPSILON = 1e-4


def trajectory_cases():
    """AdamW and Muon (with and without split heads) as llama_reference has them; Shampoo's with
    SHAMPOO_EPSILON."""
    out = [copy.deepcopy(k) for k in CASES if k["name"] in ("adamw", "muon", "muon_split_heads")]
    shampoo = copy.deepcopy(next(k for k in CASES if k["name"] == "shampoo"))
    shampoo["config"]["shampoo"]["epsilon"] = SHAMPOO_EPSILON
    return out + [shampoo]


def param_table(c):
    """(name, shape, kind, fan_in, fan_out, qkv_blocks): DeepseekV3's attention names, the router's
    gate and e_score_correction_bias, Qwen-MoE's expert names; Linear weights (out, in)."""
    C, V, F_, NH, m, moe = c["d_model"], c["vocab_size"], c["ffn_hidden"], c["n_head"], c["mla"], c["moe"]
    E, FE = moe["experts"], moe["ffn_hidden"]
    qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
    t = [("model.embed_tokens.weight", (V, C), "embedding", 0, 0, 1)]

    def linear(name, fin, fout, kind="matrix"):
        t.append((name, (fout, fin), kind, fin, fout, 1))

    def swiglu_params(prefix, width):
        linear(f"{prefix}.gate_proj.weight", C, width)
        linear(f"{prefix}.up_proj.weight", C, width)
        linear(f"{prefix}.down_proj.weight", width, C)

    for l in range(c["n_layer"]):
        p = f"model.layers.{l}"
        a = f"{p}.self_attn"
        t.append((f"{p}.input_layernorm.weight", (C,), "norm", 0, 0, 1))
        linear(f"{a}.q_a_proj.weight", C, m["q_lora_rank"])
        t.append((f"{a}.q_a_layernorm.weight", (m["q_lora_rank"],), "norm", 0, 0, 1))
        linear(f"{a}.q_b_proj.weight", m["q_lora_rank"], NH * qk)
        linear(f"{a}.kv_a_proj_with_mqa.weight", C, m["kv_lora_rank"] + m["qk_rope_head_dim"])
        t.append((f"{a}.kv_a_layernorm.weight", (m["kv_lora_rank"],), "norm", 0, 0, 1))
        linear(f"{a}.kv_b_proj.weight", m["kv_lora_rank"], NH * (m["qk_nope_head_dim"] + m["v_head_dim"]))
        linear(f"{a}.o_proj.weight", NH * m["v_head_dim"], C)
        t.append((f"{p}.post_attention_layernorm.weight", (C,), "norm", 0, 0, 1))
        if l < moe["first_dense_layers"]:
            swiglu_params(f"{p}.mlp", F_)
            continue
        linear(f"{p}.mlp.gate.weight", C, E, kind="router")
        t.append((f"{p}.mlp.gate.e_score_correction_bias", (E,), "buffer", 0, 0, 1))
        for e in range(E):
            swiglu_params(f"{p}.mlp.experts.{e}", FE)
        swiglu_params(f"{p}.mlp.shared_experts", moe["shared_experts"] * FE)
    t.append(("model.norm.weight", (C,), "norm", 0, 0, 1))
    t.append(("lm_head.weight", (V, C), "embedding", 0, 0, 1))
    return t


def init_params(table, gen):
    """Norms 1 + 0.1·randn, the biases 0.05·randn (so that they change some choices), the rest 0.1·randn."""
    params = {}
    for name, shape, kind, *_ in table:
        scale = {"norm": 0.1, "buffer": 0.05}.get(kind, 0.1)
        p = (1.0 if kind == "norm" else 0.0) + scale * torch.randn(shape, generator=gen)
        params[name] = p.float().requires_grad_(kind != "buffer")
    return params


def choose(scores, bias, moe):
    """(N, K) chosen experts by scores + bias under group-limited routing; no gradient flows here."""
    E, K, G, TG = moe["experts"], moe["top_k"], moe["n_group"], moe["topk_group"]
    with torch.no_grad():
        s = scores + bias
        N = s.shape[0]
        if G > 1:
            grouped = s.view(N, G, E // G)
            best = torch.sort(grouped, dim=-1, descending=True, stable=True).values[..., :min(2, E // G)]
            group_order = torch.sort(best.sum(-1), dim=-1, descending=True, stable=True).indices[:, :TG]
            allowed = torch.zeros(N, G, dtype=torch.bool)
            allowed.scatter_(1, group_order, True)
            s = s.masked_fill(~allowed.repeat_interleave(E // G, dim=1), float("-inf"))
        return torch.sort(s, dim=-1, descending=True, stable=True).indices[:, :K]


def seq_balance_loss(scores, chosen, moe, Bn, T):
    """α · mean over the sequences of Σ_i f_i P_i."""
    E, K = moe["experts"], moe["top_k"]
    total = scores.new_zeros(())
    for b in range(Bn):
        s = scores[b * T:(b + 1) * T]
        counts = torch.zeros(E, dtype=s.dtype).index_add_(0, chosen[b * T:(b + 1) * T].reshape(-1),
                                                          torch.ones(T * K, dtype=s.dtype))
        f = E / (K * T) * counts
        P = (s / s.sum(-1, keepdim=True)).mean(0)
        total = total + (f * P).sum()
    return moe["seq_aux_loss_coeff"] * total / Bn


def moe_mlp(p, pre, m, c, Bn, T):
    """The routed experts and the shared one on m (N, C). Returns (out, balance loss, counts (E,))."""
    moe = c["moe"]
    E = moe["experts"]
    scores = torch.sigmoid(m @ p[f"{pre}.mlp.gate.weight"].T)
    chosen = choose(scores, p[f"{pre}.mlp.gate.e_score_correction_bias"].to(scores.dtype), moe)
    top = scores.gather(1, chosen)
    gates = moe["route_scale"] * top / top.sum(-1, keepdim=True)
    out = swiglu(m, p[f"{pre}.mlp.shared_experts.gate_proj.weight"], p[f"{pre}.mlp.shared_experts.up_proj.weight"],
                 p[f"{pre}.mlp.shared_experts.down_proj.weight"])
    counts = torch.zeros(E, dtype=torch.int64)
    for e in range(E):
        token, slot = (chosen == e).nonzero(as_tuple=True)
        counts[e] = token.numel()
        x = m.index_select(0, token)
        y = swiglu(x, p[f"{pre}.mlp.experts.{e}.gate_proj.weight"], p[f"{pre}.mlp.experts.{e}.up_proj.weight"],
                   p[f"{pre}.mlp.experts.{e}.down_proj.weight"])
        out = out.index_add(0, token, gates[token, slot].unsqueeze(-1) * y)
    return out, seq_balance_loss(scores, chosen, moe, Bn, T), counts


def forward(p, c, tokens, targets):
    """(logits, cross-entropy, balance loss summed over the MoE layers, [counts per MoE layer])."""
    Bn, T = tokens.shape
    C, eps = c["d_model"], c["norm_eps"]
    x = p["model.embed_tokens.weight"][tokens]
    aux, counts = x.new_zeros(()), []
    for l in range(c["n_layer"]):
        pre = f"model.layers.{l}"
        x = x + mla(p, pre, rms_norm(x, p[f"{pre}.input_layernorm.weight"], eps), c)
        m = rms_norm(x, p[f"{pre}.post_attention_layernorm.weight"], eps)
        if l < c["moe"]["first_dense_layers"]:
            x = x + swiglu(m, p[f"{pre}.mlp.gate_proj.weight"], p[f"{pre}.mlp.up_proj.weight"],
                           p[f"{pre}.mlp.down_proj.weight"])
            continue
        y, aux_l, n = moe_mlp(p, pre, m.reshape(Bn * T, C), c, Bn, T)
        x = x + y.view(Bn, T, C)
        aux = aux + aux_l
        counts.append(n)
    logits, ce = head_loss(p, c, x, targets)
    return logits, ce, aux, counts


def step_loss(params, c, tokens, targets):
    _, ce, aux, counts = forward(params, c, tokens, targets)
    return ce + aux, (ce.item(), aux.item(), counts)


def update_biases(c):
    """b_i += γ · sign(mean load − load_i) for each MoE layer, after the optimizer's step."""
    moe = c["moe"]
    layers = range(moe["first_dense_layers"], c["n_layer"])

    def after_step(params, record):
        for l, n in zip(layers, record[2]):
            b = params[f"model.layers.{l}.mlp.gate.e_score_correction_bias"]
            load = n.to(b.dtype)
            b += moe["bias_update_rate"] * torch.sign(load.mean() - load)
    return after_step


def to_adamw_or_router(kind, cfg):
    return kind == "router" or to_adamw(kind, cfg)


def trajectories(c, p, batches):
    """{case: (cross-entropy per step, balance loss per step, every bias after the last step)}."""
    table = param_table(c)
    out = {}
    for case in trajectory_cases():
        finals = {}

        def keep(params, record, hook=update_biases(c)):
            hook(params, record)
            finals.update({n: t.detach().clone() for n, t in params.items() if n.endswith("e_score_correction_bias")})
        rec = run_case(case, c, p, batches, table=table, step_loss=step_loss, routed_to_adamw=to_adamw_or_router,
                       heads=attention_heads(c),
                       after_step=keep)
        bias = torch.cat([finals[n] for n, _, kind, *_ in table if kind == "buffer"])
        out[case["name"]] = ([r[0] for r in rec], [r[1] for r in rec], bias)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    c = CFG
    gen = torch.Generator().manual_seed(SEED)
    table = param_table(c)
    p = init_params(table, gen)
    successor = torch.randperm(c["vocab_size"], generator=gen)
    tokens, targets = batch(c, gen, successor, B)
    batches = [batch(c, gen, successor, B) for _ in range(STEPS)]
    write_safetensors(os.path.join(args.out, "model.safetensors"), p)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(c, batch_size=B), f)
    np.save(os.path.join(args.out, "tokens.npy"), tokens.numpy().astype(np.int32))
    np.save(os.path.join(args.out, "targets.npy"), targets.numpy().astype(np.int32))

    # The golden pass: fp64 arithmetic on the fp32 weights.
    p64 = {n: t.detach().double().requires_grad_(t.requires_grad) for n, t in p.items()}
    logits, ce, aux, counts = forward(p64, c, tokens, targets)
    (ce + aux).backward()
    np.save(os.path.join(args.out, "logits.npy"), logits.detach().float().numpy())
    np.save(os.path.join(args.out, "loss.npy"), np.array([ce.item()], dtype=np.float64))
    np.save(os.path.join(args.out, "aux.npy"), np.array([aux.item()], dtype=np.float64))
    np.save(os.path.join(args.out, "counts.npy"), torch.stack(counts).numpy().astype(np.float64))
    for n, t in p64.items():
        g = t.grad if t.grad is not None else torch.zeros_like(t)
        np.save(os.path.join(args.out, f"grad.{n}.npy"), g.float().numpy())

    for step, (tk, tg) in enumerate(batches):
        np.save(os.path.join(args.out, f"traj_tokens_{step}.npy"), tk.numpy().astype(np.int32))
        np.save(os.path.join(args.out, f"traj_targets_{step}.npy"), tg.numpy().astype(np.int32))
    summary = []
    cases = []
    by_name = {k["name"]: k for k in trajectory_cases()}
    for name, (losses, auxes, bias) in trajectories(c, p, batches).items():
        np.save(os.path.join(args.out, f"traj_losses.{name}.npy"), np.array(losses, dtype=np.float64))
        np.save(os.path.join(args.out, f"traj_aux.{name}.npy"), np.array(auxes, dtype=np.float64))
        np.save(os.path.join(args.out, f"traj_bias.{name}.npy"), bias.numpy().astype(np.float64))
        summary.append(f"{name} {losses[0]:.4f} -> {losses[-1]:.4f}, |bias| max {bias.abs().max().item():.3f}")
        cases.append(by_name[name])
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(dict(steps=STEPS, cases=cases), f, indent=1)
    print(f"wrote DeepSeek MoE reference to {args.out}: loss {ce.item():.6f} aux {aux.item():.6f} counts "
          f"{[n.tolist() for n in counts]}; " + "; ".join(summary))


if __name__ == "__main__":
    main()
