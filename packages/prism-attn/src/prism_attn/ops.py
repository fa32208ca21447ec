"""The vectorised torch fast path (CPU and GPU): fused scoring + top-κ + sparse attention per layer.

Same shapes and semantics as :mod:`prism_attn.reference`; nothing here allocates more than O(H·n) per step
(the scores of one layer, (B, H_kv, g, n), for anchor and dense layers; O(H·|C|) for a refined layer).
Scores computed for the selection are reused for the attention itself, so a refined layer reads the
candidate keys once and the selected values once.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from papershelf.errors import InputError, check_int
from prism_attn.config import check_decode_inputs, check_idx, check_kappa

_NEG = float("-inf")


def _grouped(q: torch.Tensor, Hkv: int) -> torch.Tensor:
    B, H, D = q.shape
    return q.reshape(B, Hkv, H // Hkv, D)


def gather_rows(X: torch.Tensor, idx: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """X (B, H_kv, n, D) rows at idx (B, H_kv, k) → (B, H_kv, k, D); -1 entries read row 0 (mask them).

    ``out``: a reusable 1-D buffer of X's dtype with at least B·H_kv·k·D elements. A fresh result of tens of
    MB is a new memory mapping every call, whose page faults cost more than the gather itself on CPU."""
    B, Hkv, n, D = X.shape
    base = (torch.arange(B * Hkv, device=X.device) * n).view(B, Hkv, 1)
    flat = (base + idx.clamp(min=0)).reshape(-1)
    src = X.reshape(B * Hkv * n, D)
    if out is None:
        return src.index_select(0, flat).view(B, Hkv, idx.shape[-1], D)
    dst = out[: flat.numel() * D].view(flat.numel(), D)
    torch.index_select(src, 0, flat, out=dst)
    return dst.view(B, Hkv, idx.shape[-1], D)


class Workspace:
    """Reusable gather buffers for refined layers (grown on demand, one per role)."""

    def __init__(self) -> None:
        self._bufs: dict[str, torch.Tensor] = {}

    def get(self, role: str, numel: int, like: torch.Tensor) -> torch.Tensor:
        buf = self._bufs.get(role)
        if buf is None or buf.numel() < numel or buf.dtype != like.dtype or buf.device != like.device:
            buf = torch.empty(numel, dtype=like.dtype, device=like.device)
            self._bufs[role] = buf
        return buf


def grouped_scores(q: torch.Tensor, K: torch.Tensor, scaling: float) -> torch.Tensor:
    """(B, H_kv, g, n): every query head against its KV head, reading each KV head once."""
    return torch.matmul(_grouped(q, K.shape[1]), K.transpose(-1, -2)) * scaling


def dense_decode(q, K, V, scaling: float | None = None) -> torch.Tensor:
    """Dense decode attention as a grouped-query matmul (each KV head read once): o (B, H, D)."""
    scaling = check_decode_inputs(q, K, V, scaling)
    p = torch.softmax(grouped_scores(q, K, scaling), dim=-1)
    return torch.matmul(p, V).reshape(q.shape)


def _topk_sorted(pooled: torch.Tensor, kappa: int) -> torch.Tensor:
    """Positions of the κ largest entries of the last dim, ascending (exact; long rows go through
    :func:`_topk_filtered`)."""
    n = pooled.shape[-1]
    if n >= _FILTER_MIN and kappa * _FILTER_RATIO <= n and not pooled.is_cuda:
        pos = _topk_filtered(pooled, kappa)
        if pos is not None:
            return pos
    return _ascending(torch.topk(pooled, kappa, dim=-1, sorted=False).indices, n)


def _ascending(idx: torch.Tensor, n: int) -> torch.Tensor:
    """The distinct positions ``idx`` (…, k) in [0, n), sorted along the last dim: marked in a (rows, n)
    mask and read back in order — on the CPU ~3× faster than ``sort`` for k in the thousands."""
    rows = idx.reshape(-1, idx.shape[-1])
    mask = torch.zeros(rows.shape[0], n, dtype=torch.bool, device=idx.device)
    mask.scatter_(1, rows, True)
    return mask.nonzero()[:, 1].view(idx.shape)


_FILTER_MIN = 65536  # rows shorter than this go straight to torch.topk (no gain at 32K)
_FILTER_RATIO = 8  # ... and so do rows with κ > n / 8
_FILTER_STRIDE = 8  # subsample every 8th entry to estimate the threshold


def _topk_filtered(x: torch.Tensor, kappa: int) -> torch.Tensor | None:
    """Exact top-κ positions (ascending) of a long last dim via a threshold: t = the 2κ/s-th largest of a
    stride-s subsample; every entry ≥ t is kept (compacted per row), and the top-κ of the kept entries is
    the top-κ of the row whenever at least κ entries are ≥ t (checked; ``None`` otherwise, and also when
    the threshold keeps too many, e.g. rows of ties). CPU ``torch.topk`` with a large κ over a long row is
    a partial sort that costs ~40× a pass over the row; this reads the row three times."""
    s = _FILTER_STRIDE
    lead, n = x.shape[:-1], x.shape[-1]
    rows = x.reshape(-1, n)
    sub = rows[:, ::s]
    kk = min(sub.shape[-1], max(1, math.ceil(2 * kappa / s)))
    t = torch.topk(sub, kk, dim=-1, sorted=False).values.amin(-1, keepdim=True)
    keep = rows >= t
    counts = keep.sum(-1)
    width = int(counts.max())
    if int(counts.min()) < kappa or width > 4 * kappa:
        return None
    r, c = keep.nonzero(as_tuple=True)  # row-major: each row's kept positions, ascending
    slot = torch.arange(r.numel(), device=x.device) - (torch.cumsum(counts, 0) - counts)[r]
    pos = torch.full((rows.shape[0], width), n, dtype=torch.long, device=x.device)
    pos[r, slot] = c
    vals = rows.gather(-1, pos.clamp(max=n - 1)).masked_fill_(pos >= n, _NEG)
    top = torch.topk(vals, kappa, dim=-1, sorted=False).indices
    return pos.gather(-1, top).sort(dim=-1).values.view(*lead, kappa)


def anchor(q, K, V, kappa: int, scaling: float, *, attend: bool = True):
    """Exact top-κ of the GQA-pooled probabilities over all n tokens; optionally attend over it.

    Returns (o or None, idx (B, H_kv, κ) ascending).
    """
    s = grouped_scores(q, K, scaling)
    pooled = torch.softmax(s, dim=-1).sum(2)
    idx = _topk_sorted(pooled, kappa)
    if not attend:
        return None, idx
    g = s.shape[2]
    s_sel = s.gather(-1, idx[:, :, None, :].expand(-1, -1, g, -1))
    return _weighted_rows(V, idx, torch.softmax(s_sel, dim=-1)).view(q.shape), idx


def dense_with_selection(q, K, V, kappa: int, scaling: float):
    """Dense attention plus the exact top-κ selection from the same scores (a dense layer that seeds the
    next layer's proposal)."""
    s = grouped_scores(q, K, scaling)
    p = torch.softmax(s, dim=-1)
    out = torch.matmul(p, V).reshape(q.shape)
    return out, _topk_sorted(p.sum(2), kappa)


def propose(
    prev, n: int, *, radius=1, block=16, sink=4, local=64, cap: int | None = None, extra=None
) -> torch.Tensor:
    """Candidate tokens (B, H_kv, c) proposed from the previous layer's selection ``prev`` (B, H_kv, k)
    and, optionally, ``extra`` blocks (B, H_kv, G; the global term): the vectorised
    :func:`prism_attn.reference.propose` (same candidates, same order, same -1 padding)."""
    n = check_int("n", n, low=1)
    radius = check_int("radius", radius, low=0)
    block = check_int("block", block, low=1)
    sink, local = check_int("sink", sink, low=0), check_int("local", local, low=0)
    if cap is not None:
        cap = check_int("cap", cap, low=1)
    if not isinstance(prev, torch.Tensor) or prev.dim() != 3 or prev.dtype not in (torch.int64, torch.int32):
        raise InputError("prev must be an integer tensor (B, H_kv, k) of token positions")
    if prev.numel() and (int(prev.max()) >= n or int(prev.min()) < -1):
        raise InputError(f"prev entries must be in [0, n = {n}) or -1 for padding")
    if extra is not None:
        nb = math.ceil(n / block)
        if not isinstance(extra, torch.Tensor) or extra.dim() != 3 or extra.shape[:2] != prev.shape[:2]:
            raise InputError("extra must be an integer tensor (B, H_kv, G) of block ids, like prev's rows")
        if extra.numel() and (int(extra.max()) >= nb or int(extra.min()) < -1):
            raise InputError(f"extra entries must be block ids in [0, {nb}) or -1 for padding")
        extra = extra.long()
    return _propose(prev.long(), n, radius, block, sink, local, cap, extra)


def page_bound(q: torch.Tensor, meta) -> torch.Tensor:
    """Quest's upper bound of q·k per page, unscaled: (B, H_kv, g, P) in q's dtype.

    ``meta``: ``(lo, hi)``, each (B, H_kv, P, D) (:func:`prism_attn.baselines.quest_metadata`), or the
    packed (B, H_kv, P, 2D) bounds of :class:`PageBounds` (q is then cast to their dtype)."""
    Hkv = meta.shape[1] if isinstance(meta, torch.Tensor) else meta[0].shape[1]
    qg = _grouped(q, Hkv)
    # Σ_d max(q_d lo_d, q_d hi_d) = q⁺·hi + q⁻·lo
    if isinstance(meta, torch.Tensor):  # one matmul over [hi | lo]
        q2 = torch.cat([qg.clamp(min=0), qg.clamp(max=0)], dim=-1).to(meta.dtype)
        return torch.matmul(q2, meta.transpose(-1, -2)).to(q.dtype)
    lo, hi = meta
    bound = torch.matmul(qg.clamp(min=0), hi.transpose(-1, -2))
    return bound.add_(torch.matmul(qg.clamp(max=0), lo.transpose(-1, -2)))


class PageBounds:
    """The global term's page metadata for one layer, kept incrementally as the cache grows: each page's
    channel max then channel min of K, packed as (B, H_kv, P, 2D) in ``dtype`` (``None``: K's dtype).

    A narrower dtype halves the bytes the global term streams per step (bfloat16 for a float32 cache). The
    max is rounded up and the min down, so the stored bounds still contain every key of their page; the
    bound itself is then computed in that dtype, which only reorders pages whose bounds are within its
    rounding (the proposal is a ranking: refinement scores the candidates exactly). Storage grows by
    doubling, so a decode step rewrites only the last page instead of copying the metadata."""

    def __init__(self, page: int, dtype: torch.dtype | None = None) -> None:
        self.page, self.dtype = page, dtype
        self._buf: torch.Tensor | None = None
        self.n = 0

    def update(self, K: torch.Tensor) -> torch.Tensor:
        from prism_attn.baselines import quest_metadata

        B, Hkv, n, D = K.shape
        dtype = self.dtype or K.dtype
        P = math.ceil(n / self.page)
        buf = self._buf
        fresh = buf is None or n < self.n or buf.shape[:2] != (B, Hkv) or buf.shape[3] != 2 * D
        if fresh or buf.dtype != dtype or buf.device != K.device:
            buf, start = None, 0
        else:
            start = self.n // self.page  # the last, possibly partial page is recomputed
        if buf is None or buf.shape[2] < P:
            grown = torch.empty(B, Hkv, max(P, 2 * buf.shape[2]) if buf is not None else P, 2 * D,
                                dtype=dtype, device=K.device)  # fmt: skip
            if buf is not None:
                grown[:, :, :start] = buf[:, :, :start]
            buf = grown
        if P > start:
            lo, hi = quest_metadata(K[:, :, start * self.page :], self.page)
            buf[:, :, start:P, :D] = _round_toward(hi, dtype, up=True)
            buf[:, :, start:P, D:] = _round_toward(lo, dtype, up=False)
        self._buf, self.n = buf, n
        return self.meta

    @property
    def meta(self) -> torch.Tensor | None:
        """The packed bounds of the cache seen last, (B, H_kv, P, 2D), or ``None`` before any update."""
        return None if self._buf is None else self._buf[:, :, : math.ceil(self.n / self.page)]


def _round_toward(x: torch.Tensor, dtype: torch.dtype, *, up: bool) -> torch.Tensor:
    """``x`` in ``dtype``, rounded up (or down) where the cast rounded the other way."""
    y = x.to(dtype)
    if dtype == x.dtype:
        return y
    back = y.to(x.dtype)
    wrong = back < x if up else back > x
    step = torch.nextafter(y, torch.full_like(y, math.inf if up else -math.inf))
    return torch.where(wrong, step, y)


def global_blocks(q, meta, count: int, n: int, *, block=16, sink=4, local=64, scaling: float, span: int = 1):
    """The proposal's global term from per-page (min, max) metadata ``meta`` (``(lo, hi)``, each
    (B, H_kv, P, D), :func:`prism_attn.baselines.quest_metadata` with page = span·block, or the packed
    bounds of :class:`PageBounds`): the ``count`` pages holding no
    sink/local block with the largest GQA-pooled softmax of the Quest bound, returned as their block ids
    (B, H_kv, count'·span) ascending, -1 past the last block — the vectorised
    :func:`prism_attn.reference.global_blocks`."""
    _check_global_args(q, meta, count, n, block, sink, local, span, scaling)
    pooled = torch.softmax(page_bound(q, meta).mul_(scaling), dim=-1).sum(2)
    P = pooled.shape[-1]
    nb = math.ceil(n / block)
    # pages holding a sink block (the first ⌈sink/block⌉) or a local one (from (n − local) // block on):
    # a prefix [0, a) and a suffix [b, P) of the pages
    a = -(-math.ceil(sink / block) // span) if sink else 0
    b = (max(0, n - local) // block) // span if local else P
    count = min(count, max(0, b - a))
    if count == 0:
        return torch.empty(*pooled.shape[:2], 0, dtype=torch.long, device=q.device)
    pooled[..., :a] = -1.0
    pooled[..., b:] = -1.0
    pages = _topk_sorted(pooled, count)
    if span == 1:
        return pages
    span = min(span, nb)  # a page of more blocks than the cache holds is the whole cache
    blocks = (pages[..., None] * span + torch.arange(span, device=q.device)).flatten(-2)
    return blocks.masked_fill_(blocks >= nb, -1)


def _check_global_args(q, meta, count, n, block, sink, local, span, scaling) -> None:
    """Named errors for :func:`global_blocks`' public arguments (scalars and shapes only: no data scan)."""
    from papershelf.errors import check_number

    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise InputError(f"q must be a (B, H, D) torch.Tensor, got {getattr(q, 'shape', type(q).__name__)}")
    check_int("count", count, low=0)
    check_int("n", n, low=1)
    check_int("block", block, low=1)
    check_int("sink", sink, low=0)
    check_int("local", local, low=0)
    check_int("span", span, low=1)
    check_number("scaling", scaling, low=0, low_open=True)
    packed = isinstance(meta, torch.Tensor)
    parts = [meta] if packed else list(meta) if isinstance(meta, tuple | list) and len(meta) == 2 else None
    if parts is None or not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in parts):
        raise InputError("meta must be (lo, hi), each (B, H_kv, P, D), or packed (B, H_kv, P, 2D) bounds")
    if not packed and parts[0].shape != parts[1].shape:
        raise InputError(
            f"meta's lo and hi differ in shape: {tuple(parts[0].shape)} vs {tuple(parts[1].shape)}"
        )
    B, H, D = q.shape
    mB, Hkv, P, mD = parts[0].shape
    if mB != B or Hkv == 0 or H % Hkv or mD != (2 * D if packed else D):
        raise InputError(
            f"meta of shape {tuple(parts[0].shape)} does not fit q of shape {tuple(q.shape)} "
            f"(same batch, H_kv dividing H, {'2D' if packed else 'D'} channels)"
        )
    pages = math.ceil(math.ceil(n / block) / span)
    if P != pages:
        raise InputError(f"meta holds {P} pages but n = {n} tokens in pages of {span}x{block} need {pages}")


def _propose(prev, n, radius, block, sink, local, cap, extra=None) -> torch.Tensor:
    B, Hkv, _ = prev.shape
    block = min(block, n)  # a block longer than the cache is the whole cache (one block either way)
    nb = math.ceil(n / block)
    dev = prev.device
    valid = prev >= 0
    counts = torch.zeros(B, Hkv, nb, dtype=torch.long, device=dev)
    pos = prev.clamp(min=0)
    # a shift is ~6x cheaper than an int64 floor division on the CPU
    owner = pos >> (block.bit_length() - 1) if block & (block - 1) == 0 else pos // block
    counts.scatter_add_(-1, owner, valid.long())
    sel = counts > 0
    # region mass: selected tokens in each run of consecutive selected blocks
    start = sel & ~F.pad(sel[..., :-1], (1, 0), value=False)
    run_id = torch.cumsum(start.long(), dim=-1)  # runs numbered from 1 per row; unselected blocks: ignored
    mass = torch.zeros(B, Hkv, nb + 1, dtype=torch.long, device=dev)
    # unselected blocks carry the previous run's id but count 0, so they add nothing to it
    mass.scatter_add_(-1, run_id, counts)
    region = torch.where(sel, mass.gather(-1, run_id), 0)
    r = min(radius, nb)
    if r:
        near = F.pad(region, (r, r)).unfold(-1, 2 * r + 1, 1).amax(-1)  # max over ± r blocks
    else:
        near = region
    tier = torch.where(sel, 2 * region + 1, 2 * near)
    forced = 2 * n + 2
    # sink, local and the global term's blocks (padding -1 goes to a spare last column)
    is_forced = torch.zeros(B, Hkv, nb + 1, dtype=torch.bool, device=dev)
    if extra is not None and extra.shape[-1]:
        is_forced.scatter_(-1, torch.where(extra >= 0, extra, nb), True)
    is_forced = is_forced[..., :nb]
    if sink:
        is_forced[..., : math.ceil(sink / block)] = True
    if local:
        is_forced[..., max(0, n - local) // block :] = True
    tier = tier.masked_fill(is_forced, forced)
    key = tier * nb + torch.arange(nb - 1, -1, -1, device=dev)
    width = int((tier > 0).sum(-1).max())
    limit = None
    if cap is not None:  # sink, local and global blocks come on top of the cap
        limit = is_forced.sum(-1, keepdim=True) + max(1, cap // block)
        width = min(width, int(limit.max()))
    top = torch.topk(key, width, dim=-1, sorted=limit is not None).indices
    keep = tier.gather(-1, top) > 0
    if limit is not None:  # rows with fewer forced blocks keep fewer (the cap is per row)
        keep &= torch.arange(width, device=dev) < limit
    blocks = torch.where(keep, top, nb).sort(dim=-1).values
    tokens = (blocks[..., None] * block + torch.arange(block, device=dev)).reshape(B, Hkv, width * block)
    tokens = tokens.masked_fill(tokens >= n, -1)  # -1s are trailing: blocks ascending, padding last
    return tokens[..., : int((tokens >= 0).sum(-1).max())]


def refine(q, K, cand: torch.Tensor, kappa: int, scaling: float | None = None) -> torch.Tensor:
    """Top-κ (B, H_kv, κ) of the GQA-pooled probabilities over each group's candidates ``cand``
    (B, H_kv, c; -1 padded) — the vectorised :func:`prism_attn.reference.refine`."""
    scaling = check_decode_inputs(q, K, K, scaling)
    kappa = check_kappa(kappa)
    cand = check_idx(cand, K, "cand", distinct=True)
    return refine_attend(q, K, K, cand, kappa, scaling, attend=False)[1]


SCORE_SLICE = 1024  # candidates per KV head gathered and scored at a time (see candidate_scores)


def candidate_scores(q, K, cand: torch.Tensor, scaling: float, work: Workspace | None = None) -> torch.Tensor:
    """s (B, H_kv, g, c) = q_h · K[cand]·scaling per KV group; -1 candidates read row 0 (mask them).

    Long candidate lists are gathered and scored in slices of ``SCORE_SLICE`` per KV head: a slice of
    gathered keys (4 MiB for 8 KV heads at d = 128) is still in cache when the matmul reads it, whereas
    gathering all of them first (25 MB at 32K) makes the matmul read them back from memory — the matmul
    is a matrix-vector product, bound by that read. Same products, same values."""
    B, Hkv, _, D = K.shape
    c = cand.shape[-1]
    g = q.shape[1] // Hkv
    qg = q.reshape(B * Hkv, g, D)  # one (g, D) block of query heads per KV head
    step = min(c, SCORE_SLICE)
    buf = None if work is None else work.get("keys", B * Hkv * step * D, K)
    parts = []
    for start in range(0, c, step):
        part = cand[..., start : start + step]
        keys = gather_rows(K, part, buf).view(B * Hkv, part.shape[-1], D)
        parts.append(torch.bmm(qg, keys.transpose(1, 2)))  # into a fresh, contiguous slice
    s = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
    return s.view(B, Hkv, g, c).mul_(scaling)


def refine_attend(
    q, K, V, cand: torch.Tensor, kappa: int, scaling: float, *, attend=True, work: Workspace | None = None
):
    """Top-κ of the pooled probabilities over the candidates only; optionally attend over the selection,
    reusing the candidate scores. Returns (o or None, idx (B, H_kv, κ) ascending, -1 padded).
    ``work``: reusable gather buffers (results are identical with or without)."""
    valid = cand >= 0
    invalid = ~valid
    s = candidate_scores(q, K, cand, scaling, work)
    s.masked_fill_(invalid[:, :, None, :], _NEG)
    pooled = torch.softmax(s, dim=-1).sum(2).masked_fill_(invalid, -1.0)
    k = min(kappa, cand.shape[-1])
    pos = _topk_sorted(pooled, k)
    sel_valid = valid.gather(-1, pos)
    idx = torch.where(sel_valid, cand.gather(-1, pos), -1)
    out = None
    if attend:
        g = s.shape[2]
        s_sel = s.gather(-1, pos[:, :, None, :].expand(-1, -1, g, -1))  # invalid entries are already -inf
        out = _weighted_rows(V, idx, torch.softmax(s_sel, dim=-1)).view(q.shape)
    if k < kappa:
        idx = F.pad(idx, (0, kappa - k), value=-1)
    return out, idx


def _weighted_rows(V: torch.Tensor, idx: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Σ_j p[b, h, i, j] · V[b, h, idx[b, h, j]] → (B·H_kv·g, D) without materialising the gathered rows:
    one ``embedding_bag`` over the flattened cache, a bag per query head (-1 entries must have p = 0)."""
    B, Hkv, n, D = V.shape
    g, k = p.shape[2], p.shape[3]
    rows = (torch.arange(B * Hkv, device=V.device) * n).view(B, Hkv, 1) + idx.clamp(min=0)
    bags = rows[:, :, None, :].expand(B, Hkv, g, k).reshape(-1)
    offsets = torch.arange(0, bags.numel(), k, device=V.device)
    return F.embedding_bag(
        bags, V.reshape(B * Hkv * n, D), offsets, mode="sum", per_sample_weights=p.reshape(-1)
    )


def sparse_decode(q, K, V, idx: torch.Tensor, scaling: float | None = None) -> torch.Tensor:
    """o (B, H, D): attention over each KV group's selected tokens (-1 entries ignored)."""
    scaling = check_decode_inputs(q, K, V, scaling)
    idx = check_idx(idx, K, every_row=True)
    valid = idx >= 0
    Ks = gather_rows(K, idx)
    s = torch.matmul(_grouped(q, K.shape[1]), Ks.transpose(-1, -2)) * scaling
    p = torch.softmax(s.masked_fill(~valid[:, :, None, :], _NEG), dim=-1)
    return _weighted_rows(V, idx, p).view(q.shape)


def attention_loss(q, K, idx: torch.Tensor, scaling: float | None = None) -> torch.Tensor:
    """(B, H): 1 − the dense attention mass on each head's selected tokens (-1 entries ignored)."""
    scaling = check_decode_inputs(q, K, K, scaling)
    idx = check_idx(idx, K, distinct=True)
    p = torch.softmax(grouped_scores(q, K, scaling), dim=-1)
    g = p.shape[2]
    got = p.gather(-1, idx.clamp(min=0)[:, :, None, :].expand(-1, -1, g, -1))
    got = got.masked_fill(~(idx >= 0)[:, :, None, :], 0).sum(-1)
    return (1 - got).reshape(q.shape[:2])


def select_topk(q, K, kappa: int, scaling: float | None = None) -> torch.Tensor:
    """Exact top-κ per KV group (B, H_kv, κ), ascending; a cache with n ≤ κ selects every token."""
    scaling = check_decode_inputs(q, K, K, scaling)
    kappa = check_kappa(kappa)
    n = K.shape[2]
    if kappa >= n:
        return torch.arange(n, device=K.device).expand(K.shape[0], K.shape[1], n).clone()
    return anchor(q, K, K, kappa, scaling, attend=False)[1]


def _check_idx(idx, K, name: str = "idx", **kw) -> torch.Tensor:
    return check_idx(idx, K, name, **kw)
