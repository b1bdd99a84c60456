#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/: small valid
inputs and near-valid ones (one field wrong, truncated, a limit just crossed). Inputs that once
found a bug are added by hand as regression-<what> and are not written here. Rerun after
changing a format: python3 tests/fuzz/make_corpus.py"""
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent
REPO = ROOT.parent.parent


def put(target, name, data):
    d = ROOT / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def recipe():
    for p in sorted((REPO / "recipes").glob("*.toml")):
        put("fuzz_recipe", p.stem, p.read_bytes())
    put("fuzz_recipe", "empty", "")
    put("fuzz_recipe", "minimal", '[model]\nn_layer = 1\nn_head = 1\nd_model = 8\nseq_len = 8\nvocab_size = 16\n')
    put("fuzz_recipe", "bad-type", '[model]\nn_layer = "four"\n[train]\nsteps = -1\n')
    put("fuzz_recipe", "unknown-key", '[optimizer]\nnmae = "muon"\n[optimizer.muon]\nns_step = 5\n')
    put("fuzz_recipe", "overrides", '[train]\nsteps = 10\n\0train.steps=20\noptimizer.name=shampoo\nsweep.samples=3\n')
    put("fuzz_recipe", "random-sweep",
        '[sweep]\nmethod = "random"\nsamples = 4\nseed = 1\n[sweep.parameters]\n'
        '"optimizer.lr" = { log_uniform = [1e-4, 1e-1] }\n"optimizer.muon.ns_steps" = { int_uniform = [3, 9] }\n'
        '"optimizer.name" = { choice = ["muon", "adamw"] }\n')
    put("fuzz_recipe", "sub-grids",
        '[sweep]\nmethod = "grid"\n[sweep.parameters]\n"optimizer.lr" = [0.01, 0.02]\n'
        '[[sweep.grid]]\n"optimizer.name" = ["muon"]\n"optimizer.muon.ns_steps" = [5, 6]\n'
        '[[sweep.grid]]\n"optimizer.name" = ["shampoo"]\n"optimizer.shampoo.precondition_every" = [10]\n')
    put("fuzz_recipe", "command",
        '[trial]\ncommand = ["prog", "{recipe_dir}/x.py", "--lr={lr}", "{{literal}}", "{width}"]\n'
        '[sweep.parameters]\nlr = [0.1, 0.2]\nwidth = [8, 16]\n"train.threads" = [1]\n')
    put("fuzz_recipe", "grid-too-big",
        '[sweep]\nmethod = "grid"\n[sweep.parameters]\n' +
        "".join(f'"optimizer.lr" = [{", ".join(str(i) for i in range(1, 400))}]\n' for _ in range(1)) +
        '"train.seed" = [' + ", ".join(str(i) for i in range(400)) + ']\n')
    # Dotted keys and headers just under and past the segment limit (16), and far past it (the
    # 40,000 segments that overflowed toml++'s stack are a gtest: inputs that long slow every run).
    put("fuzz_recipe", "dotted-key", '[optimizer]\nmuon.ns_steps = 5\n"adamw".lr = 0.01\n' + ".".join(["a"] * 16) + " = 1\n")
    put("fuzz_recipe", "dotted-header", "[" + ".".join(["a"] * 17) + "]\nx = 1\n")
    put("fuzz_recipe", "dotted-deep", "[" + ".".join(["a"] * 5000) + "]\n")
    put("fuzz_recipe", "dotted-override", "[train]\nsteps = 3\n\0train.steps={" + ".".join(["a"] * 20) + "=1}\n")
    put("fuzz_recipe", "bad-toml", '[model\nn_layer = = 3\n"unterminated\n')
    put("fuzz_recipe", "early-stop",
        '[sweep]\nmethod = "random"\nsamples = 2\n[sweep.early_stop]\nmethod = "asha"\nmin_step = 10\n'
        '[sweep.parameters]\n"optimizer.lr" = { uniform = [0.001, 0.01] }\n')


def http():
    get = "GET /api/v1/trials/3/metrics?max_points=10&name=val_loss&x=1e3 HTTP/1.1\r\nHost: x\r\n\r\n"
    put("fuzz_http_request", "get", get)
    put("fuzz_http_request", "pipelined", get + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" +
        "GET /api/v1/experiments/9 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    body = '{"recipe": "[train]\\nsteps = 3\\n"}'
    put("fuzz_http_request", "post", "POST /api/v1/experiments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-token\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}")
    put("fuzz_http_request", "post-no-token", "POST /api/v1/experiments HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}")
    put("fuzz_http_request", "chunked", "POST /api/v1/report HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer trial-token\r\n"
        "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n")
    put("fuzz_http_request", "te-gzip", "POST /api/v1/report HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer trial-token\r\n"
        "Transfer-Encoding: chunked, gzip\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n")
    put("fuzz_http_request", "te-and-length", "POST /api/v1/report HTTP/1.1\r\nContent-Length: 3\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    put("fuzz_http_request", "traversal", "GET /..%2f..%2fsecret.txt HTTP/1.1\r\n\r\nGET /assets/../../secret.txt HTTP/1.1\r\n\r\n"
        "GET /link.txt HTTP/1.1\r\n\r\nGET /api/v1/files/a%2Fb/%00 HTTP/1.1\r\n\r\n")
    put("fuzz_http_request", "bad-percent", "GET /api/v1/experiments/%zz?q=%1 HTTP/1.1\r\n\r\n")
    put("fuzz_http_request", "head", "HEAD /index.html HTTP/1.0\r\n\r\n")
    put("fuzz_http_request", "method-not-allowed", "DELETE /api/v1/experiments/1 HTTP/1.1\r\n\r\n")
    put("fuzz_http_request", "truncated", "POST /api/v1/experiments HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"rec")
    put("fuzz_http_request", "garbage", "\x00\x01GET / HTTP/9.9\r\n\r\n")
    put("fuzz_http_request", "long-header", "GET / HTTP/1.1\r\nX-A: " + "a" * 9000 + "\r\n\r\n")


def api_json():
    sub = {"recipe": "[train]\nsteps = 20\n[sweep]\nmethod = \"grid\"\n[sweep.parameters]\n\"optimizer.lr\" = [0.01, 0.02]\n",
           "source": "a.toml", "overrides": ["train.steps=30"]}
    put("fuzz_api_json", "submit", b"\x00" + json.dumps(sub).encode())
    deep = {"recipe": "[" + ".".join(["a"] * 5000) + "]\n", "source": "deep.toml"}
    put("fuzz_api_json", "submit-dotted-header", b"\x00" + json.dumps(deep).encode())
    put("fuzz_api_json", "submit-bad-overrides", b"\x00" + json.dumps({"recipe": "", "overrides": "x=1"}).encode())
    put("fuzz_api_json", "submit-no-recipe", b"\x00" + b'{"source": 3}')
    rep = {"trial": "12", "records": [{"step": 0, "time": 1.7e9, "values": {"loss": 3.5, "val_loss": None}},
                                      {"step": 10, "values": {"loss": 2.0}}]}
    put("fuzz_api_json", "report", b"\x01" + json.dumps(rep).encode())
    put("fuzz_api_json", "report-int-trial", b"\x01" + b'{"trial": 9223372036854775807, "records": []}')
    put("fuzz_api_json", "report-bad-step", b"\x01" + b'{"trial": 1, "records": [{"step": 18446744073709551615, "values": {}}]}')
    put("fuzz_api_json", "report-bad-trial", b"\x01" + b'{"trial": "1abc", "records": [{"step": -1, "time": 1e308, "values": {"\\u001b": 1}}]}')
    put("fuzz_api_json", "report-deep", b"\x01" + b"[" * 200 + b"]" * 200)
    put("fuzz_api_json", "cancel", b"\x02" + b"17\x00")
    put("fuzz_api_json", "cancel-body", b"\x02" + b"17\x00{\"why\": \"x\"}")
    put("fuzz_api_json", "cancel-bad-id", b"\x02" + b"%31%2f2\x00")


def safetensors(tensors, metadata=None, pad=True):
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def checkpoint():
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    put("fuzz_checkpoint", "safetensors", b"\x00" + safetensors(
        [("wte.weight", "F32", [2, 2], f32), ("ln.bias", "BF16", [2], b"\x80\x3f\x00\x40"),
         ("h.0.x", "F16", [1], b"\x00\x3c"), ("step", "I64", [], struct.pack("<q", 7))], {"format": "pt"}))
    put("fuzz_checkpoint", "safetensors-unpadded", b"\x00" + safetensors([("a", "U8", [3], b"abc")], pad=False))
    put("fuzz_checkpoint", "safetensors-empty", b"\x00" + safetensors([]))
    put("fuzz_checkpoint", "safetensors-overlap", b"\x00" + struct.pack("<Q", 96) +
        json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                    "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}).encode().ljust(96) + b"\0" * 6)
    put("fuzz_checkpoint", "safetensors-truncated", b"\x00" + safetensors([("a", "F32", [2, 2], f32)])[:-3])
    put("fuzz_checkpoint", "safetensors-huge-shape", b"\x00" + safetensors(
        [("a", "F64", [4611686018427387904, 4611686018427387904, 0], b"")]))
    import zlib
    crc = "%08x" % zlib.crc32(b"model bytes")
    good = {"step": 7, "files": [{"name": "model.safetensors", "size": 11, "crc32": crc}]}
    put("fuzz_checkpoint", "manifest", b"\x01" + json.dumps(good).encode())
    put("fuzz_checkpoint", "manifest-crc", b"\x01" + json.dumps(
        {"step": 7, "files": [{"name": "model.safetensors", "size": 11, "crc32": "00000000"}]}).encode())
    put("fuzz_checkpoint", "manifest-traversal", b"\x01" + json.dumps(
        {"step": 7, "files": [{"name": "../manifest.json", "size": 1, "crc32": "0"}]}).encode())
    put("fuzz_checkpoint", "manifest-types", b"\x01" + b'{"step": "7", "files": {"name": 1}}')


def shard():
    def s(tokens, magic=20240520, version=1, count=None):
        header = struct.pack("<3i", magic, version, len(tokens) if count is None else count) + b"\0" * (1024 - 12)
        return header + struct.pack(f"<{len(tokens)}H", *tokens)
    put("fuzz_shard", "valid", struct.pack("<H", 0) + s([1, 2, 3, 50256]))
    put("fuzz_shard", "vocab", struct.pack("<H", 256) + s([1, 255, 256]))
    put("fuzz_shard", "empty-shard", struct.pack("<H", 0) + s([]))
    put("fuzz_shard", "truncated", struct.pack("<H", 0) + s([1, 2, 3])[:-1])
    put("fuzz_shard", "count-negative", struct.pack("<H", 0) + s([], count=-1))
    put("fuzz_shard", "bad-magic", struct.pack("<H", 0) + s([1], magic=20240521))
    put("fuzz_shard", "bad-version", struct.pack("<H", 0) + s([1], version=2))
    put("fuzz_shard", "short", b"\0\0" + b"\x28\x0b\x35\x01")


def bpe():
    enc = {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "\u0120": 5, "\u0120a": 6, "<|endoftext|>": 7}
    merges = "#version: 0.2\na b\nab c\n\u0120 a\n"
    put("fuzz_bpe", "valid", json.dumps(enc) + "\0" + merges + "\0" + "abc a ab's 12 !?  \n\t")
    put("fuzz_bpe", "unicode", json.dumps(enc) + "\0" + merges + "\0" + "héllo wörld 東京 ١٢٣ 😀")
    put("fuzz_bpe", "crlf", json.dumps(enc) + "\0" + merges.replace("\n", "\r\n") + "\0" + "ab")
    put("fuzz_bpe", "missing-symbol", json.dumps({"a": 0}) + "\0" + "a b\n" + "\0" + "ab")
    put("fuzz_bpe", "bad-id", json.dumps({"a": 70000, "b": -1}) + "\0\0a")
    put("fuzz_bpe", "bad-merge", json.dumps(enc) + "\0" + "a  b\nabc\n" + "\0" + "a")
    put("fuzz_bpe", "bad-json", '{"a": 0,' + "\0a b\n\0a")
    put("fuzz_bpe", "invalid-utf8", (json.dumps(enc) + "\0a b\n\0a").encode() + b"\xed\xb3\xbf\xc0\xaf")


if __name__ == "__main__":
    recipe()
    http()
    api_json()
    checkpoint()
    shard()
    bpe()
