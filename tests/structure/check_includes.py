#!/usr/bin/env python3
"""The parts' seams, checked on the source tree: dependencies point orchestrator -> worker ->
kernels, and the orchestrator reaches the worker only through its stated interface (the recipe
schema, the exit codes, the checkpoint listing, data preparation for `precon data`, the memory
estimate, the HTTP client, the file helpers and the error base). Prints every include that breaks a rule; exits 1 if there is one."""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORKER_INTERFACE = {
    "worker/config/config.h", "worker/config/keys.h", "worker/config/parse.h",  # the schema
    "worker/config/choice.h",                                                    # its choices as enums
    "worker/train/exit_codes.h",                                                 # how a trainer ends
    "worker/ckpt/checkpoint.h", "worker/ckpt/objective.h",                       # the checkpoint listing
    "worker/data/prepare.h", "worker/data/prepare_cli.h",                        # precon data prepare
    "worker/model/memory_estimate.h",                                            # what a trial needs
    "worker/common/http_client.h", "worker/common/error.h",
    "worker/common/file_io.h",                                                   # atomic, private writes
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def sources(part):
    for base, _, files in os.walk(os.path.join(ROOT, part)):
        for f in files:
            if f.endswith((".h", ".cpp", ".cu", ".cuh")):
                yield os.path.join(base, f)


def main():
    problems = []
    for part, forbidden in (("kernels", ("worker/", "orchestrator/")), ("worker", ("orchestrator/",))):
        for path in sources(part):
            for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = INCLUDE.match(line)
                if m and m.group(1).startswith(forbidden):
                    problems.append("%s:%d: %s includes %s (dependencies point orchestrator -> worker -> kernels)"
                                    % (os.path.relpath(path, ROOT), n, part, m.group(1)))
    for path in sources("orchestrator"):
        for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            m = INCLUDE.match(line)
            if m and m.group(1).startswith("worker/") and m.group(1) not in WORKER_INTERFACE:
                problems.append("%s:%d: the orchestrator includes %s, outside the worker's interface (%s)"
                                % (os.path.relpath(path, ROOT), n, m.group(1), ", ".join(sorted(WORKER_INTERFACE))))
    for p in problems:
        print(p)
    print("%d include rule violation(s)" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
