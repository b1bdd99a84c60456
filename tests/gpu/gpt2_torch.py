"""GPT-2 as a PyTorch nn.Module for the throughput comparison in gpt2_bench.py: the architecture
precon trains (pre-LayerNorm blocks, GELU (tanh), learned positions, tied head, biases, eps 1e-5),
written the way a PyTorch user would (nn.Linear, fused scaled-dot-product attention when this
torch has it), and a reader of precon's token shards (magic 20240520, 256 header ints, uint16).
"""
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_INTS = 20240520, 1, 256


class Block(nn.Module):
    def __init__(self, c, nh):
        super().__init__()
        self.nh = nh
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.nh, C // self.nh).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.nh)
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
            y = att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        c = m["d_model"]
        self.wte = nn.Embedding(m["vocab_size"], c)
        self.wpe = nn.Embedding(m["seq_len"], c)
        self.h = nn.ModuleList(Block(c, m["n_head"]) for _ in range(m["n_layer"]))
        self.ln_f = nn.LayerNorm(c)
        for p in self.parameters():
            if p.ndim == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def read_tokens(path):
    with open(path, "rb") as f:
        blob = f.read()
    magic, version, count = struct.unpack("<3i", blob[:12])
    if magic != SHARD_MAGIC or version != SHARD_VERSION:
        raise ValueError("%s: magic %d version %d, expected %d and %d" % (path, magic, version, SHARD_MAGIC,
                                                                          SHARD_VERSION))
    body = blob[SHARD_HEADER_INTS * 4:]
    if len(body) != 2 * count:
        raise ValueError("%s: header says %d tokens, body holds %d bytes" % (path, count, len(body)))
    return torch.frombuffer(bytearray(body), dtype=torch.int16).to(torch.int64) & 0xFFFF


def batches(path, T, B, device):
    """Endless (inputs, targets) micro-batches of B windows of T tokens, in order, wrapping around."""
    tokens = read_tokens(path)
    n = (tokens.numel() - 1) // (B * T)
    if n == 0:
        raise ValueError("%s: %d tokens, fewer than one batch of %d x %d" % (path, tokens.numel(), B, T))
    i = 0
    while True:
        chunk = tokens[i * B * T:(i + 1) * B * T + 1]
        yield chunk[:-1].view(B, T).to(device), chunk[1:].view(B, T).to(device)
        i = (i + 1) % n
