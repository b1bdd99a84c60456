#!/usr/bin/env python3
"""Every command shown in README.md and docs/*.md runs as shown.

The shell blocks (```sh) are read command by command (continuation lines joined, trailing
`# comments` dropped, `a && b` split):
- a block whose info string says `sh runnable` is run as written, with bash -e, in a scratch
  directory where `build` is the build tree and the repository's folders are at hand; it must exit 0;
- every other command is checked in its --help form, since it needs a cluster, a GPU, minutes or
  the network: its program exists (a built program under build/, a script of the repository);
  for precon and precon-train each subcommand word names a subcommand and every --option is one
  the subcommand's --help lists; for a Python script every --option is one its --help lists; a
  shell script's verb (`cluster.sh up`) is one of its case labels; a repository path among the
  arguments (recipes/x.toml) exists.
First checks itself on a planted page with one fault of each kind, then the repository. Prints
every problem with its file and line; exits 1 if there is one."""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
EXTERNAL = {"cmake", "ctest", "export", "cd", "sudo", "systemctl", "curl", "sbatch", "srun", "squeue", "echo"}
REPO_DIRS = ("recipes", "deploy", "tests", "docs", "web", "orchestrator", "worker", "kernels", "cmake")


def shell_blocks(path):
    """(line number, info string, [(line number, command)]) of each ```sh block."""
    blocks, current = [], None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    pending, pending_line = "", 0
    for n, line in enumerate(lines, 1):
        stripped = line.strip()
        if current is None:
            if stripped.startswith("```sh"):
                current = (n, stripped[3:].strip(), [])
            continue
        if stripped.startswith("```"):
            blocks.append(current)
            current = None
            continue
        text = re.sub(r"(^|\s)#\s.*$", "", line).rstrip()
        if not pending:
            pending_line = n
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        command = (pending + text).strip()
        pending = ""
        if command:
            current[2].append((pending_line, command))
    return blocks


class Checker:
    def __init__(self, build, root):
        self.build, self.root = build, root
        self.problems = []
        self.help_cache = {}

    def fail(self, where, what):
        self.problems.append(f"{where}: {what}")

    def help_text(self, argv):
        key = tuple(argv)
        if key not in self.help_cache:
            try:
                r = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60)
                self.help_cache[key] = (r.returncode, r.stdout + r.stderr)
            except (OSError, subprocess.TimeoutExpired) as e:
                self.help_cache[key] = (127, str(e))
        return self.help_cache[key]

    def program(self, word):
        """The file a command's first word runs, or None."""
        if word.startswith("build/"):
            return os.path.join(self.build, word[len("build/"):])
        if "/" in word and not word.startswith("/"):
            return os.path.join(self.root, word)
        return None

    def check_options(self, where, help_text, args, what):
        for arg in args:
            if arg.startswith("--") and len(arg) > 2:
                name = arg.split("=", 1)[0]
                if not re.search(re.escape(name) + r"(?![\w-])", help_text):
                    self.fail(where, f"{what} has no option {name}")

    def check_paths(self, where, args):
        for arg in args:
            top = arg.split("/", 1)[0]
            if "/" in arg and top in REPO_DIRS and not any(c in arg for c in "*{}<>$"):
                if not os.path.exists(os.path.join(self.root, arg)):
                    self.fail(where, f"{arg} does not exist in the repository")

    def check_precon(self, where, path, args):
        sub = []
        words = [a for a in args]
        while words and not words[0].startswith("-"):
            code, text = self.help_text([path] + sub)
            names = set(re.findall(r"^\s{2}([a-z][a-z0-9-]*)\s", text.split("Subcommands:", 1)[1], re.M)) \
                if "Subcommands:" in text else set()
            if words[0] in names:
                sub.append(words.pop(0))
                continue
            if names:
                self.fail(where, f"{os.path.basename(path)} has no subcommand {words[0]}")
                return
            break
        code, text = self.help_text([path] + sub)
        if code != 0:
            self.fail(where, f"`{' '.join([os.path.basename(path)] + sub)} --help` exits {code}")
            return
        self.check_options(where, text, args, " ".join([os.path.basename(path)] + sub))
        self.check_paths(where, args)

    def check_command(self, where, tokens):
        if tokens and tokens[0] in ("python3", PYTHON, "/usr/bin/python3"):
            tokens = tokens[1:]
        if not tokens or tokens[0] in EXTERNAL or "=" in tokens[0]:
            return
        path = self.program(tokens[0])
        if path is None:
            self.fail(where, f"{tokens[0]} is neither a built program nor a script of the repository")
            return
        if not os.path.exists(path):
            self.fail(where, f"{tokens[0]} does not exist")
            return
        args = tokens[1:]
        base = os.path.basename(path)
        if base in ("precon", "precon-train"):
            self.check_precon(where, path, args)
        elif path.endswith(".py"):
            code, text = self.help_text([PYTHON, path])
            if code != 0:
                self.fail(where, f"`{tokens[0]} --help` exits {code}")
            else:
                self.check_options(where, text, args, tokens[0])
            self.check_paths(where, args)
        elif path.endswith(".sh"):
            if not os.access(path, os.X_OK):
                self.fail(where, f"{tokens[0]} is not executable")
            with open(path, encoding="utf-8", errors="replace") as f:
                script = f.read()
            verbs = [a for a in args if not a.startswith("-")]
            if verbs and "case" in script and not re.search(r"^\s*\(?[\w|-]*\b" + re.escape(verbs[0]) + r"\b[\w|-]*\)",
                                                            script, re.M):
                self.fail(where, f"{tokens[0]} has no verb {verbs[0]}")
            self.check_options(where, script, args, tokens[0])
        elif not os.access(path, os.X_OK):
            self.fail(where, f"{tokens[0]} is not executable")

    def run_block(self, where, commands):
        with tempfile.TemporaryDirectory() as scratch:
            os.symlink(self.build, os.path.join(scratch, "build"))
            for d in REPO_DIRS:
                if os.path.isdir(os.path.join(self.root, d)):
                    os.symlink(os.path.join(self.root, d), os.path.join(scratch, d))
            script = "set -euo pipefail\n" + "\n".join(c for _, c in commands) + "\n"
            try:
                r = subprocess.run(["bash", "-c", script], cwd=scratch, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                self.fail(where, "runnable block did not end within 300 s")
                return
            if r.returncode != 0:
                self.fail(where, f"runnable block exited {r.returncode}: {(r.stderr or r.stdout).strip()[-600:]}")

    def check_page(self, path, shown):
        for start, info, commands in shell_blocks(path):
            if "runnable" in info.split():
                self.run_block(f"{shown}:{start}", commands)
                continue
            for n, command in commands:
                for part in re.split(r"\s&&\s|\s\|\|\s|;\s", command):
                    part = part.strip().rstrip("&").strip()
                    try:
                        tokens = shlex.split(part)
                    except ValueError as e:
                        self.fail(f"{shown}:{n}", f"cannot be split into words ({e})")
                        continue
                    self.check_command(f"{shown}:{n}", tokens)


def pages(root):
    out = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    out += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return out


def self_check(build):
    """A planted page with one fault of each kind: each must be reported."""
    page = """
```sh
build/orchestrator/precon recipe keyz
build/orchestrator/precon recipe check recipes/quickstart.toml --no-such-option
build/orchestrator/precon recipe check recipes/no-such-recipe.toml
build/worker/precon-train-missing keys
tests/docs/check_links.py --no-such-flag
deploy/slurm/cluster.sh sideways
```

```sh runnable
false
```
"""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "planted.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
        checker = Checker(build, ROOT)
        checker.check_page(path, "planted.md")
    expected = ["no subcommand keyz", "no option --no-such-option", "no-such-recipe.toml does not exist",
                "precon-train-missing does not exist", "check_links.py has no option --no-such-flag",
                "no verb sideways", "runnable block exited 1"]
    found = "\n".join(checker.problems)
    missed = [e for e in expected if e not in found]
    if missed or len(checker.problems) != len(expected):
        print("check_commands: the self-check on a planted page failed; expected", expected, "got:", file=sys.stderr)
        print(found, file=sys.stderr)
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="the build tree (what build/ means in the docs)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    if not self_check(build):
        return 1
    checker = Checker(build, ROOT)
    count = 0
    for path in pages(ROOT):
        shown = os.path.relpath(path, ROOT)
        checker.check_page(path, shown)
        count += sum(len(b[2]) for b in shell_blocks(path))
    for p in checker.problems:
        print("docs_commands:", p, file=sys.stderr)
    if not checker.problems:
        print(f"every command of README.md and docs/ holds: {count} commands")
    return 1 if checker.problems else 0


if __name__ == "__main__":
    sys.exit(main())
