"""Independent FLOP counts for tests/worker/optim/test_flops.cpp: PyTorch's own counter around plain
torch implementations of the optimizers' pieces and of whole steps (Muon and Shampoo as
optim_reference.py writes them, on its tiny GPT-2; SOAP as worker/optim/soap.cpp orders its work).

The counter counts matrix products only, 2·m·n·k each: torch.utils.flop_counter.FlopCounterMode
where it exists (torch >= 2.1), else the profiler's with_flops summed over aten::mm / addmm / bmm /
baddbmm, which counts them the same way. Neither counts eigh or QR: their calls and sizes are
recorded instead, so the C++ test can check how many ran and how large.

Prints one JSON object to stdout.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import optim_reference as ref  # noqa: E402

try:
    from torch.utils.flop_counter import FlopCounterMode
except ImportError:
    FlopCounterMode = None

MM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
DECOMPOSITIONS = {"eigh": "eigh", "qr": "qr"}  # torch.linalg function -> kind
KELLER = [(3.4445, -4.7750, 2.0315)]
CUBIC5 = [(3.3656576, -3.3420992, 0.0), (2.5744352, -1.4957376, 0.0), (2.5368962, -1.4312570, 0.0),
          (2.4418906, -1.2764040, 0.0), (2.2230472, -0.9630650, 0.0)]


class _Decompositions:
    """Records the size of every torch.linalg.eigh and torch.linalg.qr call while active (a wrapper
    around the two functions: a dispatch mode would make the profiler record some products twice)."""

    def __init__(self):
        self.seen = []

    def __enter__(self):
        self.saved = {name: getattr(torch.linalg, name) for name in DECOMPOSITIONS}
        for name, fn in self.saved.items():
            setattr(torch.linalg, name, self._recording(DECOMPOSITIONS[name], fn))
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(torch.linalg, name, fn)

    def _recording(self, kind, fn):
        def call(a, *args, **kwargs):
            self.seen.append([kind, int(a.shape[-1])])
            return fn(a, *args, **kwargs)
        return call


def count(fn):
    """(matrix-product FLOPs, [[kind, n], ...] decompositions) of running fn()."""
    decompositions = _Decompositions()
    if FlopCounterMode is not None:
        counter = FlopCounterMode(display=False)
        with counter, decompositions:
            fn()
        return int(counter.get_total_flops()), decompositions.seen
    from torch.profiler import ProfilerActivity, profile
    # record_shapes: without it the profiler's FLOPs of an op can come from another op's shapes.
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as prof:
        with decompositions:
            fn()
    return int(sum(e.flops for e in prof.events() if e.name in MM_OPS)), decompositions.seen


def newton_schulz(g, schedule, eps=1e-7):
    """kernels/newton_schulz.cpp's iteration: no A² product for a cubic step (c = 0)."""
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / (x.norm() + eps)
    for a, b, c in schedule:
        A = x @ x.T
        B = b * A + c * (A @ A) if c != 0 else b * A
        x = a * x + B @ x
    return x


def newton_root(a, p, iterations, eps=1e-6):
    """The coupled Newton iteration of kernels/inverse_root.cpp for a fixed iteration count."""
    n = a.shape[0]
    eye = torch.eye(n, dtype=a.dtype)
    m = a + eps * eye
    z = (1 + p) / (2 * m.norm())
    m = z * m
    x = z ** (1.0 / p) * eye
    for _ in range(iterations):
        t = ((p + 1) * eye - m) / p
        x = x @ t
        m = torch.linalg.matrix_power(t, p) @ m
    return x


class SoapMirror:
    """One matrix under SOAP in worker/optim/soap.cpp's order: step 1 builds the factors and their
    eigenbases; later steps rotate G in and the direction out; a refresh carries M out and back in
    around a power step L·Q, the estimates Σ_i Q∘P and a QR per rotated side."""

    def __init__(self, s, rows, cols):
        self.beta1, self.beta2 = s.get("beta1", 0.95), s.get("beta2", 0.95)
        sb = s.get("shampoo_beta", -1)
        self.sb = self.beta2 if sb < 0 else sb
        self.freq = s.get("precondition_frequency", 10)
        self.normalize = s.get("normalize_grads", False)
        max_dim = s.get("max_preconditioner_dim", 10000)
        self.left, self.right = rows <= max_dim, cols <= max_dim
        self.L = torch.zeros(rows, rows, dtype=torch.float64) if self.left else None
        self.R = torch.zeros(cols, cols, dtype=torch.float64) if self.right else None
        self.M = torch.zeros(rows, cols, dtype=torch.float64)
        self.V = torch.zeros(rows, cols, dtype=torch.float64)
        self.k = 0

    def rotate(self, x, into):
        if self.left:
            x = (self.QL.T if into else self.QL) @ x
        if self.right:
            x = x @ (self.QR if into else self.QR.T)
        return x

    def factors(self, g):
        if self.left:
            self.L = self.sb * self.L + (1 - self.sb) * (g @ g.T)
        if self.right:
            self.R = self.sb * self.R + (1 - self.sb) * (g.T @ g)

    def step(self, g):
        g = g.double()
        if self.k == 0:
            self.factors(g)
            self.QL = torch.flip(torch.linalg.eigh(self.L)[1], [1]) if self.left else None
            self.QR = torch.flip(torch.linalg.eigh(self.R)[1], [1]) if self.right else None
            self.k = 1
            return
        gp = self.rotate(g, True)
        self.M = self.beta1 * self.M + (1 - self.beta1) * gp
        self.V = self.beta2 * self.V + (1 - self.beta2) * gp * gp
        d = self.rotate(self.M / (self.V.sqrt() + 1e-8), False)
        if self.normalize:
            d = d / (1e-30 + (d * d).mean().sqrt())
        self.factors(g)
        if self.k % self.freq == 0:
            self.M = self.rotate(self.M, False)
            for dim, side in ((0, "L"), (1, "R")):
                factor = getattr(self, side)
                if factor is None:
                    continue
                q = getattr(self, "Q" + side)
                p = factor @ q
                order = torch.argsort((q * p).sum(0), descending=True)
                self.V = self.V.index_select(dim, order)
                setattr(self, "Q" + side, torch.linalg.qr(p[:, order])[0])
            self.M = self.rotate(self.M, True)
        self.k += 1


SHAPES = [(48, 48), (32, 80), (80, 32)]  # square, wide, tall

WHOLE = [
    dict(name="muon_ns5", config=dict(name="muon", muon=dict(ns_steps=5, coefficients="keller", split_qkv=True))),
    dict(name="muon_ns3", config=dict(name="muon", muon=dict(ns_steps=3, coefficients="keller", split_qkv=True))),
    dict(name="muon_split_heads", config=dict(name="muon", muon=dict(ns_steps=5, coefficients="keller",
                                                                     split_heads=True))),
    dict(name="normuon_whole_nesterov_off",
         config=dict(name="muon", muon=dict(variant="normuon", ns_steps=4, coefficients="keller", split_qkv=False,
                                            nesterov=False))),
    dict(name="shampoo_f1_adam", config=dict(name="shampoo", shampoo=dict(precondition_frequency=1, beta2=1.0))),
    dict(name="shampoo_f3_start3_blocks",
         config=dict(name="shampoo", shampoo=dict(precondition_frequency=3, start_preconditioning_step=3,
                                                  max_preconditioner_dim=10, grafting="sgd", beta2=0.99))),
    dict(name="shampoo_f2_all_matrices_none",
         config=dict(name="shampoo", shampoo=dict(precondition_frequency=2, grafting="none", params="all-matrices",
                                                  max_preconditioner_dim=24, beta2=0.95))),
    dict(name="soap_f2_one_sided", config=dict(name="soap", soap=dict(precondition_frequency=2,
                                                                     max_preconditioner_dim=16))),
    dict(name="soap_f1_two_sided", config=dict(name="soap", soap=dict(precondition_frequency=1,
                                                                     normalize_grads=True))),
]
WHOLE_STEPS = 7


def whole_case(case):
    """Per step 1..WHOLE_STEPS: the matrix products and decompositions of the case's optimizer on the
    tiny GPT-2's routed matrices (the AdamW group does none)."""
    cfg = case["config"]
    name = cfg["name"]
    torch.manual_seed(7)
    table = ref.param_table()
    steps = []
    states = {}
    params = {n: torch.randn(shape) * 0.02 for n, shape, *_ in table}
    for t in range(1, WHOLE_STEPS + 1):
        grads = {n: torch.randn(shape) * 0.1 for n, shape, *_ in table}

        def run():
            with torch.no_grad():
                for n, shape, kind, fin, fout, qkv in table:
                    if name == "muon" and kind == "matrix":
                        ref.muon_step(params[n], grads[n], states.setdefault(n, {}), cfg["muon"], 0.02, 0.0, qkv,
                                      heads=ref.heads_of(n))
                    elif name == "soap" and kind == "matrix":
                        states.setdefault(n, SoapMirror(cfg["soap"], *shape)).step(grads[n])
                    elif name == "shampoo" and ref.shampoo_routed(kind, cfg["shampoo"].get("params", "hidden")):
                        s = dict(cfg["shampoo"], epsilon=1e-6)
                        size = s.get("max_preconditioner_dim", 1024)
                        for bi, (r0, rn) in enumerate(ref.split(shape[0], size)):
                            for bj, (c0, cn) in enumerate(ref.split(shape[1], size)):
                                ref.shampoo_block_step(params[n][r0:r0 + rn, c0:c0 + cn], grads[n][r0:r0 + rn, c0:c0 + cn],
                                                       states.setdefault((n, bi, bj), {}), s, t, 0.01, 0.0)

        matmul, decompositions = count(run)
        steps.append(dict(step=t, matmul=matmul, decompositions=decompositions))
    return dict(name=case["name"], config=cfg, steps=steps)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(20240601)
    out = dict(counter="FlopCounterMode" if FlopCounterMode else "torch.profiler with_flops", ns=[],
               shampoo_block=[], root=[], soap_rotation=[], soap_refresh=[])
    for rows, cols in SHAPES:
        g = torch.randn(rows, cols)
        for label, schedule in (("keller5", KELLER * 5), ("keller3", KELLER * 3), ("cubic5", CUBIC5)):
            matmul, _ = count(lambda: newton_schulz(g, schedule))
            out["ns"].append(dict(rows=rows, cols=cols, schedule=label, matmul=matmul))
        # Shampoo: the statistics of one block and its preconditioned direction L⁻ Ĝ R⁻.
        li, ri = torch.eye(rows), torch.eye(cols)
        matmul, _ = count(lambda: (g @ g.T, g.T @ g, li @ g @ ri))
        out["shampoo_block"].append(dict(rows=rows, cols=cols, matmul=matmul))
        for left, right in ((True, True), (True, False), (False, True)):
            soap = SoapMirror({}, rows, cols)
            soap.left, soap.right = left, right
            soap.QL, soap.QR = torch.eye(rows, dtype=torch.float64), torch.eye(cols, dtype=torch.float64)
            soap.L = torch.eye(rows, dtype=torch.float64) if left else None
            soap.R = torch.eye(cols, dtype=torch.float64) if right else None
            x = g.double()
            matmul, _ = count(lambda: soap.rotate(soap.rotate(x, True), False))
            out["soap_rotation"].append(dict(rows=rows, cols=cols, left=left, right=right, matmul=matmul))
            soap.k, soap.freq = 1, 1
            soap.M = x.clone()

            def refresh():
                soap.M = soap.rotate(soap.M, False)
                for side in ("L", "R"):
                    factor = getattr(soap, side)
                    if factor is not None:
                        q = getattr(soap, "Q" + side)
                        setattr(soap, "Q" + side, torch.linalg.qr(factor @ q)[0])
                soap.M = soap.rotate(soap.M, True)

            matmul, decompositions = count(refresh)
            out["soap_refresh"].append(dict(rows=rows, cols=cols, left=left, right=right, matmul=matmul,
                                            decompositions=decompositions))
    for n in (16, 40):
        a = torch.randn(n, 2 * n)
        a = a @ a.T
        matmul, decompositions = count(lambda: ref.inverse_root(a, 1e-6, 4))
        out["root"].append(dict(n=n, method="eigh", p=4, iterations=0, matmul=matmul, decompositions=decompositions))
        for p, iterations in ((4, 7), (2, 5), (3, 4)):
            matmul, decompositions = count(lambda: newton_root(a.double(), p, iterations))
            out["root"].append(dict(n=n, method="newton", p=p, iterations=iterations, matmul=matmul,
                                    decompositions=decompositions))
    out["whole"] = [whole_case(c) for c in WHOLE]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
