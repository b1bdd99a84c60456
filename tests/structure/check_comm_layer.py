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
already rules it out). Prints every violation; exits 1 if there is one."""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PARTS = ("worker/model", "worker/optim")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
QUERIES = {"rank", "size", "backend", "split"}


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
    for p in problems:
        print(p)
    print("%d communication-layer violation(s) in %s (collectives: %s)" % (len(problems), ", ".join(PARTS),
                                                                          ", ".join(names)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
