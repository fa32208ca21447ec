"""CompactAttention: select (any block selector) → block-union tables → paged attention in place."""

from __future__ import annotations

import math

import torch

from compact_attn.paged import PagedKVCache, paged_attention
from compact_attn.selectors import TailQuerySelector
from compact_attn.tables import BlockTables, block_union_tables, check_group, own_blocks
from papershelf.errors import InputError


def chunk_context(q: torch.Tensor, cache: PagedKVCache, layer: int) -> tuple[int, int]:
    """(offset, N) of a chunk whose keys/values are already appended to ``cache``."""
    if q.dim() != 3:
        raise InputError(f"q must be (heads, T, head_dim), got shape {tuple(q.shape)}")
    check_group(q.shape[0], cache.kv_heads)
    layers = len(cache.lengths)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < layers:
        raise InputError(f"layer must be an index in [0, {layers}), got {layer!r}")
    if q.dtype != cache.k[layer].dtype:
        raise InputError(f"q has dtype {q.dtype} but the cache holds {cache.k[layer].dtype}")
    if q.device.type == "cpu" and not bool(torch.isfinite(q).all()):  # cheap: one chunk of queries
        raise InputError("q contains NaN or inf")
    N = cache.lengths[layer]
    T = q.shape[1]
    if N < T or T < 1:
        raise InputError(
            f"append the chunk's keys/values to the cache first: cache holds {N} tokens, chunk has {T}"
        )
    return N - T, N


def cache_summaries(selector, cache: PagedKVCache, layer: int) -> dict:
    """The per-block key summaries the cache keeps for a built-in selector (so it skips a pass over the
    keys): mean keys for "meanpool", key minima and maxima for "bound"; ``key_means=None`` for any other
    selector (the documented interface)."""
    name = getattr(selector, "name", "")
    if name == "bound":
        return {"key_means": None, "key_bounds": cache.block_bounds(layer)}
    return {"key_means": cache.block_means(layer) if name == "meanpool" else None}


class CompactAttention:
    """Block-Union KV Selection for one chunk.

    ``selector``: any callable ``(q, k, *, offset, block, key_means) -> bool (H, Qb, Kb)`` (default
    :class:`TailQuerySelector` with 8 queries per Q-block and a 25% budget: the one of this package's
    selectors that meets every target it was measured on; the paper notes' :class:`AntidiagonalSelector`
    is one argument away); ``backend``: "torch" or "triton" (the paged kernel).
    After each :meth:`attend`, ``last_tables`` holds the tables and ``last_fraction`` the fraction of the
    context's KV blocks each table reads (mean over KV heads)."""

    name = "compact"

    def __init__(self, selector=None, *, backend: str = "torch") -> None:
        self.selector = TailQuerySelector() if selector is None else selector
        if backend not in ("torch", "triton"):
            raise InputError(f"backend must be 'torch' or 'triton', got {backend!r}")
        self.backend = backend
        self.last_tables: BlockTables | None = None
        self.last_fraction = float("nan")

    def tables(self, q: torch.Tensor, cache: PagedKVCache, layer: int) -> BlockTables:
        offset, _N = chunk_context(q, cache, layer)
        B = cache.page_size
        keys = cache.logical_keys(layer)
        masks = self.selector(q, keys, offset=offset, block=B, **cache_summaries(self.selector, cache, layer))
        G = q.shape[0] // cache.kv_heads
        return block_union_tables(
            masks,
            G,
            own=own_blocks(offset, q.shape[1], B),
            page_table=cache.page_table,
            num_pages=cache.num_pages,
        )

    def attend(self, q: torch.Tensor, cache: PagedKVCache, layer: int = 0, scaling=None) -> torch.Tensor:
        """o (H, T, D) for the chunk q (H, T, D) whose k/v were just appended to ``cache``."""
        offset, N = chunk_context(q, cache, layer)
        tables = self.tables(q, cache, layer)
        self.last_tables = tables
        self.last_fraction = float(tables.lengths.double().mean()) / math.ceil(N / cache.page_size)
        return paged_attention(
            q, cache.k[layer], cache.v[layer], tables, offset=offset, seq_len=N, scaling=scaling,
            backend=self.backend,
        )  # fmt: skip
