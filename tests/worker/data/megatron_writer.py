#!/usr/bin/env python3
"""Writes a Megatron-LM indexed dataset (prefix.bin + prefix.idx) from the format's description,
independently of the C++ writer, for test_indexed.cpp to read.

    megatron_writer.py PREFIX DTYPE DOCUMENTS.json

DTYPE is a numpy integer type name (uint16, int32, ...). DOCUMENTS.json holds a list of documents,
each a list of sequences (Megatron's sentences), each a list of token ids: [[[1, 2], [3]], [[4]]].
An empty sequence is written as one of size 0; a document with no sequence repeats its
document index entry.

Format (little-endian): .idx = b"MMIDIDX\\x00\\x00", uint64 version 1, uint8 dtype code,
uint64 sequence count, uint64 document index length, int32 sizes, int64 byte pointers,
int64 document index; .bin = the sequences' tokens back to back.
"""
import json
import struct
import sys

import numpy as np

CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7, "uint16": 8}


def write(prefix, dtype_name, documents):
    dtype = np.dtype(dtype_name).newbyteorder("<")
    sizes, pointers, doc_index = [], [], [0]
    offset = 0
    with open(prefix + ".bin", "wb") as bin_file:
        for document in documents:
            for sequence in document:
                tokens = np.array(sequence, dtype=np.int64)
                cast = tokens.astype(dtype)
                if not np.array_equal(cast.astype(np.int64), tokens):
                    raise ValueError(f"a token does not fit {dtype_name}")
                bin_file.write(cast.tobytes())
                sizes.append(len(sequence))
                pointers.append(offset)
                offset += len(sequence) * dtype.itemsize
            doc_index.append(len(sizes))
    with open(prefix + ".idx", "wb") as idx_file:
        idx_file.write(b"MMIDIDX\x00\x00")
        idx_file.write(struct.pack("<Q", 1))
        idx_file.write(struct.pack("<B", CODES[dtype_name]))
        idx_file.write(struct.pack("<Q", len(sizes)))
        idx_file.write(struct.pack("<Q", len(doc_index)))
        idx_file.write(struct.pack(f"<{len(sizes)}i", *sizes))
        idx_file.write(struct.pack(f"<{len(pointers)}q", *pointers))
        idx_file.write(struct.pack(f"<{len(doc_index)}q", *doc_index))


if __name__ == "__main__":
    with open(sys.argv[3]) as f:
        documents = json.load(f)
    write(sys.argv[1], sys.argv[2], documents)
