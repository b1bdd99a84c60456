#!/usr/bin/env python3
"""Tokenizer throughput: precon against js-tiktoken on the same text, one thread each.

The text: the State of the Union corpus the quickstart trains on (from the interop tests' npm
packages), twice, then about 4 MB of generated multilingual text (CJK, Arabic, Hindi, Thai,
Cyrillic, emoji, code with indentation). precon_tokenize_bench (tests/bench/tokenize_bench.cpp)
encodes it whole with make_tokenizer(ENCODING), best of --repeat runs, each with a cold piece
cache; bench_tokenize.cjs does the same with js-tiktoken. Loading the rank files is timed apart.
Prints a table of MB/s (10^6 bytes of UTF-8 per second) and the ratio; the issue asks for
gpt2 >= 10 MB/s per core from precon. Token counts of the two sides must agree.

Run it on a quiet machine:
  cmake --build BUILD --target precon_tokenize_bench tiktoken_ranks
  ctest --test-dir BUILD -R interop_npm_packages     # installs js-tiktoken and the corpus once
  tests/bench/bench_tokenize.py --bench BUILD/tests/bench/precon_tokenize_bench \\
      --npm-dir BUILD/tests/interop/npm --work /tmp/bench_tokenize
"""
import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

SAMPLES = [
    "\u6771\u4EAC\u306F\u65E5\u672C\u306E\u9996\u90FD\u3067\u3001\u4EBA\u53E3\u306F\u7D041400\u4E07\u4EBA\u3067\u3059\u3002",
    "\u4E2D\u534E\u4EBA\u6C11\u5171\u548C\u56FD\u6210\u7ACB\u4E8E1949\u5E74\uFF0C\u9996\u90FD\u662F\u5317\u4EAC\u3002",
    "\uD55C\uAD6D\uC5B4\uB294 \uD55C\uAE00\uB85C \uC4F0\uBA70 \uC138\uC885\uB300\uC655\uC774 \uB9CC\uB4E4\uC5C8\uC2B5\uB2C8\uB2E4.",
    "\u0627\u0644\u0644\u063A\u0629 \u0627\u0644\u0639\u0631\u0628\u064A\u0629 \u0647\u064A \u0625\u062D\u062F\u0649 \u0623\u0643\u062B\u0631 \u0627\u0644\u0644\u063A\u0627\u062A \u0627\u0646\u062A\u0634\u0627\u0631\u0627\u064B \u0641\u064A \u0627\u0644\u0639\u0627\u0644\u0645.",
    "\u0939\u093F\u0928\u094D\u0926\u0940 \u092D\u093E\u0930\u0924 \u0915\u0940 \u0938\u092C\u0938\u0947 \u0905\u0927\u093F\u0915 \u092C\u094B\u0932\u0940 \u091C\u093E\u0928\u0947 \u0935\u093E\u0932\u0940 \u092D\u093E\u0937\u093E \u0939\u0948\u0964",
    "\u0E20\u0E32\u0E29\u0E32\u0E44\u0E17\u0E22\u0E40\u0E1B\u0E47\u0E19\u0E20\u0E32\u0E29\u0E32\u0E23\u0E32\u0E0A\u0E01\u0E32\u0E23\u0E02\u0E2D\u0E07\u0E1B\u0E23\u0E30\u0E40\u0E17\u0E28\u0E44\u0E17\u0E22",
    "\u041C\u043E\u0441\u043A\u0432\u0430 \u2014 \u0441\u0442\u043E\u043B\u0438\u0446\u0430 \u0420\u043E\u0441\u0441\u0438\u0438, \u043A\u0440\u0443\u043F\u043D\u0435\u0439\u0448\u0438\u0439 \u0433\u043E\u0440\u043E\u0434 \u0441\u0442\u0440\u0430\u043D\u044B.",
    "Gr\u00FC\u00DFe aus M\u00FCnchen! \u00C7a va tr\u00E8s bien, merci. \u00BFD\u00F3nde est\u00E1 la biblioteca?",
    "Great job \U0001F44D\U0001F3FD see you soon \U0001F600\U0001F389 family \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F1EF\U0001F1F5",
    "def tokenize(text):\n    for piece in pattern.findall(text):\n        yield encode(piece)  # BPE\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
]


def write_text(path, corpus):
    docs = []
    for name in sorted(glob.glob(os.path.join(corpus, "*.txt"))):
        with open(name, encoding="utf-8") as f:
            docs.append(f.read())
    english = "\n\n".join(docs)
    rng = random.Random(7)
    multilingual, size = [], 0
    while size < 4_000_000:
        paragraph = " ".join(rng.choice(SAMPLES) for _ in range(rng.randint(3, 12))) + "\n\n"
        multilingual.append(paragraph)
        size += len(paragraph.encode("utf-8"))
    text = english + "\n\n" + english + "\n\n" + "".join(multilingual)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return len(english.encode("utf-8")), size


def run_json(argv, env=None):
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="precon_tokenize_bench")
    ap.add_argument("--npm-dir", required=True, help="where tests/interop/npm_install.sh installed the packages")
    ap.add_argument("--work", required=True)
    ap.add_argument("--repeat", type=int, default=3, help="precon runs per encoding (best counts)")
    ap.add_argument("--node-repeat", type=int, default=1, help="js-tiktoken runs per encoding (best counts)")
    ap.add_argument("--encodings", default="gpt2,cl100k_base,o200k_base")
    args = ap.parse_args()

    node = shutil.which("node")
    modules = os.path.join(args.npm_dir, "node_modules")
    corpus = os.path.join(modules, "@stdlib", "datasets-sotu", "data")
    if not node or not os.path.isdir(corpus):
        sys.exit("bench_tokenize: needs node and %s (ctest -R interop_npm_packages installs it)" % corpus)
    os.makedirs(args.work, exist_ok=True)
    text = os.path.join(args.work, "bench_text.txt")
    english, multilingual = write_text(text, corpus)
    total = os.path.getsize(text)
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")

    print("bench_tokenize: %.1f MB of text (the State of the Union corpus, %.1f MB, twice; %.1f MB multilingual), "
          "one thread each, best of %d (precon) and %d (js-tiktoken)" %
          (total / 1e6, english / 1e6, multilingual / 1e6, args.repeat, args.node_repeat))
    print("%-12s %12s %17s %7s %25s %18s" % ("encoding", "precon MB/s", "js-tiktoken MB/s", "ratio",
                                              "tokens precon / js", "load s precon / js"))
    mismatch = False
    for encoding in args.encodings.split(","):
        mine = run_json([args.bench, "--tokenizer", encoding, "--repeat", str(args.repeat), text], env)
        ref = run_json([node, os.path.join(HERE, "bench_tokenize.cjs"), modules, encoding, text,
                        str(args.node_repeat)])
        ours, theirs = total / mine["encode_seconds"] / 1e6, total / ref["encode_seconds"] / 1e6
        print("%-12s %12.1f %17.1f %7.1f %11d / %-11d %11.2f / %-4.2f" %
              (encoding, ours, theirs, ours / theirs, mine["tokens"], ref["tokens"], mine["load_seconds"],
               ref["load_seconds"]))
        mismatch = mismatch or mine["tokens"] != ref["tokens"]
    if mismatch:
        sys.exit("bench_tokenize: precon and js-tiktoken disagree on a token count "
                 "(tests/interop/tokenizers_vs_tiktoken.py finds where)")


if __name__ == "__main__":
    main()
