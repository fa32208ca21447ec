"""Baselines over the same paged cache and chunk interface (``attend(q, cache, layer)``):

* :class:`DenseAttention` — dense chunked prefill: torch SDPA (``enable_gqa``) or a grouped-query
  matmul ("auto" times nothing: it is chosen by the benchmark, which measures both);
* :class:`QuokaAttention` — QUOKA (arXiv 2602.08722), reconstructed: per query head keep the ``n_queries``
  queries least cosine-similar to the chunk's mean query, score every past key by its mean cosine
  similarity to them, take the max over the GQA group, keep the top keys per KV head (the chunk's own
  keys always), **gather** (copy) them and run dense attention;
* :class:`PerHeadBlockSparse` — the selector's masks executed as they are: every (query head, Q-block)
  row reads only its own blocks (plus its causal blocks), no union.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from compact_attn.compact import cache_summaries, chunk_context
from compact_attn.paged import PagedKVCache, attend_positions, softmax_scaling
from compact_attn.selectors import AntidiagonalSelector, check_mask
from compact_attn.tables import check_group, own_blocks
from papershelf.errors import InputError, check_int, check_number


def gathered_attention(q, K, V, pos, *, offset: int, scaling: float, impl: str = "sdpa") -> torch.Tensor:
    """Attention of q (G, T, D) (one KV group) over keys K, V (M, D) at sorted token positions ``pos``."""
    return attend_positions(
        q, K, V, pos, offset=offset, seq_len=offset + q.shape[1], scaling=scaling, impl=impl
    )


def check_chunk_kv(q, k, v, offset) -> None:
    """q (H, T, D) at absolute positions offset … N-1 of k, v (H_kv, N, D): shapes, GQA, finite q."""
    if not all(isinstance(x, torch.Tensor) for x in (q, k, v)) or q.dim() != 3 or k.dim() != 3:
        raise InputError("q must be (heads, T, D) and k, v (kv_heads, N, D) tensors")
    if (v is not k and v.shape != k.shape) or q.shape[-1] != k.shape[-1]:
        raise InputError(f"k and v must be (kv_heads, N, D) with q's D, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")  # fmt: skip
    check_group(q.shape[0], k.shape[0])
    bad_type = isinstance(offset, bool) or not isinstance(offset, int)
    if bad_type or offset < 0 or offset + q.shape[1] != k.shape[1]:
        raise InputError(f"offset must be N - T = {k.shape[1] - q.shape[1]} (the chunk ends the cache), "
                         f"got {offset!r}")  # fmt: skip
    if q.shape[1] < 1:
        raise InputError("the query chunk is empty")
    if q.device.type == "cpu" and not bool(torch.isfinite(q).all()):
        raise InputError("q contains NaN or inf")


def dense_chunk_attention(q, k, v, *, offset: int, scaling=None, impl: str = "matmul") -> torch.Tensor:
    """Dense causal attention of a chunk q (H, T, D) over k, v (H_kv, N, D) in token order."""
    check_chunk_kv(q, k, v, offset)
    H, T, D = q.shape
    Hkv, N, _ = k.shape
    G = H // Hkv
    scaling = softmax_scaling(scaling, D)
    if impl == "sdpa":
        mask = torch.arange(N)[None, :] <= (offset + torch.arange(T))[:, None]
        o = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, scale=scaling,
                                           enable_gqa=True)  # fmt: skip
        return o[0]
    if impl != "matmul":
        raise InputError(f"impl must be 'matmul' or 'sdpa', got {impl!r}")
    pos = torch.arange(N)
    out = torch.empty_like(q)
    for g in range(Hkv):
        out[g * G : (g + 1) * G] = gathered_attention(
            q[g * G : (g + 1) * G], k[g], v[g], pos, offset=offset, scaling=scaling, impl="matmul"
        )
    return out


class DenseAttention:
    name = "dense"

    def __init__(self, impl: str = "sdpa") -> None:
        if impl not in ("matmul", "sdpa"):
            raise InputError(f"impl must be 'matmul' or 'sdpa', got {impl!r}")
        self.impl = impl
        self.last_fraction = 1.0

    def attend(self, q, cache: PagedKVCache, layer: int = 0, scaling=None) -> torch.Tensor:
        offset, _N = chunk_context(q, cache, layer)
        k, v = cache.logical_keys(layer), cache.logical_values(layer)
        return dense_chunk_attention(q, k, v, offset=offset, scaling=scaling, impl=self.impl)


def quoka_select(q, k, *, offset: int, budget, n_queries: int = 32) -> torch.Tensor:
    """Token ids (H_kv, M) kept by QUOKA, sorted: ⌈β·offset⌉ past tokens (β a fraction of the past, or an
    int count) and the chunk's own tokens offset … N-1, always."""
    check_chunk_kv(q, k, k, offset)
    if isinstance(budget, bool) or not isinstance(budget, int | float):
        raise InputError(f"budget must be a fraction in (0, 1] or a token count >= 1, got {budget!r}")
    if isinstance(budget, int):
        check_int("budget", budget, low=1)
    n_queries = check_int("n_queries", n_queries, low=1)
    H, T, D = q.shape
    Hkv, N, _ = k.shape
    G = H // Hkv
    if isinstance(budget, float):
        if not 0 < budget <= 1:
            raise InputError(f"budget as a fraction must lie in (0, 1], got {budget}")
        keep = math.ceil(budget * offset)
    else:
        keep = int(budget)
    keep = max(0, min(offset, keep))
    own = torch.arange(offset, N).expand(Hkv, T)
    if keep == 0:
        return own.clone()
    qn = F.normalize(q.float(), dim=-1)
    qbar = F.normalize(qn.mean(1, keepdim=True), dim=-1)
    cos = (qn * qbar).sum(-1)  # (H, T)
    nq = min(n_queries, T)
    sel = cos.topk(nq, dim=-1, largest=False).indices  # least similar to the mean query
    qs = torch.gather(qn, 1, sel[..., None].expand(H, nq, D))
    kn = F.normalize(k[:, :offset].float(), dim=-1)
    score = (qs.reshape(Hkv, G * nq, D) @ kn.transpose(1, 2)).view(Hkv, G, nq, offset)
    agg = score.mean(2).amax(1)  # mean over kept queries, max over the GQA group
    top = agg.topk(keep, dim=-1).indices.sort(-1).values
    return torch.cat([top, own], 1)


class QuokaAttention:
    name = "quoka"

    def __init__(self, budget=0.25, n_queries: int = 32) -> None:
        if isinstance(budget, bool) or not isinstance(budget, int | float):
            raise InputError(f"budget must be a fraction in (0, 1] or a token count >= 1, got {budget!r}")
        if isinstance(budget, float):
            check_number("budget", budget, low=0, high=1, low_open=True)
        else:
            check_int("budget", budget, low=1)
        self.budget, self.n_queries = budget, check_int("n_queries", n_queries, low=1)
        self.last_fraction = float("nan")
        self.last_index: torch.Tensor | None = None

    def attend(self, q, cache: PagedKVCache, layer: int = 0, scaling=None) -> torch.Tensor:
        offset, N = chunk_context(q, cache, layer)
        H, _T, D = q.shape
        Hkv = cache.kv_heads
        G = H // Hkv
        scaling = softmax_scaling(scaling, D)
        k, v = cache.logical_keys(layer), cache.logical_values(layer)
        idx = quoka_select(q, k, offset=offset, budget=self.budget, n_queries=self.n_queries)
        self.last_index = idx
        self.last_fraction = idx.shape[1] / N
        out = torch.empty_like(q)
        for g in range(Hkv):
            Ks, Vs = k[g].index_select(0, idx[g]), v[g].index_select(0, idx[g])  # the explicit KV copy
            out[g * G : (g + 1) * G] = gathered_attention(
                q[g * G : (g + 1) * G], Ks, Vs, idx[g], offset=offset, scaling=scaling
            )
        return out


def row_blocks(masks, offset: int, T: int, block: int) -> list[list[torch.Tensor]]:
    """Per (head, Q-block): sorted logical KV blocks = the mask row ∪ the row's own causal blocks."""
    H, Qb, _Kb = masks.shape
    own = own_blocks(offset, T, block)
    rows = []
    for h in range(H):
        per = []
        for b in range(Qb):
            r = masks[h, b].clone()
            last = offset + min((b + 1) * block, T) - 1
            r[own.start : last // block + 1] = True
            r[last // block + 1 :] = False
            per.append(r.nonzero().flatten())
        rows.append(per)
    return rows


class PerHeadBlockSparse:
    """Execute the selector's masks directly: one small attention per (query head, Q-block) row."""

    name = "per-head"

    def __init__(self, selector=None) -> None:
        self.selector = AntidiagonalSelector() if selector is None else selector
        self.last_fraction = float("nan")
        self.last_rows: list[list[torch.Tensor]] | None = None  # per query head, per Q-block: block ids

    def attend(self, q, cache: PagedKVCache, layer: int = 0, scaling=None) -> torch.Tensor:
        offset, N = chunk_context(q, cache, layer)
        H, T, D = q.shape
        B = cache.page_size
        G = H // cache.kv_heads
        scaling = softmax_scaling(scaling, D)
        summaries = cache_summaries(self.selector, cache, layer)
        masks = self.selector(q, cache.logical_keys(layer), offset=offset, block=B, **summaries)
        masks = check_mask(masks, H, math.ceil(T / B), math.ceil(N / B))
        rows = self.last_rows = row_blocks(masks, offset, T, B)
        pt = cache.page_table
        kp, vp = cache.k[layer], cache.v[layer]
        out = torch.empty_like(q)
        ar = torch.arange(B)
        read = 0
        for h in range(H):
            g = h // G
            for b, blocks in enumerate(rows[h]):
                t0, t1 = b * B, min((b + 1) * B, T)
                K = kp[g].index_select(0, pt[blocks]).reshape(-1, D)
                V = vp[g].index_select(0, pt[blocks]).reshape(-1, D)
                pos = (blocks[:, None] * B + ar).reshape(-1)
                out[h, t0:t1] = gathered_attention(
                    q[h : h + 1, t0:t1], K, V, pos, offset=offset + t0, scaling=scaling
                )[0]
                read += blocks.numel()
        self.last_fraction = read / (H * len(rows[0]) * math.ceil(N / B))
        return out
