"""Synthetic decode-step data with known answers: random caches, and stacks with planted salient spans."""

from __future__ import annotations

import torch


def random_cache(
    n: int, *, batch=1, heads=32, kv_heads=8, head_dim=128, dtype=torch.float32, seed=0, device="cpu"
):
    """q (B, H, D), K, V (B, H_kv, n, D) with standard-normal entries."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(batch, heads, head_dim, generator=g, dtype=dtype)
    K = torch.randn(batch, kv_heads, n, head_dim, generator=g, dtype=dtype)
    V = torch.randn(batch, kv_heads, n, head_dim, generator=g, dtype=dtype)
    return q.to(device), K.to(device), V.to(device)


def planted_stack(
    n: int,
    *,
    layers: int = 4,
    spans: int = 3,
    span_len: int = 8,
    drift: int = 2,
    batch: int = 1,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    strength: float = 12.0,
    dtype=torch.float64,
    seed: int = 0,
):
    """A decode step through ``layers`` layers where each KV group attends to ``spans`` contiguous spans of
    ``span_len`` tokens that move by at most ``drift`` tokens from one layer to the next.

    Keys off the spans are small noise; keys on them point along the group's query direction with
    logit ``strength`` above the rest. Returns (qs, Ks, Vs, truth) with ``truth[layer]`` (B, H_kv,
    spans·span_len) the planted token positions, ascending.
    """
    g = torch.Generator().manual_seed(seed)
    qs, Ks, Vs, truth = [], [], [], []
    gap = n // spans
    room = gap - span_len - 2 * drift * layers
    if room < 1:
        from papershelf.errors import InputError

        raise InputError(
            f"n = {n} is too short for {spans} spans of {span_len} drifting {drift} over {layers} layers"
        )
    starts = (
        torch.arange(spans) * gap
        + drift * layers
        + torch.randint(0, room, (batch, kv_heads, spans), generator=g)
    )
    for _ in range(layers):
        direction = torch.randn(batch, kv_heads, head_dim, generator=g, dtype=dtype)
        direction = direction / direction.norm(dim=-1, keepdim=True)
        q = direction.repeat_interleave(heads // kv_heads, dim=1) * head_dim**0.5
        q = q + 0.05 * torch.randn(batch, heads, head_dim, generator=g, dtype=dtype)
        K = 0.1 * torch.randn(batch, kv_heads, n, head_dim, generator=g, dtype=dtype)
        pos = (starts[..., None] + torch.arange(span_len)).reshape(batch, kv_heads, -1)
        K.scatter_(
            2,
            pos[..., None].expand(-1, -1, -1, head_dim),
            (direction * strength)[:, :, None].expand(-1, -1, pos.shape[-1], -1).contiguous(),
        )
        V = torch.randn(batch, kv_heads, n, head_dim, generator=g, dtype=dtype)
        qs.append(q)
        Ks.append(K)
        Vs.append(V)
        truth.append(pos.sort(-1).values)
        starts = starts + torch.randint(-drift, drift + 1, starts.shape, generator=g)
    return qs, Ks, Vs, truth
