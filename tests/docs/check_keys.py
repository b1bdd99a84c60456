#!/usr/bin/env python3
"""docs/keys.md is what `precon recipe keys --format markdown` prints.

Fails with a unified diff (and the command that regenerates the file) when a key was added,
removed or changed in the key table without regenerating the page. Before comparing, it checks
that the generated page is well formed: one table row per key that `precon recipe keys` (text)
lists, each with five cells, so a generator that dropped rows or broke a cell would fail here too.
"""
import argparse
import difflib
import subprocess
import sys


def cells(row):
    """The cells of a markdown table row, honouring escaped pipes."""
    out, cur, i = [], "", 0
    body = row.strip()[1:-1]
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur += "|"
            i += 2
            continue
        if body[i] == "|":
            out.append(cur.strip())
            cur = ""
        else:
            cur += body[i]
        i += 1
    out.append(cur.strip())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precon", required=True)
    ap.add_argument("--keys", required=True, help="docs/keys.md")
    args = ap.parse_args()

    text = subprocess.run([args.precon, "recipe", "keys"], check=True, capture_output=True, text=True).stdout
    names = [line.split()[0] for line in text.splitlines()[1:] if line.strip()]
    generated = subprocess.run([args.precon, "recipe", "keys", "--format", "markdown"], check=True,
                               capture_output=True, text=True).stdout

    rows = [line for line in generated.splitlines() if line.startswith("| `")]
    problems = []
    row_names = []
    for row in rows:
        c = cells(row)
        if len(c) != 5:
            problems.append(f"generated row has {len(c)} cells, not 5: {row}")
            continue
        row_names.append(c[0].strip("` "))
    if row_names != names:
        missing = sorted(set(names) - set(row_names))
        extra = sorted(set(row_names) - set(names))
        if missing or extra:
            problems.append(f"generated rows differ from `precon recipe keys`: missing {missing}, extra {extra}")
    if len(names) < 100:
        problems.append(f"`precon recipe keys` lists only {len(names)} keys")

    with open(args.keys, encoding="utf-8") as f:
        committed = f.read()
    if committed != generated:
        diff = difflib.unified_diff(committed.splitlines(), generated.splitlines(), "docs/keys.md (committed)",
                                    "precon recipe keys --format markdown", lineterm="")
        problems.append("docs/keys.md is stale; regenerate it with\n"
                        "  build/orchestrator/precon recipe keys --format markdown > docs/keys.md\n" +
                        "\n".join(list(diff)[:80]))
    for p in problems:
        print("docs_keys:", p, file=sys.stderr)
    if not problems:
        print(f"docs/keys.md is current: {len(row_names)} keys")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
