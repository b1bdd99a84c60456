"""Reference optimizers for tests/worker/optim/test_against_torch.cpp, written in torch from the
published algorithms (docs/optimizers.md, AdamW, Muon and Shampoo): AdamW is torch.optim.AdamW;
Muon and Shampoo are written out literally here. Every case starts from the same parameters of a
tiny GPT-2 (HF layouts: Conv1D weights stored (in, out)) and applies the same fixed random
gradients.

Writes into --out: init.<param>.npy, grad.<step>.<param>.npy (step 1-based),
final.<case>.<param>.npy and cases.json (each case's optimizer config, lr scales, grad scale).
"""
import argparse
import json
import math
import os

import numpy as np
import torch

STEPS = 12
C, V, T, L = 16, 50, 8, 1
NH = 2  # heads (tests/worker/support/optim_util.h tiny_model)


def heads_of(name):
    """An attention matrix's heads as muon_step takes them: (count, on_fan_in); None for the others."""
    if name.endswith("attn.c_attn.weight"):
        return (NH, False)
    if name.endswith("attn.c_proj.weight"):
        return (NH, True)
    return None


def param_table():
    """(name, shape, kind, fan_in, fan_out, qkv_blocks) as worker/model/params.cpp builds it."""
    t = [("wte.weight", (V, C), "embedding", 0, 0, 1), ("wpe.weight", (T, C), "position", 0, 0, 1)]

    def linear(prefix, fin, fout, qkv=1):
        t.append((prefix + ".weight", (fin, fout), "matrix", fin, fout, qkv))
        t.append((prefix + ".bias", (fout,), "bias", 0, 0, 1))

    for l in range(L):
        h = f"h.{l}"
        t.append((h + ".ln_1.weight", (C,), "norm", 0, 0, 1))
        t.append((h + ".ln_1.bias", (C,), "norm", 0, 0, 1))
        linear(h + ".attn.c_attn", C, 3 * C, 3)
        linear(h + ".attn.c_proj", C, C)
        t.append((h + ".ln_2.weight", (C,), "norm", 0, 0, 1))
        t.append((h + ".ln_2.bias", (C,), "norm", 0, 0, 1))
        linear(h + ".mlp.c_fc", C, 4 * C)
        linear(h + ".mlp.c_proj", 4 * C, C)
    t.append(("ln_f.weight", (C,), "norm", 0, 0, 1))
    t.append(("ln_f.bias", (C,), "norm", 0, 0, 1))
    return t


# ---------------------------------------------------------------- AdamW (torch.optim.AdamW)

def adamw_group_hyper(cfg, adamw_run):
    a = cfg.get("adamw", {})
    lr = cfg["lr"] if adamw_run or a.get("lr", 0) == 0 else a["lr"]
    wd = cfg.get("weight_decay", 0.0)
    if not adamw_run and a.get("weight_decay", -1) >= 0:
        wd = a["weight_decay"]
    return dict(lr=lr, betas=(a.get("beta1", 0.9), a.get("beta2", 0.95)), eps=a.get("eps", 1e-8), weight_decay=wd)


class TorchAdamW:
    def __init__(self, tensors, hyper, cautious=False):
        self.tensors = tensors
        self.base_lr = hyper["lr"]
        self.hyper = hyper
        self.opt = torch.optim.AdamW(tensors, foreach=False, **hyper) if tensors and not cautious else None
        self.cautious = cautious
        self.t = 0
        self.state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in tensors]

    def step(self, grads, lr_scale):
        if self.cautious:
            self.cautious_step(grads, lr_scale)
            return
        if self.opt is None:
            return
        for p, g in zip(self.tensors, grads):
            p.grad = g.clone()
        for group in self.opt.param_groups:
            group["lr"] = self.base_lr * lr_scale
        self.opt.step()

    def cautious_step(self, grads, lr_scale):
        """AdamW written out (PyTorch's order: bias-corrected moments, eps after the square root), with
        cautious weight decay: the decay only where the update and the parameter have the same sign."""
        self.t += 1
        lr, (b1, b2), eps, wd = self.base_lr * lr_scale, self.hyper["betas"], self.hyper["eps"], self.hyper["weight_decay"]
        for p, g, (m, v) in zip(self.tensors, grads, self.state):
            m.mul_(b1).add_((1 - b1) * g)
            v.mul_(b2).add_((1 - b2) * g * g)
            update = (lr / (1 - b1 ** self.t)) * m / ((v / (1 - b2 ** self.t)).sqrt() + eps)
            cautious_apply(p, update, lr, wd)


def cautious_apply(w, update, lr, wd):
    """w ← w·(1 − lr·wd) − update where update·w > 0 (same sign), w ← w − update elsewhere."""
    same_sign = (update * w > 0).to(w.dtype)
    w.mul_(1 - lr * wd * same_sign)
    w.sub_(update)


# ---------------------------------------------------------------- Muon

KELLER = [(3.4445, -4.7750, 2.0315)]
POLAR_EXPRESS = [(8.2051, -22.9019, 16.4607), (4.0664, -2.8612, 0.5184), (3.9096, -2.8234, 0.5250),
                 (3.2856, -2.4153, 0.4853), (2.2779, -1.6198, 0.3985), (1.8726, -1.2307, 0.3585),
                 (1.8564, -1.2132, 0.3568), (1.8750, -1.2500, 0.3750)]


def newton_schulz(g, schedule, eps):
    x = g.clone()
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = x.T
    x = x / (x.norm() + eps)
    for a, b, c in schedule:
        A = x @ x.T
        B = b * A + c * (A @ A)
        x = a * x + B @ x
    return x.T if transposed else x


def muon_scale(mode, fan_out, fan_in):
    if mode == "shape":
        return math.sqrt(max(1.0, fan_out / fan_in))
    if mode == "rms-match":
        return 0.2 * math.sqrt(max(fan_out, fan_in))
    return math.sqrt(fan_out / fan_in)


def muon_step(w, g, state, cfg, lr, wd, qkv_blocks, cautious=False, heads=None):
    """w, g stored (fan_in, fan_out) as HF's Conv1D; the algorithm runs on the map Wᵀ. heads: an
    attention matrix's (count, on_fan_in): under split_heads ("Muon split") each head's block of the
    map, `count` equal row blocks of each Q/K/V block (its outputs) or `count` equal column blocks (its
    inputs, o_proj), is orthogonalised and scaled as a matrix of its own."""
    m = cfg
    mu = m.get("momentum", 0.95)
    gm = g.T  # the linear map's gradient, (fan_out, fan_in)
    if "M" not in state:
        state["M"] = torch.zeros_like(gm)
    M = state["M"]
    ema = m.get("momentum_form", "ema") == "ema"
    if ema:
        M.mul_(mu).add_((1 - mu) * gm)
        U = (1 - mu) * gm + mu * M if m.get("nesterov", True) else M
    else:
        M.mul_(mu).add_(gm)
        U = gm + mu * M if m.get("nesterov", True) else M
    coeffs = m.get("coefficients", "keller")
    base = KELLER if coeffs == "keller" else POLAR_EXPRESS if coeffs == "polar-express" else \
        [tuple(t) for t in m["coefficient_list"]]
    steps = m.get("ns_steps", 5)
    schedule = [base[min(i, len(base) - 1)] for i in range(steps)]
    eps = m.get("ns_eps", 1e-7)
    blocks = qkv_blocks if m.get("split_qkv", True) else 1
    col_blocks = 1
    if m.get("split_heads", False) and heads is not None:
        count, on_fan_in = heads
        blocks, col_blocks = (1, count) if on_fan_in else (qkv_blocks * count, 1)
    fan_out, fan_in = gm.shape
    rows, cols = fan_out // blocks, fan_in // col_blocks
    update = torch.zeros_like(gm)
    orthogonal = torch.cat([torch.cat([newton_schulz(U[k * rows:(k + 1) * rows, j * cols:(j + 1) * cols], schedule, eps)
                                       for j in range(col_blocks)], dim=1) for k in range(blocks)])
    normuon = m.get("variant", "muon") == "normuon"
    if normuon:
        # NorMuon (Li et al. 2025): per output neuron (a row of the map) an EMA of the mean square of
        # the orthogonalised update, each row divided by √v + ε, then per NS problem the update's
        # RMS set to 0.2 (rms-match) or its Frobenius norm set back to what it was before.
        if "v" not in state:
            state["v"] = torch.zeros(fan_out, dtype=gm.dtype)
        beta2, eps_v = m.get("beta2", 0.95), m.get("eps", 1e-8)
        state["v"].mul_(beta2).add_((1 - beta2) * (orthogonal * orthogonal).mean(dim=1))
        normalised = orthogonal / (state["v"].sqrt() + eps_v)[:, None]
    for k in range(blocks):
        o = orthogonal[k * rows:(k + 1) * rows]
        scale = muon_scale(m.get("scale", "shape"), rows, cols)
        if normuon:
            n = normalised[k * rows:(k + 1) * rows]
            if m.get("scale", "shape") == "rms-match":
                o, scale = 0.2 * math.sqrt(n.numel()) * n / n.norm(), 1.0
            else:
                o = n * (o.norm() / n.norm())
        update[k * rows:(k + 1) * rows] = lr * scale * o
    if cautious:
        cautious_apply(w.T, update, lr, wd)
        return
    w.mul_(1 - lr * wd)
    w.T.sub_(update)


# ---------------------------------------------------------------- Shampoo

def inverse_root(a, eps, p):
    """(A + εI)^(-1/p) with eigenvalues clamped at 0, in float64."""
    lam, q = torch.linalg.eigh(a.double())
    d = (lam.clamp(min=0) + eps) ** (-1.0 / p)
    return ((q * d) @ q.T).float()


def shampoo_block_step(w, g, st, s, t, lr, wd, cautious=False):
    """One block (views w, g of the stored matrix), Distributed Shampoo as docs/optimizers.md, Shampoo
    writes it."""
    beta1, beta2 = s.get("beta1", 0.9), s.get("beta2", 1.0)
    eps = s.get("epsilon", 1e-12)
    freq = s.get("precondition_frequency", 10)
    start = s.get("start_preconditioning_step", 0) or freq
    graft = s.get("grafting", "adam")
    bg, eg = s.get("grafting_beta2", 0.999), s.get("grafting_epsilon", 1e-8)
    bias_correction = s.get("bias_correction", True)
    p_root = 1.0 / (s.get("exponent", 0.0) or 0.25)
    if not st:
        st.update(L=torch.zeros(g.shape[0], g.shape[0]), R=torch.zeros(g.shape[1], g.shape[1]),
                  Li=torch.eye(g.shape[0]), Ri=torch.eye(g.shape[1]), M=torch.zeros_like(g), V=torch.zeros_like(g))
    if beta2 == 1.0:
        st["L"] += g @ g.T
        st["R"] += g.T @ g
    else:
        st["L"] = beta2 * st["L"] + (1 - beta2) * (g @ g.T)
        st["R"] = beta2 * st["R"] + (1 - beta2) * (g.T @ g)
    bc2 = 1 - beta2 ** t if (bias_correction and beta2 < 1.0) else 1.0
    if (t % freq == 0 and t > start) or t == start:
        st["Li"] = inverse_root(st["L"] / bc2, eps, p_root)
        st["Ri"] = inverse_root(st["R"] / bc2, eps, p_root)
    st["M"] = beta1 * st["M"] + (1 - beta1) * g
    bc1 = 1 - beta1 ** t if bias_correction else 1.0
    ghat = st["M"] / bc1
    if graft == "adam":
        st["V"] = bg * st["V"] + (1 - bg) * g * g
        pg = ghat / ((st["V"] / (1 - bg ** t)).sqrt() + eg)
    elif graft == "rmsprop":
        st["V"] = bg * st["V"] + (1 - bg) * g * g
        pg = ghat / (st["V"].sqrt() + eg)
    elif graft == "adagrad":
        st["V"] = st["V"] + g * g
        pg = ghat / (st["V"].sqrt() + eg)
    else:
        pg = ghat
    if t < start:
        p = pg
    else:
        p = st["Li"] @ ghat @ st["Ri"]
        if graft != "none":
            p = p * (pg.norm() / (p.norm() + 1e-16))
    if cautious:
        cautious_apply(w, lr * p, lr, wd)
        return
    w.mul_(1 - lr * wd)
    w.sub_(lr * p)


# ---------------------------------------------------------------- SOAP

def soap_step(w, g, st, s, lr, cautious=False, dtype=torch.float64):
    """One matrix, SOAP as Vyas et al. 2024 and the authors' soap.py describe it: Adam in the eigenbasis
    of L = EMA(G Gᵀ), R = EMA(Gᵀ G). The first call only builds the factors and their eigenbases; the
    first moment lives in the rotated basis and, like soap.py, is carried back to the standard basis and
    into the (possibly refreshed) one after every update; a refresh is one power step L·Q, a re-sort of
    the second moment by the estimated eigenvalues diag(Qᵀ L Q), and a QR. A side longer than
    max_preconditioner_dim is not rotated. Computed in `dtype` (float64 by default; float32 to measure
    how much the case's conditioning lets round-off move the result)."""
    beta1, beta2 = s.get("beta1", 0.95), s.get("beta2", 0.95)
    sb = s.get("shampoo_beta", -1)
    sb = beta2 if sb < 0 else sb
    eps, freq = s.get("eps", 1e-8), s.get("precondition_frequency", 10)
    max_dim = s.get("max_preconditioner_dim", 10000)
    g = g.to(dtype)
    rows, cols = g.shape

    def update_factors():
        if st["L"] is not None:
            st["L"] = sb * st["L"] + (1 - sb) * (g @ g.T)
        if st["R"] is not None:
            st["R"] = sb * st["R"] + (1 - sb) * (g.T @ g)

    def project(x):  # into the eigenbasis: Q_Lᵀ x Q_R
        if st["QL"] is not None:
            x = st["QL"].T @ x
        if st["QR"] is not None:
            x = x @ st["QR"]
        return x

    def project_back(x):  # Q_L x Q_Rᵀ
        if st["QL"] is not None:
            x = st["QL"] @ x
        if st["QR"] is not None:
            x = x @ st["QR"].T
        return x

    if not st:
        st.update(L=torch.zeros(rows, rows, dtype=dtype) if rows <= max_dim else None,
                  R=torch.zeros(cols, cols, dtype=dtype) if cols <= max_dim else None,
                  M=torch.zeros(rows, cols, dtype=dtype), V=torch.zeros(rows, cols, dtype=dtype), k=0)
        update_factors()
        for f, q in (("L", "QL"), ("R", "QR")):
            st[q] = None if st[f] is None else torch.flip(torch.linalg.eigh(st[f])[1], [1])
        return
    gp = project(g)
    st["k"] += 1
    k = st["k"]
    st["M"] = beta1 * st["M"] + (1 - beta1) * gp
    st["V"] = beta2 * st["V"] + (1 - beta2) * gp * gp
    step = lr
    if s.get("correct_bias", True):
        step = lr * math.sqrt(1 - beta2 ** k) / (1 - beta1 ** k)
    n = project_back(st["M"] / (st["V"].sqrt() + eps))
    if s.get("normalize_grads", False):
        n = n / (1e-30 + (n * n).mean().sqrt())
    update = (step * n).to(w.dtype)
    if cautious:
        cautious_apply(w, update, lr, s.get("weight_decay", 0.01))
    else:
        w.sub_(update)
        w.mul_(1 - lr * s.get("weight_decay", 0.01))
    st["M"] = project_back(st["M"])
    update_factors()
    if k % freq == 0:
        for dim, (f, q) in enumerate((("L", "QL"), ("R", "QR"))):
            if st[f] is None:
                continue
            estimate = torch.diag(st[q].T @ st[f] @ st[q])
            order = torch.argsort(estimate, descending=True)
            st["V"] = st["V"].index_select(dim, order)
            st[q] = torch.linalg.qr(st[f] @ st[q][:, order])[0]
    st["M"] = project(st["M"])


def shampoo_routed(kind, which):
    return kind == "matrix" or (which == "all-matrices" and kind in ("embedding", "position"))


def split(n, size):
    return [(s, min(size, n - s)) for s in range(0, n, size)]


# ---------------------------------------------------------------- cases

SCHEDULE = [0.2, 0.5, 0.8, 1.0, 1.0, 0.9, 0.75, 0.6, 0.45, 0.3, 0.2, 0.1]

CASES = [
    # Cautious weight decay: the decay only where the update and the parameter have the same sign.
    dict(name="adamw_cautious", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="adamw", lr=3e-3, weight_decay=0.5, weight_decay_mode="cautious",
                     adamw=dict(beta1=0.9, beta2=0.95, eps=1e-8))),
    dict(name="muon_cautious", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="muon", lr=0.02, weight_decay=0.2, weight_decay_mode="cautious",
                     adamw=dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.5),
                     muon=dict(momentum=0.95, nesterov=True, momentum_form="ema", ns_steps=5,
                               coefficients="keller", scale="shape", split_qkv=True))),
    dict(name="shampoo_cautious", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="shampoo", lr=0.02, weight_decay=0.2, weight_decay_mode="cautious",
                     adamw=dict(beta1=0.9, beta2=0.95),
                     shampoo=dict(beta1=0.9, beta2=0.99, epsilon=1e-6, precondition_frequency=3,
                                  start_preconditioning_step=3, max_preconditioner_dim=10, grafting="sgd"))),
    # SOAP on the matrices with a 16-wide side (d_model): one-sided on c_attn, c_fc and mlp.c_proj,
    # two-sided on attn.c_proj; the 48/64-wide sides (whose factors are rank-deficient in the first
    # steps: a degenerate eigenspace, an arbitrary basis) are not rotated.
    dict(name="soap_one_sided_freq2", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="soap", lr=3e-3, weight_decay=0.1, adamw=dict(lr=3e-3, beta1=0.9, beta2=0.95),
                     soap=dict(beta1=0.95, beta2=0.95, eps=1e-8, weight_decay=0.01, precondition_frequency=2,
                               max_preconditioner_dim=16))),
    dict(name="soap_freq1_normalize_shampoo_beta_clip", grad_scale=0.5, lr_scales=[1.0] * STEPS,
         config=dict(name="soap", lr=1e-3, adamw=dict(beta1=0.9, beta2=0.95),
                     soap=dict(beta1=0.9, beta2=0.99, shampoo_beta=0.8, eps=1e-7, weight_decay=0.1,
                               precondition_frequency=1, max_preconditioner_dim=16, normalize_grads=True,
                               correct_bias=False))),
    dict(name="soap_cautious_freq3", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="soap", lr=3e-3, weight_decay_mode="cautious", adamw=dict(beta1=0.9, beta2=0.95),
                     soap=dict(weight_decay=0.5, precondition_frequency=3, max_preconditioner_dim=16))),
    # NorMuon: the per-neuron second moment on top of Muon, with both of its rescalings.
    dict(name="normuon_shape_split_qkv", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="muon", lr=0.02, weight_decay=0.01, adamw=dict(lr=3e-3, beta1=0.9, beta2=0.95),
                     muon=dict(variant="normuon", beta2=0.95, eps=1e-8, momentum=0.95, nesterov=True,
                               ns_steps=5, coefficients="keller", scale="shape", split_qkv=True))),
    dict(name="normuon_rms_match_whole", grad_scale=0.7, lr_scales=SCHEDULE,
         config=dict(name="muon", lr=0.01, weight_decay=0.1, adamw=dict(beta1=0.9, beta2=0.95),
                     muon=dict(variant="normuon", beta2=0.9, eps=1e-6, momentum=0.9, nesterov=False,
                               ns_steps=5, coefficients="keller", scale="rms-match", split_qkv=False))),
    dict(name="adamw_wd_schedule_clip", grad_scale=0.5, lr_scales=SCHEDULE,
         config=dict(name="adamw", lr=3e-3, weight_decay=0.1, adamw=dict(beta1=0.9, beta2=0.95, eps=1e-8))),
    dict(name="muon_ema_nesterov_keller_shape_qkv", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="muon", lr=0.02, weight_decay=0.01,
                     adamw=dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0),
                     muon=dict(momentum=0.95, nesterov=True, momentum_form="ema", ns_steps=5,
                               coefficients="keller", scale="shape", split_qkv=True))),
    # Muon split: each head's block of c_attn (per Q/K/V block) and of c_proj (its input columns) on its
    # own, scaled by the block's shape.
    dict(name="muon_split_heads_shape", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="muon", lr=0.02, weight_decay=0.01, adamw=dict(lr=3e-3, beta1=0.9, beta2=0.95),
                     muon=dict(momentum=0.95, nesterov=True, momentum_form="ema", ns_steps=5,
                               coefficients="keller", scale="shape", split_heads=True))),
    dict(name="muon_split_heads_rms_match", grad_scale=1.0, lr_scales=[1.0] * STEPS,
         config=dict(name="muon", lr=1e-3, weight_decay=0.1, adamw=dict(beta1=0.9, beta2=0.95),
                     muon=dict(momentum=0.9, nesterov=False, momentum_form="sgd", ns_steps=6,
                               coefficients="polar-express", scale="rms-match", split_qkv=False,
                               split_heads=True))),
    dict(name="muon_sgd_polar_rms_match", grad_scale=1.0, lr_scales=[1.0] * STEPS,
         config=dict(name="muon", lr=1e-3, weight_decay=0.1, adamw=dict(beta1=0.9, beta2=0.95),
                     muon=dict(momentum=0.9, nesterov=False, momentum_form="sgd", ns_steps=6,
                               coefficients="polar-express", scale="rms-match", split_qkv=False))),
    dict(name="muon_explicit_spectral", grad_scale=0.7, lr_scales=SCHEDULE,
         config=dict(name="muon", lr=0.01, weight_decay=0.0, adamw=dict(beta1=0.8, beta2=0.99, weight_decay=0.05),
                     muon=dict(momentum=0.9, nesterov=True, momentum_form="ema", ns_steps=4,
                               coefficients="explicit", coefficient_list=[[3.0, -3.2, 1.2], [2.0, -1.5, 0.5]],
                               scale="spectral", split_qkv=True))),
    dict(name="shampoo_adam_sum_freq1", grad_scale=1.0, lr_scales=[1.0] * STEPS,
         config=dict(name="shampoo", lr=0.01, weight_decay=0.0, adamw=dict(beta1=0.9, beta2=0.95),
                     shampoo=dict(beta1=0.9, beta2=1.0, epsilon=1e-6, precondition_frequency=1, grafting="adam",
                                  grafting_beta2=0.999, grafting_epsilon=1e-8))),
    dict(name="shampoo_sgd_freq3_blocks_wd", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="shampoo", lr=0.02, weight_decay=0.01, adamw=dict(beta1=0.9, beta2=0.95),
                     shampoo=dict(beta1=0.9, beta2=0.99, epsilon=1e-6, precondition_frequency=3,
                                  start_preconditioning_step=3, max_preconditioner_dim=10, grafting="sgd"))),
    dict(name="shampoo_none_all_matrices_freq2", grad_scale=0.5, lr_scales=SCHEDULE,
         config=dict(name="shampoo", lr=0.005, weight_decay=0.02, adamw=dict(beta1=0.9, beta2=0.95),
                     shampoo=dict(beta1=0.5, beta2=0.95, epsilon=1e-6, precondition_frequency=2,
                                  grafting="none", params="all-matrices", max_preconditioner_dim=24))),
    dict(name="shampoo_adagrad_exponent_no_bias_correction", grad_scale=1.0, lr_scales=[1.0] * STEPS,
         config=dict(name="shampoo", lr=0.01, weight_decay=0.0, adamw=dict(beta1=0.9, beta2=0.95),
                     shampoo=dict(beta1=0.9, beta2=0.999, epsilon=1e-6, precondition_frequency=2,
                                  start_preconditioning_step=2, exponent=0.5, grafting="adagrad",
                                  grafting_epsilon=1e-8, bias_correction=False))),
    dict(name="shampoo_rmsprop_newton_blocks", grad_scale=1.0, lr_scales=SCHEDULE,
         config=dict(name="shampoo", lr=0.01, weight_decay=0.01, adamw=dict(beta1=0.9, beta2=0.95),
                     shampoo=dict(beta1=0.9, beta2=0.999, epsilon=1e-4, precondition_frequency=4,
                                  start_preconditioning_step=1, grafting="rmsprop", grafting_beta2=0.9,
                                  root_method="newton", max_preconditioner_dim=32))),
]


def run_case(case, init, grads, dtype=torch.float64):
    cfg = case["config"]
    table = param_table()
    params = {n: torch.tensor(init[n]) for n, *_ in table}
    name = cfg["name"]
    lr, wd = cfg["lr"], cfg.get("weight_decay", 0.0)
    if name == "adamw":
        side = [n for n, *_ in table]
    elif name in ("muon", "soap"):
        side = [n for n, _, kind, *_ in table if kind != "matrix"]
    else:
        which = cfg["shampoo"].get("params", "hidden")
        side = [n for n, _, kind, *_ in table if not shampoo_routed(kind, which)]
    cautious = cfg.get("weight_decay_mode", "decoupled") == "cautious"
    adamw = TorchAdamW([params[n] for n in side], adamw_group_hyper(cfg, name == "adamw"), cautious)
    states = {}
    for t in range(1, STEPS + 1):
        scale = case["lr_scales"][t - 1]
        g = {n: torch.tensor(grads[t][n]) * case["grad_scale"] for n, *_ in table}
        with torch.no_grad():
            adamw.step([g[n] for n in side], scale)
            for n, shape, kind, fin, fout, qkv in table:
                if n in side:
                    continue
                if name == "muon":
                    muon_step(params[n], g[n], states.setdefault(n, {}), cfg["muon"], lr * scale, wd, qkv, cautious,
                              heads_of(n))
                elif name == "soap":
                    soap_step(params[n], g[n], states.setdefault(n, {}), cfg["soap"], lr * scale, cautious, dtype)
                else:
                    s = cfg["shampoo"]
                    size = s.get("max_preconditioner_dim", 1024)
                    for bi, (r0, rn) in enumerate(split(shape[0], size)):
                        for bj, (c0, cn) in enumerate(split(shape[1], size)):
                            st = states.setdefault((n, bi, bj), {})
                            shampoo_block_step(params[n][r0:r0 + rn, c0:c0 + cn], g[n][r0:r0 + rn, c0:c0 + cn], st,
                                               s, t, lr * scale, wd, cautious)
    return params


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(20240601)
    table = param_table()
    init, grads = {}, {}
    for n, shape, kind, *_ in table:
        init[n] = (rng.standard_normal(shape) * (0.02 if kind != "norm" else 0.1)).astype(np.float32)
        np.save(os.path.join(args.out, f"init.{n}.npy"), init[n])
    for t in range(1, STEPS + 1):
        grads[t] = {}
        for n, shape, *_ in table:
            grads[t][n] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
            np.save(os.path.join(args.out, f"grad.{t}.{n}.npy"), grads[t][n])
    for case in CASES:
        final = run_case(case, init, grads)
        for n, *_ in table:
            np.save(os.path.join(args.out, f"final.{case['name']}.{n}.npy"), final[n].numpy())
        if case["config"]["name"] == "soap":
            # The same case with the eigenbases in float32: how far round-off moves it (conditioning).
            final = run_case(case, init, grads, torch.float32)
            for n, *_ in table:
                np.save(os.path.join(args.out, f"final_fp32.{case['name']}.{n}.npy"), final[n].numpy())
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(dict(steps=STEPS, cases=CASES), f, indent=1)


if __name__ == "__main__":
    main()
