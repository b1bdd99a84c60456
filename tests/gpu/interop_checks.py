#!/usr/bin/env python3
"""precon against the tools users have, with the GPU machine's python3 (transformers, tiktoken,
torch): one table row per check appended to --results (check, value, tolerance, PASS|FAIL, note).

1. Hugging Face transformers' GPT2LMHeadModel.from_pretrained(<checkpoint dir>) loads a precon
   checkpoint's model.safetensors + config.json, no weight missing or unexpected (lm_head.weight
   is tied), and its logits, through the cross entropy, give precon's val_loss at that
   checkpoint: precon evaluates the first eval_batches·B windows of val.bin (window w = tokens
   [w·T, w·T+T], targets shifted by one, worker/data/loader.cpp) and records their mean loss,
   which is what is recomputed here on the same device (fp32, no TF32). precon-train has no
   logits dump; the loss over 2048 positions is a function of every logit, and any layout or
   naming slip (a Conv1D not transposed, a wrong split of c_attn, an untied head) moves it by far
   more than the tolerance, 1e-4.
2. precon's GPT-2 BPE (`precon-train prepare-data --encoder --vocab`) against tiktoken's `gpt2`
   encoding, token for token, over the corpus and the Unicode sweep document of
   tests/interop/bpe_vs_tiktoken.py. tiktoken would download its two files; the machine has no
   network, so they are put in TIKTOKEN_CACHE_DIR under the names tiktoken gives them (the SHA-1
   of their URL), from --gpt2-dir, whose bytes tiktoken checks against its own SHA-256.

Where transformers or tiktoken are missing (this project's Debian machines), the rows say so and
stand-ins run instead, so the plumbing is exercised: the repo's torch reference forward
(tests/worker/model/gpt_reference.py) reads the safetensors file, and js-tiktoken (node, with the npm
packages of tests/interop) encodes; such rows are marked "stand-in".

Usage: interop_checks.py --precon-train BIN --run-dir RUN --corpus DIR --gpt2-dir DIR --work DIR
                         --results FILE [--device cuda|cpu] [--npm-dir DIR]
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "interop"))
sys.path.insert(0, os.path.join(HERE, "..", "worker", "model"))
sys.path.insert(0, os.path.join(HERE, "..", "worker", "optim"))
from bpe_vs_tiktoken import END_OF_TEXT, read_shard, write_sweep  # noqa: E402

LOSS_TOLERANCE = 1e-4
GPT2_URLS = {"vocab.bpe": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
             "encoder.json": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json"}


def row(results, check, value, tolerance, ok, note=""):
    with open(results, "a") as f:
        f.write("\t".join([check, value, tolerance, "PASS" if ok else "FAIL", note]) + "\n")
    print("interop_checks: %s: %s (%s) %s" % (check, value, "PASS" if ok else "FAIL", note), flush=True)
    return ok


def read_safetensors(path):
    import torch
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(blob[8 + n + a:8 + n + b]), dtype=torch.float32).reshape(e["shape"])
    return out


def hf_check(args):
    import torch
    import torch.nn.functional as F
    metrics = [json.loads(l) for l in open(os.path.join(args.run_dir, "metrics.jsonl"))]
    vals = [m for m in metrics if "val_loss" in m]
    step = vals[-1]["step"]
    ckpt = os.path.join(args.run_dir, "checkpoints", "step_%08d" % step)
    with open(os.path.join(ckpt, "config.toml"), "rb") as f:
        trial = tomllib.load(f)  # the resolved config the run trained with
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    T = cfg["n_positions"]
    B, nb = trial["train"]["batch_size"], trial["train"]["eval_batches"]
    val_path = trial["data"]["val"]
    tokens = read_shard(val_path)[:nb * B * T + 1]
    windows = torch.tensor([tokens[w * T:w * T + T + 1] for w in range(nb * B)], dtype=torch.long)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    note = "checkpoint step %d, %d positions, precon val_loss %.6f" % (step, windows.numel() - windows.shape[0],
                                                                        vals[-1]["val_loss"])
    try:
        from transformers import GPT2LMHeadModel
    except ImportError:
        GPT2LMHeadModel = None
    if GPT2LMHeadModel is not None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # config.json says float32 ("torch_dtype"); .float() makes sure whatever the default.
        model, info = GPT2LMHeadModel.from_pretrained(ckpt, output_loading_info=True)
        model = model.float()
        missing = [k for k in info.get("missing_keys", []) if k != "lm_head.weight" and not k.endswith(".attn.bias")]
        unexpected = [k for k in info.get("unexpected_keys", []) if not k.endswith((".attn.bias", ".attn.masked_bias"))]
        mismatched = info.get("mismatched_keys", [])
        model = model.to(device).eval()
        with torch.no_grad():
            logits = model(windows[:, :-1].to(device)).logits.float()
        label = "transformers GPT2LMHeadModel"
        if missing or unexpected or mismatched:
            return row(args.results, "hf GPT2LMHeadModel loads the checkpoint: loss vs precon val_loss", "-",
                       "%.0e" % LOSS_TOLERANCE, False, "missing %s unexpected %s mismatched %s" %
                       (missing[:4], unexpected[:4], mismatched[:4]))
    else:
        from gpt_reference import forward
        p = {k: v.to(device) for k, v in read_safetensors(os.path.join(ckpt, "model.safetensors")).items()}
        c = {"n_layer": cfg["n_layer"], "n_head": cfg["n_head"], "d_model": cfg["n_embd"], "seq_len": T,
             "vocab_size": cfg["vocab_size"]}
        with torch.no_grad():
            logits, _ = forward(p, c, windows[:, :-1].to(device), windows[:, 1:].to(device))
        label = "stand-in: no transformers here, tests/worker/model/gpt_reference.py"
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), windows[:, 1:].reshape(-1).to(device))
    rel = abs(ce.item() - vals[-1]["val_loss"]) / vals[-1]["val_loss"]
    return row(args.results, "hf GPT2LMHeadModel loads the checkpoint: loss vs precon val_loss", "%.2e" % rel,
               "%.0e" % LOSS_TOLERANCE, rel <= LOSS_TOLERANCE, "%s; %s; logits on %s" % (label, note, args.device))


def tiktoken_gpt2(work, gpt2_dir):
    """tiktoken's own get_encoding("gpt2"), its two downloads served from the cache."""
    cache = os.path.join(work, "tiktoken-cache")
    os.makedirs(cache, exist_ok=True)
    urls = dict(GPT2_URLS)
    try:  # the URLs as this tiktoken spells them, when its source says
        import inspect
        import re
        import tiktoken_ext.openai_public as pub
        src = inspect.getsource(pub.gpt2)
        for name in urls:
            m = re.search(r'"(https://[^"]*/%s)"' % re.escape(name), src)
            if m:
                urls[name] = m.group(1)
    except Exception:
        pass
    for name, url in urls.items():
        with open(os.path.join(gpt2_dir, name), "rb") as f:
            blob = f.read()
        with open(os.path.join(cache, hashlib.sha1(url.encode()).hexdigest()), "wb") as f:
            f.write(blob)
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    import tiktoken
    enc = tiktoken.get_encoding("gpt2")

    def encode(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.startswith("\ufeff"):
            text = text[1:]
        return enc.encode(text, disallowed_special=())
    return encode


def js_tiktoken(npm_dir):
    import shutil
    node = shutil.which("node")
    modules = os.path.join(npm_dir or "", "node_modules")
    if not node or not os.path.isdir(os.path.join(modules, "js-tiktoken")):
        return None
    script = os.path.join(HERE, "..", "interop", "tiktoken_tokens.cjs")

    def encode(path):
        out = subprocess.run([node, script, modules, path], check=True, stdout=subprocess.PIPE, text=True).stdout
        return [int(t) for t in out.split()]
    return encode


def bpe_check(args):
    check = "gpt-2 bpe: precon prepare-data vs tiktoken gpt2"
    out = os.path.join(args.work, "bpe-shards")
    os.makedirs(args.work, exist_ok=True)
    sweep = os.path.join(args.work, "unicode_sweep.txt")
    write_sweep(sweep)
    try:
        encode, label = tiktoken_gpt2(args.work, args.gpt2_dir), "tiktoken (python)"
    except ImportError:
        encode, label = js_tiktoken(args.npm_dir), "stand-in: no python tiktoken here, js-tiktoken"
        if encode is None:
            return row(args.results, check, "-", "0 tokens differ", False, "neither tiktoken nor node + js-tiktoken")
    subprocess.run([args.precon_train, "prepare-data", "--input", args.corpus, sweep, "--out", out,
                    "--encoder", os.path.join(args.gpt2_dir, "encoder.json"), "--vocab",
                    os.path.join(args.gpt2_dir, "vocab.bpe"), "--val-fraction", "0.05"], check=True,
                   stdout=subprocess.DEVNULL)
    meta = json.load(open(os.path.join(out, "meta.json"), encoding="utf-8"))
    ours = read_shard(os.path.join(out, "train.bin")) + read_shard(os.path.join(out, "val.bin"))
    pos, docs = 0, 0
    for path in meta["sources"]:
        theirs = encode(path)
        if not theirs:
            continue
        if docs:
            if ours[pos:pos + 1] != [END_OF_TEXT]:
                return row(args.results, check, "token %d" % pos, "0 tokens differ", False,
                           "%s; no <|endoftext|> before %s" % (label, path))
            pos += 1
        docs += 1
        mine = ours[pos:pos + len(theirs)]
        if mine != theirs:
            k = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            return row(args.results, check, "differs", "0 tokens differ", False,
                       "%s; %s at token %d: precon %s, reference %s" % (label, os.path.basename(path), k,
                                                                       mine[k:k + 5], theirs[k:k + 5]))
        pos += len(theirs)
    if pos != len(ours):
        return row(args.results, check, "%d extra" % (len(ours) - pos), "0 tokens differ", False, label)
    return row(args.results, check, "0 of %d differ" % len(ours), "0 tokens differ", True,
               "%s; %d documents incl. the unicode sweep" % (label, docs))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precon-train", required=True)
    ap.add_argument("--run-dir", required=True, help="a finished precon-train run (its last checkpoint is read)")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--gpt2-dir", required=True, help="encoder.json and vocab.bpe")
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--npm-dir", default="", help="tests/interop's npm packages (stand-in only)")
    a = ap.parse_args()
    ok = True
    for check in (hf_check, bpe_check):
        try:
            ok &= bool(check(a))
        except Exception as e:  # one broken check must not hide the other's row
            ok &= row(a.results, check.__name__, "-", "-", False, "%s: %s" % (type(e).__name__, str(e)[:300]))
    sys.exit(0 if ok else 1)
