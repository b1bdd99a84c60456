#!/usr/bin/env python3
"""The documentation's references, checked on the source tree:
- every relative link and image of README.md and docs/*.md names a file that exists, and a
  `#section` in it names a heading of the page it points to (GitHub's anchors);
- every source comment that cites a section of a page ("docs/design.md, Checkpoints") names a
  heading that page has;
- nothing cites a file outside the repository (the parent directory's shared folder).
First checks itself on a small tree with one of each fault, then the repository. Prints every
problem; exits 1 if there is one."""
import os
import re
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CITATION = re.compile(r"docs/([a-z_]+\.md), ")
OUTSIDE = ".." + "/shared"
SOURCE_PARTS = ("orchestrator", "worker", "kernels", "tests", "deploy", "web", "cmake", "recipes", ".ci")
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh", ".inc", ".py", ".sh", ".cmake", ".txt", ".toml", ".js", ".yml",
              ".json", ".md", "")


def without_code(text):
    """The text outside fenced code blocks and inline code spans, line by line (others blanked)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return out


def slug(title):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path):
    """(title, anchor) of each heading of a markdown file, in order, duplicates numbered."""
    result, seen, fenced = [], {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            m = None if fenced else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            title = m.group(2)
            base = slug(title)
            n = seen.get(base, 0)
            seen[base] = n + 1
            result.append((title, base if n == 0 else f"{base}-{n}"))
    return result


def check_page(root, page):
    problems = []
    path = os.path.join(root, page)
    with open(path, encoding="utf-8") as f:
        lines = without_code(f.read())
    for number, line in enumerate(lines, 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            where = f"{page}:{number}: {target}"
            if not dest.startswith(root + os.sep) and dest != root:
                problems.append(f"{where}: points outside the repository")
            elif not os.path.exists(dest):
                problems.append(f"{where}: {os.path.relpath(dest, root)} does not exist")
            elif anchor:
                if not dest.endswith(".md"):
                    problems.append(f"{where}: an anchor into a file that is not markdown")
                elif anchor not in [a for _, a in headings(dest)]:
                    problems.append(f"{where}: {os.path.relpath(dest, root)} has no heading with anchor #{anchor}")
    return problems


def pages(root):
    found = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        found += sorted(os.path.join("docs", f) for f in os.listdir(docs) if f.endswith(".md"))
    return found


def source_files(root):
    for part in SOURCE_PARTS:
        for base, dirs, files in os.walk(os.path.join(root, part)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "__pycache__")]
            for name in files:
                if os.path.splitext(name)[1] in SOURCE_EXT:
                    yield os.path.join(base, name)
    for name in os.listdir(root):
        if os.path.isfile(os.path.join(root, name)):
            yield os.path.join(root, name)


def cites(rest, title):
    """The text after "docs/page.md, " names the heading `title`, or its part before a colon."""
    for name in {title, title.split(":")[0]}:
        if rest.startswith(name) and (len(rest) == len(name) or not rest[len(name)].isalnum()):
            return True
    return False


def check_sources(root):
    problems = []
    for path in source_files(root):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        rel = os.path.relpath(path, root)
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue
        for number, line in enumerate(text.split("\n"), 1):
            if OUTSIDE in line:
                problems.append(f"{rel}:{number}: cites a file outside the repository ({OUTSIDE})")
            if rel.startswith("docs" + os.sep) or rel == "README.md":
                continue
            for m in CITATION.finditer(line):
                page = os.path.join(root, "docs", m.group(1))
                rest = line[m.end():]
                if not os.path.exists(page):
                    problems.append(f"{rel}:{number}: cites docs/{m.group(1)}, which does not exist")
                    continue
                titles = [t for t, _ in headings(page)]
                if not any(cites(rest, t) for t in titles):
                    problems.append(f"{rel}:{number}: docs/{m.group(1)} has no section \"{rest.strip()[:40]}\"; "
                                    f"its sections: {', '.join(titles)}")
    return problems


def check(root):
    problems = []
    for page in pages(root):
        problems += check_page(root, page)
    return problems + check_sources(root)


def self_test():
    """The checker finds one of each fault in a small tree, and nothing in its clean twin."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        os.makedirs(os.path.join(tmp, "worker"))
        with open(os.path.join(tmp, "docs", "design.md"), "w", encoding="utf-8") as f:
            f.write("# Design\n\n## Checkpoints: the `step_N` directories\n\n```\n# not a heading\n```\n")
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
            f.write("[ok](docs/design.md#checkpoints-the-step_n-directories) `[code](nowhere.md)`\n"
                    "[missing](docs/nothing.md) [bad anchor](docs/design.md#not-a-heading)\n"
                    "[outside](../elsewhere.md) [web](https://example.org/x)\n")
        with open(os.path.join(tmp, "worker", "a.h"), "w", encoding="utf-8") as f:
            f.write("// See docs/design.md, Checkpoints.\n// See docs/design.md, Formats.\n"
                    f"// See {OUTSIDE}/DESIGN.md.\n")
        found = check(tmp)
        expect = ["README.md:2: docs/nothing.md", "README.md:2: docs/design.md#not-a-heading",
                  "README.md:3: ../elsewhere.md", "worker/a.h:2:", "worker/a.h:3:"]
        missed = [e for e in expect if not any(p.startswith(e) for p in found)]
        extra = [p for p in found if not any(p.startswith(e) for e in expect)]
        return [f"self-test: not found: {m}" for m in missed] + [f"self-test: wrongly reported: {p}" for p in extra]


def main():
    problems = self_test()
    if problems:
        print("\n".join(problems))
        return 1
    problems = check(ROOT)
    for p in problems:
        print(p)
    checked = len(pages(ROOT))
    print(f"{checked} pages checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    import argparse
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    sys.exit(main())
