#!/usr/bin/env python3
"""Independent safetensors reader/writer for the C++ cross-check (json/struct/numpy only,
deliberately not the safetensors package, so the two implementations share nothing).

  safetensors_check.py roundtrip IN OUT   validate IN strictly, print a JSON summary of every
                                          tensor (dtype, shape, sum, values) on stdout, and
                                          write the same tensors to OUT in a different layout
                                          (reversed data order, unusual key order, indented
                                          header, metadata last plus {"python": "roundtrip"})
  safetensors_check.py make OUT           write a fixed file with unusual key order, metadata
                                          first and an unaligned data layout
Exits non-zero with a message on the first problem.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.dtype("<f4"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8"), "U8": np.dtype("u1"),
          "BF16": np.dtype("<u2")}


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    # Values used here are exactly representable in bf16, so truncation is exact.
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def fail(msg):
    sys.stderr.write("safetensors_check: " + msg + "\n")
    sys.exit(1)


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    if (8 + n) % 8 != 0:
        fail("header of %s is not padded to a multiple of 8 (length %d)" % (path, n))
    text = blob[8:8 + n].decode("utf-8")
    if text.rstrip(" ") != text.rstrip() or not text.startswith("{"):
        fail("header of %s is padded with something other than spaces" % path)
    header = json.loads(text)
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            fail("tensor %s of %s starts at %d, expected %d" % (name, path, begin, pos))
        pos = end
    if pos != len(data):
        fail("tensors of %s cover %d of %d data bytes" % (path, pos, len(data)))
    tensors = {}
    for name, v in header.items():
        begin, end = v["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype=DTYPES[v["dtype"]]).reshape(v["shape"])
        tensors[name] = (v["dtype"], list(v["shape"]), arr)
    return metadata, tensors


def write(path, items, metadata, metadata_first, indent):
    """items: list of (name, dtype, shape, array) in data order; the JSON keys go in reverse."""
    header_items = []
    offset = 0
    chunks = []
    for name, dtype, shape, arr in items:
        raw = np.ascontiguousarray(arr, dtype=DTYPES[dtype]).tobytes()
        header_items.append((name, {"shape": shape, "data_offsets": [offset, offset + len(raw)], "dtype": dtype}))
        chunks.append(raw)
        offset += len(raw)
    header_items.reverse()
    if metadata_first:
        header_items.insert(0, ("__metadata__", metadata))
    else:
        header_items.append(("__metadata__", metadata))
    text = json.dumps(dict(header_items), indent=indent).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def roundtrip(src, dst):
    metadata, tensors = read(src)
    summary = {}
    for name, (dtype, shape, arr) in tensors.items():
        values = bf16_to_f32(arr) if dtype == "BF16" else arr
        summary[name] = {"dtype": dtype, "shape": shape, "sum": float(np.sum(values, dtype=np.float64)),
                         "values": [float(x) for x in values.reshape(-1)[:8]]}
    print(json.dumps({"metadata": metadata, "tensors": summary}))
    items = [(name, dtype, shape, arr) for name, (dtype, shape, arr) in tensors.items()]
    items.reverse()
    metadata = dict(metadata)
    metadata["python"] = "roundtrip"
    write(dst, items, metadata, metadata_first=False, indent=1)


def make(dst):
    items = [
        ("u.bytes", "U8", [5], np.array([0, 1, 2, 254, 255])),
        ("z.weight", "F32", [2, 3], np.arange(6, dtype=np.float32) / 4),
        ("m.empty", "U8", [0], np.zeros(0)),
        ("b.half", "BF16", [3], f32_to_bf16([1.0, -2.0, 0.5])),
        ("a.bias", "I64", [2], np.array([-1, 2 ** 40])),
        ("s.scalar", "F32", [], np.array(3.25, dtype=np.float32)),
        ("i.idx", "I32", [2, 2], np.array([[1, -2], [3, -4]])),
    ]
    write(dst, items, {"format": "pt", "note": "written by python"}, metadata_first=True, indent=None)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "roundtrip":
        roundtrip(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        fail(__doc__)
