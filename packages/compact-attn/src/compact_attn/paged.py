"""A paged KV cache and attention over per-KV-head block tables, in place.

Layout: per layer, ``k`` and ``v`` are (H_kv, P, B, D) — P physical pages of B tokens for every KV head
(page p of KV head g holds the same token range for all heads, as in vLLM). One sequence owns a page
table mapping its logical blocks (tokens [j·B, (j+1)·B)) to physical page ids; all layers share it.

:func:`paged_attention` attends a query chunk over the pages named by a :class:`~compact_attn.BlockTables`,
with causal masking only where a key position can exceed a query position — i.e. inside the chunk's own
blocks, which are always the last entries of a sorted table.
"""

from __future__ import annotations

import math

import torch

from compact_attn.tables import BlockTables, check_group
from papershelf.errors import InputError, check_int, check_number


class PagedKVCache:
    """KV cache for one sequence, paged, for ``layers`` layers.

    ``num_pages`` physical pages of ``page_size`` tokens are allocated up front; ``allocation`` is
    ``"sequential"`` (logical block j → page j, so the logical keys are a free view) or ``"shuffled"``
    (a random permutation, to exercise the indirection). Pages are handed out as the sequence grows.
    """

    def __init__(
        self,
        num_pages: int,
        page_size: int,
        kv_heads: int,
        head_dim: int,
        *,
        layers: int = 1,
        dtype=torch.float32,
        allocation: str = "sequential",
        seed: int = 0,
    ) -> None:
        self.num_pages = check_int("num_pages", num_pages, low=1)
        self.page_size = check_int("page_size", page_size, low=1)
        self.kv_heads = check_int("kv_heads", kv_heads, low=1)
        self.head_dim = check_int("head_dim", head_dim, low=1)
        self.layers = check_int("layers", layers, low=1)
        if allocation not in ("sequential", "shuffled"):
            raise InputError(f"allocation must be 'sequential' or 'shuffled', got {allocation!r}")
        shape = (kv_heads, num_pages, page_size, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]
        self.key_sums = [torch.zeros(kv_heads, num_pages, head_dim, dtype=dtype) for _ in range(layers)]
        # elementwise key minima / maxima per page (the bound selector's input); ±inf while a page is empty
        self.key_min = [
            torch.full((kv_heads, num_pages, head_dim), float("inf"), dtype=dtype) for _ in range(layers)
        ]
        self.key_max = [
            torch.full((kv_heads, num_pages, head_dim), float("-inf"), dtype=dtype) for _ in range(layers)
        ]
        if allocation == "sequential":
            self._free = list(range(num_pages))
        else:
            self._free = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed)).tolist()
        self._free.reverse()  # pop() hands out in order
        self._pages: list[int] = []
        self.lengths = [0] * layers

    @classmethod
    def for_length(cls, n: int, page_size: int, kv_heads: int, head_dim: int, **kw) -> PagedKVCache:
        """A cache with exactly enough pages for ``n`` tokens."""
        page_size = check_int("page_size", page_size, low=1)
        return cls(max(1, math.ceil(n / page_size)), page_size, kv_heads, head_dim, **kw)

    @property
    def page_table(self) -> torch.Tensor:
        """int64 (blocks,): physical page of each logical block of the sequence."""
        return torch.as_tensor(self._pages, dtype=torch.long)

    def __len__(self) -> int:
        return max(self.lengths)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> int:
        """Write ``k``, ``v`` (H_kv, T, D) after layer ``layer``'s tokens; returns the offset written at."""
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.layers:
            raise InputError(f"layer must be an index in [0, {self.layers}), got {layer!r}")
        if not isinstance(k, torch.Tensor) or not isinstance(v, torch.Tensor):
            raise InputError("k and v must be tensors of shape (kv_heads, T, head_dim)")
        if k.shape != v.shape or k.dim() != 3 or k.shape[0] != self.kv_heads or k.shape[2] != self.head_dim:
            raise InputError(
                f"k and v must both be (kv_heads={self.kv_heads}, T, head_dim={self.head_dim}), "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        if k.device.type == "cpu" and not (bool(torch.isfinite(k).all()) and bool(torch.isfinite(v).all())):
            raise InputError("k or v contains NaN or inf: nothing was written to the cache")
        T = k.shape[1]
        start = self.lengths[layer]
        need = math.ceil((start + T) / self.page_size)
        while len(self._pages) < need:
            if not self._free:
                raise InputError(
                    f"the paged cache is full: {self.num_pages} pages of {self.page_size} tokens "
                    f"cannot hold {start + T} tokens"
                )
            self._pages.append(self._free.pop())
        pos = torch.arange(start, start + T)
        pages = self.page_table[pos // self.page_size]
        slots = pos % self.page_size
        dt = self.k[layer].dtype
        self.k[layer][:, pages, slots] = k.to(dt)
        self.v[layer][:, pages, slots] = v.to(dt)
        self.key_sums[layer].index_add_(1, pages, k.to(dt))
        where = pages[None, :, None].expand(k.shape)
        self.key_min[layer].scatter_reduce_(1, where, k.to(dt), "amin")
        self.key_max[layer].scatter_reduce_(1, where, k.to(dt), "amax")
        self.lengths[layer] = start + T
        return start

    def truncate(self, n: int) -> None:
        """Roll every layer back to its first ``n`` tokens (no-op for layers already that short): the
        slots past ``n`` are zeroed, the key sums of the pages they touched recomputed from what stays,
        and pages no layer uses any more go back to the free list. Used to undo a forward pass that
        failed part-way, so that no layer keeps tokens the others lack."""
        n = check_int("n", n, low=0)
        ps = self.page_size
        for layer in range(self.layers):
            old = self.lengths[layer]
            if old <= n:
                continue
            pages = self.page_table[n // ps : math.ceil(old / ps)]
            first = n % ps  # slots kept in the first touched page
            self.k[layer][:, pages[:1], first:] = 0
            self.v[layer][:, pages[:1], first:] = 0
            self.k[layer][:, pages[1:]] = 0
            self.v[layer][:, pages[1:]] = 0
            self.key_sums[layer][:, pages] = self.k[layer][:, pages].sum(2)
            self.key_min[layer][:, pages] = float("inf")
            self.key_max[layer][:, pages] = float("-inf")
            if first:  # the first touched page keeps its first `first` slots
                kept = self.k[layer][:, pages[:1], :first]
                self.key_min[layer][:, pages[:1]] = kept.amin(2)
                self.key_max[layer][:, pages[:1]] = kept.amax(2)
            self.lengths[layer] = n
        keep = math.ceil(max(self.lengths) / ps)
        while len(self._pages) > keep:
            self._free.append(self._pages.pop())  # handed out again first, as if never taken

    def logical_keys(self, layer: int, n: int | None = None) -> torch.Tensor:
        """Keys (H_kv, n, D) in token order: a view when pages are sequential, a gather otherwise."""
        return self._logical(self.k[layer], layer, n)

    def logical_values(self, layer: int, n: int | None = None) -> torch.Tensor:
        return self._logical(self.v[layer], layer, n)

    def _logical(self, pages: torch.Tensor, layer: int, n: int | None) -> torch.Tensor:
        n = self.lengths[layer] if n is None else n
        nb = math.ceil(n / self.page_size)
        pt = self.page_table[:nb]
        if bool((pt == torch.arange(nb)).all()):
            x = pages[:, :nb]
        else:
            x = pages.index_select(1, pt)
        return x.reshape(self.kv_heads, nb * self.page_size, self.head_dim)[:, :n]

    def block_means(self, layer: int) -> torch.Tensor:
        """Mean key of every logical block (H_kv, blocks, D), kept incrementally on append."""
        n = self.lengths[layer]
        nb = math.ceil(n / self.page_size)
        counts = torch.full((nb,), float(self.page_size), dtype=self.k[layer].dtype)
        if n % self.page_size:
            counts[-1] = n % self.page_size
        return self.key_sums[layer][:, self.page_table[:nb]] / counts[None, :, None]

    def block_bounds(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Elementwise (minimum, maximum) key of every logical block, two (H_kv, blocks, D) tensors, kept
        incrementally on append."""
        nb = math.ceil(self.lengths[layer] / self.page_size)
        pages = self.page_table[:nb]
        return self.key_min[layer][:, pages], self.key_max[layer][:, pages]


def check_chunk_inputs(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor) -> int:
    if not all(isinstance(x, torch.Tensor) for x in (q, k_pages, v_pages)):
        raise InputError("q, k_pages and v_pages must be tensors")
    if q.dim() != 3:
        raise InputError(f"q must be (heads, T, head_dim), got shape {tuple(q.shape)}")
    if k_pages.dim() != 4 or k_pages.shape != v_pages.shape:
        raise InputError("k_pages and v_pages must both be (kv_heads, pages, page_size, head_dim)")
    if k_pages.shape[-1] != q.shape[-1]:
        raise InputError(f"head_dim of q ({q.shape[-1]}) and of the pages ({k_pages.shape[-1]}) differ")
    if not q.dtype == k_pages.dtype == v_pages.dtype:
        raise InputError(f"q, k_pages and v_pages must share a dtype, got {q.dtype}, {k_pages.dtype}, "
                         f"{v_pages.dtype}")  # fmt: skip
    if q.device.type == "cpu" and not bool(torch.isfinite(q).all()):  # cheap: one chunk of queries
        raise InputError("q contains NaN or inf")
    return check_group(q.shape[0], k_pages.shape[0])


def check_tables(tables: BlockTables, k_pages: torch.Tensor, seq_len: int) -> None:
    P, B = k_pages.shape[1], k_pages.shape[2]
    if not isinstance(tables, BlockTables):
        raise InputError(
            f"tables must be a BlockTables (see block_union_tables), got {type(tables).__name__}"
        )
    if tables.kv_heads != k_pages.shape[0]:
        raise InputError(f"tables have {tables.kv_heads} rows, the cache {k_pages.shape[0]} KV heads")
    L = tables.logical.shape[1]
    if tables.physical.shape != tables.logical.shape or tables.lengths.shape != (tables.kv_heads,):
        raise InputError("tables.logical and .physical must be (kv_heads, L) and .lengths (kv_heads,)")
    if tables.lengths.numel() and (int(tables.lengths.min()) < 0 or int(tables.lengths.max()) > L):
        raise InputError(f"tables.lengths must lie in [0, {L}] (the table width)")
    valid = torch.arange(L)[None, :] < tables.lengths[:, None]
    # the torch twin masks causality on the sorted tail only, and a repeated block would count twice
    pairs = valid[:, 1:] & (tables.logical[:, 1:] <= tables.logical[:, :-1])
    if bool(pairs.any()):
        raise InputError("every block table row must be strictly ascending (sorted, no repeated block)")
    phys = tables.physical[valid]
    if phys.numel() and (int(phys.min()) < 0 or int(phys.max()) >= P):
        raise InputError(f"block table points outside the cache: page ids must lie in [0, {P})")
    lg = tables.logical[valid]
    if lg.numel() and (int(lg.min()) < 0 or int(lg.max()) * B >= seq_len):
        raise InputError(f"block table names a logical block beyond the sequence ({seq_len} tokens)")


def paged_attention(
    q: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    tables: BlockTables,
    *,
    offset: int,
    seq_len: int | None = None,
    scaling: float | None = None,
    backend: str = "torch",
    impl: str = "sdpa",
) -> torch.Tensor:
    """Attention of a query chunk over the KV pages its KV head's table names, read in place.

    q (H, T, D): queries at absolute positions offset … offset+T-1; k_pages, v_pages (H_kv, P, B, D);
    ``tables`` one row per KV head. Key n of a table block is visible to query t iff n ≤ offset + t and
    n < seq_len (default offset + T). Returns o (H, T, D) in q's dtype. ``backend``: "torch" (the twin)
    or "triton" (the kernel; CUDA, or CPU under TRITON_INTERPRET=1). The torch path gathers each table's
    pages (on CPU a gather is a copy) and runs ``impl``: torch SDPA (default) or a plain matmul/softmax."""
    group = check_chunk_inputs(q, k_pages, v_pages)
    _H, T, D = q.shape
    for name, val in (("offset", offset), ("seq_len", seq_len)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, int)):
            raise InputError(f"{name} must be an integer, got {val!r}")
    seq_len = offset + T if seq_len is None else seq_len
    if offset < 0 or seq_len < offset + T:
        raise InputError(f"need 0 <= offset and offset + T <= seq_len, got {offset}, {T}, {seq_len}")
    check_tables(tables, k_pages, seq_len)
    valid = torch.arange(tables.logical.shape[1])[None, :] < tables.lengths[:, None]
    first = tables.logical.masked_fill(~valid, torch.iinfo(tables.logical.dtype).max)
    first = first.min(1).values if first.shape[1] else torch.full((tables.kv_heads,), offset + 1)
    if bool((first * k_pages.shape[2] > offset).any()):  # a softmax over no key: silent zeros otherwise
        raise InputError(
            "a block table gives the chunk's first query no visible key; include the chunk's own blocks"
        )
    scaling = softmax_scaling(scaling, D)
    if backend == "triton":
        from compact_attn.kernels.paged_attention import paged_attention_triton

        return paged_attention_triton(q, k_pages, v_pages, tables, offset=offset, seq_len=seq_len,
                                      scaling=scaling)  # fmt: skip
    if backend != "torch":
        raise InputError(f"backend must be 'torch' or 'triton', got {backend!r}")
    if impl not in ("sdpa", "matmul"):
        raise InputError(f"impl must be 'sdpa' or 'matmul', got {impl!r}")
    B = k_pages.shape[2]
    out = torch.empty_like(q)
    ar = torch.arange(B)
    for g in range(tables.kv_heads):
        logical = tables.row(g)
        pages = tables.row(g, physical=True)
        K = k_pages[g].index_select(0, pages).reshape(-1, D)
        V = v_pages[g].index_select(0, pages).reshape(-1, D)
        pos = (logical[:, None] * B + ar[None, :]).reshape(-1)
        out[g * group : (g + 1) * group] = attend_positions(
            q[g * group : (g + 1) * group],
            K,
            V,
            pos,
            offset=offset,
            seq_len=seq_len,
            scaling=scaling,
            impl=impl,
        )
    return out


def attend_positions(q, K, V, pos, *, offset: int, seq_len: int, scaling: float, impl: str = "sdpa"):
    """Attention of q (G, T, D) — one KV group, queries at offset … offset+T-1 — over keys K, V (M, D) at
    ascending token positions ``pos``. Only keys after ``offset`` (the sorted tail) need a mask."""
    G, T, D = q.shape
    c0 = int(torch.searchsorted(pos, torch.tensor(offset), right=True))
    hidden = None
    if c0 < pos.numel():
        tail = pos[c0:]
        hidden = (tail[None, :] > (offset + torch.arange(T))[:, None]) | (tail[None, :] >= seq_len)
    if impl == "sdpa":
        mask = None
        if hidden is not None:
            mask = torch.ones(T, pos.numel(), dtype=torch.bool)
            mask[:, c0:] = ~hidden
        o = torch.nn.functional.scaled_dot_product_attention(
            q[None], K[None, None], V[None, None], attn_mask=mask, scale=scaling, enable_gqa=True
        )
        return o[0]
    s = (q.reshape(G * T, D) @ K.T).mul_(scaling)
    if hidden is not None:
        s.view(G, T, -1)[:, :, c0:].masked_fill_(hidden[None], float("-inf"))
    return (torch.softmax(s, -1) @ V).view(G, T, -1)


def softmax_scaling(scaling, head_dim: int) -> float:
    """The logits' scale: ``1/√head_dim`` when ``scaling`` is None, else a finite positive number."""
    if scaling is None:
        return 1.0 / math.sqrt(head_dim)
    return check_number("scaling", scaling, low=0, low_open=True)
