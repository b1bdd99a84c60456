#!/usr/bin/python3
"""Writes reference inputs and PyTorch results for the kernel reference tests.

Newton-Schulz is computed with torch in float32 (the same iteration Muon's reference code runs);
inverse roots with torch.linalg.eigh in float64 as ground truth. The C++ test
(test_torch_reference.cpp) reads manifest.txt and the .npy files.
"""
import argparse
import os

import numpy as np
import torch

KELLER = [(3.4445, -4.7750, 2.0315)]
POLAR_EXPRESS = [(8.2051, -22.9019, 16.4607), (4.0664, -2.8612, 0.5184), (3.9096, -2.8234, 0.5250),
                 (3.2856, -2.4153, 0.4853), (2.2779, -1.6198, 0.3985), (1.8726, -1.2307, 0.3585),
                 (1.8564, -1.2132, 0.3568), (1.8750, -1.2500, 0.3750)]
SETS = {"keller": KELLER, "polar-express": POLAR_EXPRESS}


def newton_schulz(g, coeffs, steps, eps):
    x = g.clone().float()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (x.norm() + eps)
    for i in range(steps):
        a, b, c = coeffs[min(i, len(coeffs) - 1)]
        s = x @ x.T
        poly = b * s + c * (s @ s)
        x = a * x + poly @ x
    return x.T if tall else x


def inverse_root(a, p, eps):
    a64 = a.double()
    w, q = torch.linalg.eigh(a64)
    w = torch.clamp(w, min=0.0) + eps
    return (q * w.pow(-1.0 / p)) @ q.T


def random_spd(n, cond, gen):
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    w = torch.logspace(0, -np.log10(cond), n, dtype=torch.float64)
    return ((q * w) @ q.T).float()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(args.seed)
    torch.set_num_threads(1)
    lines = []

    ns_cases = [((1, 1), "keller", 5), ((7, 13), "keller", 5), ((13, 7), "keller", 5), ((64, 64), "keller", 5),
                ((96, 160), "keller", 6), ((160, 96), "polar-express", 8), ((48, 200), "polar-express", 10)]
    for i, (shape, name, steps) in enumerate(ns_cases):
        g = torch.randn(*shape, generator=gen)
        out = newton_schulz(g, SETS[name], steps, 1e-7)
        np.save(os.path.join(args.out, f"ns{i}_in.npy"), g.numpy())
        np.save(os.path.join(args.out, f"ns{i}_out.npy"), out.numpy())
        lines.append(f"ns ns{i} {name} {steps} 1e-7")

    root_cases = [(8, 10.0, 4, 1e-6), (64, 1e3, 4, 1e-6), (200, 1e2, 2, 1e-6), (96, 1e4, 4, 1e-4)]
    for i, (n, cond, p, eps) in enumerate(root_cases):
        a = random_spd(n, cond, gen)
        out = inverse_root(a, p, eps)
        np.save(os.path.join(args.out, f"root{i}_in.npy"), a.numpy())
        np.save(os.path.join(args.out, f"root{i}_out.npy"), out.numpy())
        lines.append(f"root root{i} {p} {eps} {cond}")

    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} reference cases to {args.out}")


if __name__ == "__main__":
    main()
