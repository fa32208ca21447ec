"""The anchors, with the same shapes as the method: dense attention (SDPA with GQA, and a grouped-query
matmul that reads each KV head once) and Quest's page min/max selection. The oracle (exact top-κ per
layer) and static anchor-layer reuse (Kascade-style) are ``PrismConfig(method="oracle" | "static")`` of
:class:`prism_attn.PrismDecoder`, since they differ from Prism only in where indices come from.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from papershelf.errors import check_int
from prism_attn.config import check_decode_inputs, check_kappa
from prism_attn.ops import PageBounds, _topk_sorted, dense_decode

__all__ = ["QuestCache", "dense_decode", "quest_metadata", "quest_select", "sdpa_decode"]


def sdpa_decode(q, K, V, scaling: float | None = None) -> torch.Tensor:
    """Dense decode attention through torch's ``scaled_dot_product_attention(enable_gqa=True)``."""
    scaling = check_decode_inputs(q, K, V, scaling)
    o = F.scaled_dot_product_attention(q[:, :, None, :], K, V, scale=scaling, enable_gqa=True)
    return o[:, :, 0, :]


def quest_metadata(K: torch.Tensor, page: int = 16, *, start_page: int = 0, out=None):
    """Per-page channel-wise (min, max) of K: two tensors (B, H_kv, ⌈n/page⌉, D).

    With ``out=(lo, hi)`` from a shorter cache, only pages from ``start_page`` on are recomputed (the
    incremental update a decoder does as its cache grows)."""
    B, Hkv, n, D = K.shape
    npages = math.ceil(n / page)
    full = n // page
    lo = torch.empty(B, Hkv, npages, D, dtype=K.dtype, device=K.device)
    hi = torch.empty_like(lo)
    if out is not None:
        keep = min(start_page, out[0].shape[2])
        lo[:, :, :keep], hi[:, :, :keep] = out[0][:, :, :keep], out[1][:, :, :keep]
    else:
        keep = 0
    if full > keep:
        blocks = K[:, :, keep * page : full * page].reshape(B, Hkv, full - keep, page, D)
        lo[:, :, keep:full], hi[:, :, keep:full] = blocks.amin(3), blocks.amax(3)
    if npages > full:
        tail = K[:, :, full * page :]
        lo[:, :, full], hi[:, :, full] = tail.amin(2), tail.amax(2)
    return lo, hi


def quest_select(q, K, kappa: int, page: int = 16, scaling: float | None = None, meta=None) -> torch.Tensor:
    """Quest: top ⌊κ/page⌋ pages by the GQA-pooled softmax of the page upper bounds of q·k; their tokens
    (B, H_kv, pages·page) ascending, -1 past the end of the cache. ``meta``: :func:`quest_metadata`."""
    scaling = check_decode_inputs(q, K, K, scaling)
    kappa = check_kappa(kappa)
    page = check_int("page", page, low=1)
    B, H, D = q.shape
    Hkv, n = K.shape[1], K.shape[2]
    page = min(page, n)  # a page longer than the cache is the whole cache (one page either way)
    lo, hi = quest_metadata(K, page) if meta is None else meta
    npages = lo.shape[2]
    keep = max(1, min(npages, kappa // page))
    qg = q.reshape(B, Hkv, H // Hkv, D)
    # Σ_d max(q_d lo_d, q_d hi_d) = q⁺·hi + q⁻·lo: two matmuls, no (g, P, D) temporary
    bound = torch.matmul(qg.clamp(min=0), hi.transpose(-1, -2)) + torch.matmul(
        qg.clamp(max=0), lo.transpose(-1, -2)
    )
    bound = bound * scaling  # (B, Hkv, g, P)
    pages = _topk_sorted(torch.softmax(bound, dim=-1).sum(2), keep)
    tokens = (pages[..., None] * page + torch.arange(page, device=K.device)).reshape(B, Hkv, keep * page)
    return tokens.masked_fill(tokens >= n, -1)


class QuestCache:
    """Quest's page metadata for one layer, updated incrementally as the cache grows: the exact (K's
    dtype) packed bounds of :class:`prism_attn.ops.PageBounds`, handed out as ``(lo, hi)`` views."""

    def __init__(self, page: int) -> None:
        self.page = page
        self._bounds = PageBounds(page)
        self.meta = None  # (lo, hi) of the cache seen last

    def update(self, K: torch.Tensor):
        packed = self._bounds.update(K)
        D = K.shape[3]
        self.meta = (packed[..., D:], packed[..., :D])
        return self.meta
