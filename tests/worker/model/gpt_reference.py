#!/usr/bin/python3
"""Golden reference for the GPT-2 model: a PyTorch implementation of the same architecture.

Builds a small GPT-2 with random weights (HF names and layouts: Conv1D weights stored (in, out)),
writes them as model.safetensors (written here by hand from the format's definition), then
writes a batch, the logits, the loss, every gradient, and a 10-step AdamW loss trajectory as
.npy files for test_gpt_reference.cpp; then 12-step trajectories of SOAP and NorMuon on the 2-D
hidden matrices (optim_reference.py's implementations, written from the papers), AdamW on the rest.
"""
import argparse
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "optim"))  # optim_reference
import numpy as np
import torch
import torch.nn.functional as F

CFG = dict(n_layer=2, n_head=2, d_model=32, seq_len=16, vocab_size=67)
B = 3
ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def param_table(c):
    C, V, T = c["d_model"], c["vocab_size"], c["seq_len"]
    t = [("wte.weight", (V, C)), ("wpe.weight", (T, C))]
    for l in range(c["n_layer"]):
        h = f"h.{l}"
        t += [(f"{h}.ln_1.weight", (C,)), (f"{h}.ln_1.bias", (C,)),
              (f"{h}.attn.c_attn.weight", (C, 3 * C)), (f"{h}.attn.c_attn.bias", (3 * C,)),
              (f"{h}.attn.c_proj.weight", (C, C)), (f"{h}.attn.c_proj.bias", (C,)),
              (f"{h}.ln_2.weight", (C,)), (f"{h}.ln_2.bias", (C,)),
              (f"{h}.mlp.c_fc.weight", (C, 4 * C)), (f"{h}.mlp.c_fc.bias", (4 * C,)),
              (f"{h}.mlp.c_proj.weight", (4 * C, C)), (f"{h}.mlp.c_proj.bias", (C,))]
    t += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return t


def init_params(c, gen):
    params = {}
    for name, shape in param_table(c):
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            p = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif len(shape) == 1:
            p = 0.02 * torch.randn(shape, generator=gen)  # nonzero biases exercise their gradients
        else:
            p = 0.1 * torch.randn(shape, generator=gen)
        params[name] = p.float().requires_grad_(True)
    return params


def forward(p, c, tokens, targets):
    Bn, T = tokens.shape
    C, NH = c["d_model"], c["n_head"]
    hs = C // NH
    x = p["wte.weight"][tokens] + p["wpe.weight"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for l in range(c["n_layer"]):
        h = f"h.{l}"
        a = F.layer_norm(x, (C,), p[f"{h}.ln_1.weight"], p[f"{h}.ln_1.bias"], eps=1e-5)
        qkv = a @ p[f"{h}.attn.c_attn.weight"] + p[f"{h}.attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (z.view(Bn, T, NH, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(Bn, T, C)
        x = x + y @ p[f"{h}.attn.c_proj.weight"] + p[f"{h}.attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), p[f"{h}.ln_2.weight"], p[f"{h}.ln_2.bias"], eps=1e-5)
        m = F.gelu(m @ p[f"{h}.mlp.c_fc.weight"] + p[f"{h}.mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ p[f"{h}.mlp.c_proj.weight"] + p[f"{h}.mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    logits = x @ p["wte.weight"].T
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
    return logits, loss


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def batch(c, gen):
    data = torch.randint(0, c["vocab_size"], (B, c["seq_len"] + 1), generator=gen)
    tokens, targets = data[:, :-1].clone(), data[:, 1:].clone()
    targets[0, 3] = -1  # an ignored position
    return tokens, targets


# SOAP one-sided on d_model (32: the short side of every hidden matrix, and both of attn.c_proj;
# 48 tokens a step give those factors full rank), NorMuon with its default rescaling.
OPT_STEPS = 12
OPT_BATCH = 8  # 128 tokens a step: the 32-wide factors well conditioned (measured below)
OPT_CASES = [
    dict(name="soap", config=dict(name="soap", lr=3e-3, adamw=dict(lr=3e-3, beta1=0.9, beta2=0.95),
                                  soap=dict(precondition_frequency=2, max_preconditioner_dim=32))),
    dict(name="normuon", config=dict(name="muon", lr=0.02, weight_decay=0.01, adamw=dict(lr=3e-3, beta1=0.9, beta2=0.95),
                                     muon=dict(variant="normuon"))),
]


def optimizer_trajectory(case, c, init, batches, dtype=torch.float64):
    """OPT_STEPS steps of one case on a copy of init; the loss before each update."""
    from optim_reference import TorchAdamW, adamw_group_hyper, muon_step, soap_step
    cfg = case["config"]
    params = {n: t.detach().clone().requires_grad_(True) for n, t in init.items()}
    hidden = [n for n, shape in param_table(c) if n.startswith("h.") and len(shape) == 2]
    side = [n for n in params if n not in hidden]
    adamw = TorchAdamW([params[n] for n in side], adamw_group_hyper(cfg, False))
    states, losses = {}, []
    for tokens, targets in batches:
        for q in params.values():
            q.grad = None
        _, loss = forward(params, c, tokens, targets)
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            adamw.step([params[n].grad.clone() for n in side], 1.0)
            for n in hidden:
                qkv = 3 if n.endswith("c_attn.weight") else 1
                if cfg["name"] == "soap":
                    soap_step(params[n], params[n].grad.clone(), states.setdefault(n, {}), cfg["soap"], cfg["lr"],
                              dtype=dtype)
                else:
                    muon_step(params[n], params[n].grad.clone(), states.setdefault(n, {}), cfg["muon"], cfg["lr"],
                              cfg.get("weight_decay", 0.0), qkv)
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20240520)
    c = CFG
    p = init_params(c, gen)
    write_safetensors(os.path.join(args.out, "model.safetensors"), p)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(dict(c, batch_size=B, **{"adamw_" + k: v for k, v in ADAMW.items() if k != "betas"},
                       adamw_beta1=ADAMW["betas"][0], adamw_beta2=ADAMW["betas"][1]), f)

    tokens, targets = batch(c, gen)
    np.save(os.path.join(args.out, "tokens.npy"), tokens.numpy().astype(np.int32))
    np.save(os.path.join(args.out, "targets.npy"), targets.numpy().astype(np.int32))
    logits, loss = forward(p, c, tokens, targets)
    loss.backward()
    np.save(os.path.join(args.out, "logits.npy"), logits.detach().numpy())
    np.save(os.path.join(args.out, "loss.npy"), np.array([loss.item()], dtype=np.float64))
    for name, t in p.items():
        np.save(os.path.join(args.out, f"grad.{name}.npy"), t.grad.numpy())

    # 10 AdamW steps, a fresh batch each step.
    for t in p.values():
        t.grad = None
    opt = torch.optim.AdamW(list(p.values()), **ADAMW)
    losses = []
    for step in range(10):
        tk, tg = batch(c, gen)
        np.save(os.path.join(args.out, f"traj_tokens_{step}.npy"), tk.numpy().astype(np.int32))
        np.save(os.path.join(args.out, f"traj_targets_{step}.npy"), tg.numpy().astype(np.int32))
        opt.zero_grad()
        _, l = forward(p, c, tk, tg)
        l.backward()
        opt.step()
        losses.append(l.item())
    np.save(os.path.join(args.out, "traj_losses.npy"), np.array(losses, dtype=np.float64))

    # From the initial weights again, on walks of a random successor map (llama_reference's batches:
    # a law the model learns within the steps, so that every case's loss visibly falls).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from llama_reference import batch as walk_batch
    init = {n: t.detach() for n, t in init_params(c, torch.Generator().manual_seed(20240520)).items()}
    successor = torch.randperm(c["vocab_size"], generator=gen)
    batches = [walk_batch(c, gen, successor, OPT_BATCH) for _ in range(OPT_STEPS)]
    for step, (tk, tg) in enumerate(batches):
        np.save(os.path.join(args.out, f"opt_tokens_{step}.npy"), tk.numpy().astype(np.int32))
        np.save(os.path.join(args.out, f"opt_targets_{step}.npy"), tg.numpy().astype(np.int32))
    for case in OPT_CASES:
        np.save(os.path.join(args.out, f"opt_losses.{case['name']}.npy"),
                np.array(optimizer_trajectory(case, c, init, batches), dtype=np.float64))
        if case["name"] == "soap":
            # Eigenbases in float32: how far round-off moves the trajectory (conditioning).
            np.save(os.path.join(args.out, "opt_losses.soap_fp32.npy"),
                    np.array(optimizer_trajectory(case, c, init, batches, torch.float32), dtype=np.float64))
    with open(os.path.join(args.out, "opt_cases.json"), "w") as f:
        json.dump(dict(steps=OPT_STEPS, batch_size=OPT_BATCH, cases=OPT_CASES), f, indent=1)
    print(f"wrote GPT-2 reference to {args.out}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
