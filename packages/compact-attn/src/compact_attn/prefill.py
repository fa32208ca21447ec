"""The chunked-prefill driver over a paged KV cache, on raw tensors (one layer) or on a transformers
model (every layer, through ``AttentionInterface``; see :mod:`compact_attn.hf`)."""

from __future__ import annotations

import torch

from compact_attn.paged import PagedKVCache
from compact_attn.tables import check_group
from papershelf.errors import InputError, check_int


def chunk_spans(n: int, chunk: int) -> list[tuple[int, int]]:
    """[start, end) of each chunk of ``n`` tokens. A chunk size that is not a multiple of the page size is
    allowed: chunks then start mid-page, the page is shared by two chunks, and the causal blocks of a
    chunk are every page it touches."""
    chunk = check_int("chunk", chunk, low=1)
    return [(s, min(s + chunk, n)) for s in range(0, n, chunk)]


def chunked_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    method,
    *,
    chunk: int = 512,
    page_size: int = 64,
    allocation: str = "sequential",
    scaling: float | None = None,
) -> tuple[torch.Tensor, list[float]]:
    """Prefill one layer chunk by chunk: append each chunk's k/v to a fresh :class:`PagedKVCache`, then
    ``method.attend`` the chunk's queries. q (H, N, D), k/v (H_kv, N, D). Returns the output (H, N, D)
    and the KV fraction each chunk read."""
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or q.shape[1] != k.shape[1]:
        raise InputError("q must be (heads, N, D) and k, v (kv_heads, N, D) over the same N tokens")
    check_group(q.shape[0], k.shape[0])
    N = q.shape[1]
    if N == 0:
        raise InputError("nothing to prefill: the sequence is empty")
    cache = PagedKVCache.for_length(
        N, page_size, k.shape[0], k.shape[2], dtype=k.dtype, allocation=allocation
    )
    out = torch.empty_like(q)
    fractions = []
    for s, e in chunk_spans(N, chunk):
        cache.append(0, k[:, s:e], v[:, s:e])
        out[:, s:e] = method.attend(q[:, s:e], cache, 0, scaling)
        fractions.append(float(method.last_fraction))
    return out, fractions
