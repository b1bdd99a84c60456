#!/usr/bin/env python3
"""An independent safetensors reader and writer for precon's interop test, written from the
format's documented layout only: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
(`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}`, which may
be followed by spaces), then the data section. Tensors are read with torch.frombuffer and
written from torch tensors' bytes; nothing is shared with precon or with the safetensors package.

  safetensors_torch.py read FILE    check FILE against the layout strictly and print one JSON
                                    object: header length, metadata, and per tensor dtype, shape,
                                    absolute offset, whether it is aligned to its element size,
                                    and its values as numbers (BF16/F16 widened to float)
  safetensors_torch.py write DIR    write the edge-case files precon must read (see FILES below)
Exits 1 with a message on the first violation; 77 when torch is missing (except under CI=true).
"""
import json
import math
import os
import struct
import sys

try:
    import torch
except ImportError:
    sys.stderr.write("safetensors_torch: PyTorch is missing (deploy/install-deps.sh installs python3-torch)\n")
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

# The format's dtypes: element size, and the torch dtype that reads them (None: read bytewise).
DTYPES = {"BOOL": (1, torch.bool), "U8": (1, torch.uint8), "I8": (1, torch.int8), "F8_E5M2": (1, None),
          "F8_E4M3": (1, None), "I16": (2, torch.int16), "U16": (2, None), "F16": (2, torch.float16),
          "BF16": (2, torch.bfloat16), "I32": (4, torch.int32), "U32": (4, None), "F32": (4, torch.float32),
          "F64": (8, torch.float64), "I64": (8, torch.int64), "U64": (8, None)}
UNSIGNED = {"U16": "<H", "U32": "<I", "U64": "<Q", "F8_E5M2": "<B", "F8_E4M3": "<B"}


def fail(msg):
    sys.stderr.write("safetensors_torch: " + msg + "\n")
    sys.exit(1)


def number(x):
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, float) and x == 0 and math.copysign(1, x) < 0:
        return "-0"
    return x


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail("%s: %d bytes, no header length" % (path, len(blob)))
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail("%s: header length %d exceeds the file" % (path, n))
    text = blob[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        fail("%s: header does not start with '{'" % path)
    body = text.rstrip(" ")
    if not body.endswith("}"):
        fail("%s: header is followed by something other than spaces" % path)
    header = json.loads(body)
    if not isinstance(header, dict):
        fail("%s: header is not an object" % path)
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and
                                     all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        fail("%s: __metadata__ is not a map of strings to strings" % path)
    data = blob[8 + n:]
    spans = []
    for name, v in header.items():
        if set(v) != {"dtype", "shape", "data_offsets"}:
            fail("%s: tensor %s has keys %s" % (path, name, sorted(v)))
        if v["dtype"] not in DTYPES:
            fail("%s: tensor %s has dtype %s, not one of the format's" % (path, name, v["dtype"]))
        shape, (begin, end) = v["shape"], v["data_offsets"]
        if not all(isinstance(d, int) and d >= 0 for d in shape) or not 0 <= begin <= end:
            fail("%s: tensor %s has shape %s, data_offsets %s" % (path, name, shape, v["data_offsets"]))
        if end - begin != math.prod(shape) * DTYPES[v["dtype"]][0]:
            fail("%s: tensor %s: %s %s does not span %d bytes" % (path, name, v["dtype"], shape, end - begin))
        spans.append((begin, end, name))
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            fail("%s: tensor %s starts at %d of the data section, expected %d" % (path, name, begin, pos))
        pos = end
    if pos != len(data):
        fail("%s: tensors cover %d of %d data bytes" % (path, pos, len(data)))

    tensors = {}
    for name, v in header.items():
        size, tdtype = DTYPES[v["dtype"]]
        begin, end = v["data_offsets"]
        raw = bytearray(data[begin:end])
        if not raw:
            values = []
        elif tdtype is None:
            values = [x for (x,) in struct.iter_unpack(UNSIGNED[v["dtype"]], raw)]
        else:
            t = torch.frombuffer(raw, dtype=tdtype).reshape(v["shape"])
            if tdtype in (torch.float16, torch.bfloat16):
                t = t.float()
            values = t.reshape(-1).tolist()
        tensors[name] = {"dtype": v["dtype"], "shape": v["shape"], "offset": 8 + n + begin,
                         "aligned": (8 + n + begin) % size == 0, "values": [number(x) for x in values]}
    print(json.dumps({"header_length": n, "metadata": metadata, "tensors": tensors}))


def tensor_bytes(t):
    # The bytes of a contiguous little-endian tensor (torch has no bytes() for bfloat16 arrays,
    # so go through an int16 view).
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write(path, items, metadata=None, metadata_last=False, pad="align"):
    """items: (name, dtype, shape, bytes) in data order; JSON keys in reverse order, so a reader
    cannot rely on header order. pad: "align" (spaces to a multiple of 8), "none", or a count."""
    header, offset, chunks = {}, 0, []
    for name, dtype, shape, raw in items:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    entries = list(header.items())[::-1]
    if metadata is not None:
        entries.insert(len(entries) if metadata_last else 0, ("__metadata__", metadata))
    text = json.dumps(dict(entries)).encode("utf-8")
    if pad == "align":
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    elif pad != "none":
        text += b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def f32(values):
    return tensor_bytes(torch.tensor(values, dtype=torch.float32))


def write_all(out):
    os.makedirs(out, exist_ok=True)
    j = lambda name: os.path.join(out, name)  # noqa: E731
    # FILES (the values are the ones tests/worker/ckpt/test_safetensors.cpp expects):
    write(j("no_metadata.safetensors"),
          [("w", "F32", [2, 3], f32([-1.0, -0.5, 0.0, 0.5, 1.0, 1.5])),
           ("i", "I64", [3], tensor_bytes(torch.tensor([-2 ** 40, 0, 7], dtype=torch.int64)))])
    write(j("empty_metadata.safetensors"), [("x", "F32", [1], f32([2.5]))], metadata={})
    write(j("padded.safetensors"),
          [("b", "BF16", [4], tensor_bytes(torch.tensor([1.0, -2.0, 0.5, 3.140625], dtype=torch.bfloat16))),
           ("f", "F32", [2], f32([0.001, -7.0]))],
          metadata={"format": "pt", "note": "43 spaces"}, metadata_last=True, pad=43)
    write(j("unpadded.safetensors"),
          [("u", "U8", [3], bytes([1, 2, 3])), ("s", "F32", [], f32(0.125))], pad="none")
    write(j("zero_size.safetensors"),
          [("z0", "F32", [0], b""), ("a", "F32", [2], f32([1.0, 2.0])), ("z1", "F16", [3, 0], b""),
           ("z2", "I32", [0, 0, 2], b""), ("c", "U8", [1], bytes([9])), ("z3", "BF16", [0], b"")],
          metadata={"format": "pt"})
    write(j("only_empty.safetensors"), [("e", "F32", [0, 4], b"")])
    write(j("no_tensors.safetensors"), [], metadata={"k": "v"})
    write(j("halves.safetensors"),
          [("h", "F16", [7], tensor_bytes(torch.tensor([1.0, -2.0, 0.5, 65504.0, 2.0 ** -24, -0.0, math.inf],
                                                        dtype=torch.float16))),
           ("hb", "BF16", [3], tensor_bytes(torch.tensor([1.0, -3.0, 2.0 ** -130], dtype=torch.bfloat16))),
           ("d", "F64", [2], tensor_bytes(torch.tensor([0.1, -1e300], dtype=torch.float64))),
           ("s16", "I16", [2], tensor_bytes(torch.tensor([-3, 300], dtype=torch.int16))),
           ("flag", "BOOL", [3], tensor_bytes(torch.tensor([True, False, True])))])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "read":
        read(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "write":
        write_all(sys.argv[2])
    else:
        fail(__doc__)
