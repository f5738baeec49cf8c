"""The GPT-style decoder that the PyTorch benchmarks train (train_compare.py on
one GPU, multi_gpu_train.py under DDP and FSDP2), and the cross-entropy they
train it with. Both are deterministic by construction: with
torch.use_deterministic_algorithms(True) and the same seed, every allocator
must give the same losses and weights bit for bit.

    model = GPT(vocab=8192, dim=512, layers=6, heads=8, max_len=1024)
    loss = one_hot_cross_entropy(model(tokens), targets, 8192)

Parameters are created in a fixed order (token embedding, position
embedding, the blocks, final norm, head), so a seed fixes the initial weights.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm decoder block: causal self-attention, then a 4x MLP."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.dim, self.heads = dim, heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)
        # Attention spelled out: every kernel here has a deterministic
        # backward, which SDPA's fused kernels need not have.
        att = (q @ k.transpose(-1, -2)) * (d // h) ** -0.5
        mask = torch.ones(s, s, device=x.device, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and position embeddings, `layers` blocks, a final norm and an
    untied head; input (batch, length <= max_len) token ids, output logits."""

    def __init__(self, vocab: int = 8192, dim: int = 512, layers: int = 6, heads: int = 8, max_len: int = 1024):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def one_hot_cross_entropy(logits, target, classes: int):
    """Cross-entropy in float32 without nll_loss's scatter, whose backward is
    not deterministic: the mean over all positions of -log p(target)."""
    return -(F.log_softmax(logits.float(), dim=-1) * F.one_hot(target, classes).float()).sum(-1).mean()
