"""Offline synthetic data: a query chunk and a KV cache with planted structure and known answers.

:func:`planted_chunk` draws Gaussian q/k/v and plants, for every query head, a few "needle" KV blocks
that a random subset of the chunk's queries attend to strongly (query-specific blocks), plus a sink at
token 0 and a local window; ``truth`` lists the needle blocks per query head.
"""

from __future__ import annotations

import math

import torch


def random_chunk(n: int, chunk: int, *, heads=32, kv_heads=8, head_dim=128, dtype=torch.float32, seed=0):
    """q (H, chunk, D) for the last ``chunk`` positions of an ``n``-token context; k, v (H_kv, n, D)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(heads, chunk, head_dim, generator=g, dtype=dtype)
    k = torch.randn(kv_heads, n, head_dim, generator=g, dtype=dtype)
    v = torch.randn(kv_heads, n, head_dim, generator=g, dtype=dtype)
    return q, k, v


def planted_chunk(n: int, chunk: int, *, heads=8, kv_heads=2, head_dim=32, block=16, needles=3,
                  strength=4.0, dtype=torch.float32, seed=0):  # fmt: skip
    """Like :func:`random_chunk`, with ``needles`` planted past KV blocks per query head: the keys of a
    needle block share a direction u; a random quarter of the chunk's queries of that head carry
    ``strength``·u·√D. Returns (q, k, v, truth) with truth[h] the needle blocks of head h."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = random_chunk(
        n, chunk, heads=heads, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, seed=seed
    )
    q, k = q * 0.3, k * 0.3
    group = heads // kv_heads
    past_blocks = (n - chunk) // block
    truth = []
    for h in range(heads):
        j = h // group
        blocks = torch.randperm(max(1, past_blocks - 1), generator=g)[:needles] + 1
        truth.append(sorted(blocks.tolist()))
        for b in blocks.tolist():
            u = torch.randn(head_dim, generator=g, dtype=dtype)
            u = u / u.norm()
            k[j, b * block : (b + 1) * block] += u * math.sqrt(head_dim) * 0.5
            who = torch.rand(chunk, generator=g) < 0.25
            q[h, who] += strength * u
    k[:, 0] += 2.0  # a sink
    return q, k, v, truth
