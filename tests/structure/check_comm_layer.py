#!/usr/bin/env python3
"""One layer owns communication (issue 35 §3): worker/parallel/ holds what crosses ranks, so the
model (worker/model/) and the optimizers (worker/optim/) include no communicator header, name no
Communicator (nor make a local one) and call no collective. The model computes through the
tensor-parallel layers (worker/parallel/layers.h), which own their regions' communication; the
optimizers compute the math of one step and ask for what crosses ranks through the interfaces they
are given (worker/optim/exchange.h), which worker/parallel implements. The optimizers include
nothing of worker/parallel (dependencies point train -> parallel -> optim).

The collectives are read from worker/parallel/communicator.h (its virtual methods but the queries
rank, size and backend, and split, whose name a parameter's split() shares: naming Communicator
already rules it out).

The distributed optimizer lives in worker/parallel too (distributed_optimizer.h): who computes each
unit of a step (assign_owners) and how the results reach every rank. So worker/optim names no
assign_owners, and the optimizers whose units it plans (OWNED: Shampoo, SOAP, Muon) read no group's
index or size and ask a ShareGroup for nothing mid-step but Muon's sums over a matrix's
tensor-parallel parts (tp_->sum, the math of Newton–Schulz on parts): their results go through the
OwnedResults they are given (results_); AdamWGroup's ranges are an OwnedRanges (ranges_). Prints every violation; exits 1 if there is one."""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PARTS = ("worker/model", "worker/optim")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
QUERIES = {"rank", "size", "backend", "split"}
OWNED = ("worker/optim/shampoo.cpp", "worker/optim/soap.cpp", "worker/optim/muon.cpp")
# Exchange only through what worker/parallel plans: the optimizers above and AdamWGroup, whose
# ranges (parallel.distributed_optimizer) are an OwnedRanges (ranges_).
PLANNED = OWNED + ("worker/optim/adamw.cpp",)
# In OWNED: a group's place or size, or an exchange, other than through results_ (OwnedResults) or
# Muon's sums over a matrix's tensor-parallel parts.
GROUP_QUERY = re.compile(r"(?:\.|->)\s*(index|count)\s*\(\s*\)")
EXCHANGE = re.compile(r"(\w+)\s*(?:\.|->)\s*(share|sum|max)\s*\(")
ALLOWED_EXCHANGE = {("results_", "share"), ("results_", "max"), ("tp_", "sum"), ("ranges_", "share")}


def collectives():
    text = open(os.path.join(ROOT, "worker/parallel/communicator.h"), encoding="utf-8").read()
    start = text.index("class Communicator")
    body = text[start:text.index("};", start)]
    names = set(re.findall(r"virtual\s+[^;{}()]*?\b(\w+)\s*\(", body)) - QUERIES
    names.discard("Communicator")
    if not {"all_reduce_sum", "all_gather", "broadcast"} <= names:
        raise SystemExit("check_comm_layer: could not read the collectives from communicator.h: %s" % sorted(names))
    return sorted(names)


def sources(part):
    for base, _, files in os.walk(os.path.join(ROOT, part)):
        for f in sorted(files):
            if f.endswith((".h", ".cpp", ".cu", ".cuh")):
                yield os.path.join(base, f)


def code(line):
    """The line without its // comment and string literals (a comment may name a collective)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    return line.split("//", 1)[0]


def main():
    names = collectives()
    call = re.compile(r"(?:\.|->)\s*(%s)\s*\(" % "|".join(names))
    named = re.compile(r"\b(Communicator|PendingCollective|make_local_communicator)\b")
    problems = []
    for part in PARTS:
        for path in sources(part):
            rel = os.path.relpath(path, ROOT)
            for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = INCLUDE.match(line)
                if m:
                    inc = m.group(1)
                    if "communicator" in os.path.basename(inc):
                        problems.append("%s:%d: includes the communicator header %s" % (rel, n, inc))
                    elif part == "worker/optim" and inc.startswith("worker/parallel/"):
                        problems.append("%s:%d: includes %s (worker/parallel includes worker/optim, not the "
                                        "reverse)" % (rel, n, inc))
                    continue
                c = code(line)
                for m in call.finditer(c):
                    problems.append("%s:%d: calls the collective %s" % (rel, n, m.group(1)))
                for m in named.finditer(c):
                    problems.append("%s:%d: names %s" % (rel, n, m.group(1)))
                if part == "worker/optim" and re.search(r"\bassign_owners\b", c):
                    problems.append("%s:%d: names assign_owners (owners are assigned in "
                                    "worker/parallel/distributed_optimizer.h)" % (rel, n))
                if rel in OWNED:
                    for m in GROUP_QUERY.finditer(c):
                        problems.append("%s:%d: reads a group's %s() (the owners are planned in worker/parallel)"
                                        % (rel, n, m.group(1)))
                if rel in PLANNED:
                    for m in EXCHANGE.finditer(c):
                        if (m.group(1), m.group(2)) not in ALLOWED_EXCHANGE:
                            problems.append("%s:%d: calls %s on %s mid-step (results go through results_, "
                                            "an OwnedResults)" % (rel, n, m.group(2), m.group(1)))
    for rel in PLANNED:
        if not os.path.exists(os.path.join(ROOT, rel)):
            problems.append("%s: listed as an optimizer that worker/parallel plans, but missing" % rel)
    for p in problems:
        print(p)
    print("%d communication-layer violation(s) in %s (collectives: %s)" % (len(problems), ", ".join(PARTS),
                                                                          ", ".join(names)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
