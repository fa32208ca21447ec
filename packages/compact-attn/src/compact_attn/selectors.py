"""Block-mask selectors for a query chunk against the accumulated KV cache.

Interface: a selector is any callable ``selector(q, k, *, offset, block, key_means=None)`` returning a
bool mask (H, Qb, Kb): q (H, T, D) is the chunk (absolute positions offset … offset+T-1), k (H_kv, N, D)
the cache in token order (N = offset + T), Qb = ⌈T/B⌉ chunk-relative Q-blocks, Kb = ⌈N/B⌉ KV blocks.
:class:`FixedMask` wraps a user's mask; :class:`BlockSelector` subclasses only define ``scores`` (a
non-negative block-probability estimate per (head, Q-block, KV-block) row) and inherit the mask policy:

* ``threshold=τ`` (XAttention): each row keeps the fewest highest-scoring blocks whose estimated mass
  reaches τ of the row's total;
* ``budget=β`` (a fraction of the past KV blocks — those before the chunk — or an int count): per KV
  group g, the chunk's own blocks plus the ⌈β·past⌉ past blocks with the largest
  max_{h∈G(g), b} P[h, b, j]; each row keeps the blocks of that set that reach the group's threshold
  θ_g — so the *union* over the rows is exactly the budget set and every table holds own + ⌈β·past⌉
  blocks (this is what "KV budget" means in the benchmarks; QUOKA gets ⌈β·past⌉ past tokens).
  ``rule="max"`` (default) ranks a past block by its largest block probability over the group's rows;
  ``rule="mass"`` by the smallest fraction of a row's estimated mass that comes before it when the row's
  own blocks are counted first and its past blocks in descending order (:func:`mass_before`) — the
  cumulative-mass threshold rule with τ set so that the union holds the budget. ``sink=s`` always keeps
  the first s blocks (inside the budget). ``alloc="head"`` (default) gives every KV head the same
  ⌈β·past⌉ past blocks; ``alloc="pooled"`` ranks the past blocks of all KV heads together and keeps the
  kv_heads·⌈β·past⌉ best, so the total KV read is the same but a head whose estimated mass is spread
  gets more blocks than one whose mass is concentrated.

Two training-free estimators from the paper notes: :class:`AntidiagonalSelector` (XAttention-style
strided antidiagonal sums) and :class:`MeanPoolSelector` (mean-pooled query block · mean-pooled key block,
softmax); and two of this package's: :class:`BoundSelector` (a Quest-style per-query upper bound from
each block's elementwise key minima and maxima, pooled over the Q-block by max) and
:class:`TailQuerySelector` (the exact attention of each Q-block's last queries, pooled by max; the
default of :class:`compact_attn.CompactAttention`).
"""

from __future__ import annotations

import math

import torch

from compact_attn.tables import check_group, own_blocks
from papershelf.errors import InputError, check_number


def resolve_budget(budget, past_blocks: int) -> int:
    """Past KV blocks kept per table (on top of the chunk's own blocks): ⌈β·past⌉ for a fraction
    β ∈ (0, 1], β itself for an int count, at most ``past_blocks``."""
    if isinstance(budget, bool) or not isinstance(budget, int | float):
        raise InputError(f"budget must be a fraction in (0, 1] or a positive block count, got {budget!r}")
    if isinstance(budget, float):
        if not 0 < budget <= 1:
            raise InputError(f"budget as a fraction must lie in (0, 1], got {budget}")
        keep = math.ceil(budget * past_blocks)
    else:
        if budget < 1:
            raise InputError(f"budget as a block count must be >= 1, got {budget}")
        keep = budget
    return min(past_blocks, keep)


def check_selector_inputs(q, k, offset: int, block: int) -> tuple[int, int, int]:
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor):
        raise InputError("q and k must be tensors, (heads, T, D) and (kv_heads, N, D)")
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise InputError(f"offset must be an integer (the chunk's first absolute position), got {offset!r}")
    if q.dim() != 3 or k.dim() != 3 or q.shape[-1] != k.shape[-1]:
        raise InputError("q must be (heads, T, D) and k (kv_heads, N, D) with the same D")
    check_group(q.shape[0], k.shape[0])
    if not isinstance(block, int) or block < 1:
        raise InputError(f"block must be a positive integer, got {block!r}")
    T, N = q.shape[1], k.shape[1]
    if T < 1:
        raise InputError("the query chunk is empty")
    if offset < 0 or N != offset + T:
        raise InputError(f"k must hold offset + T = {offset + T} tokens (the cache incl. the chunk), got {N}")
    return T, math.ceil(T / block), math.ceil(N / block)


def block_causal(T: int, offset: int, block: int, kv_blocks: int) -> torch.Tensor:
    """Bool (Qb, Kb): KV block j holds a key visible to some query of chunk-relative Q-block b."""
    qb = math.ceil(T / block)
    last = offset + torch.minimum(torch.arange(1, qb + 1) * block, torch.tensor(T)) - 1
    return (torch.arange(kv_blocks)[None, :] * block) <= last[:, None]


RULES = ("max", "mass")
ALLOCS = ("head", "pooled")


class BlockSelector:
    """Base class: subclasses implement :meth:`scores`; the mask policy (threshold or budget) is here."""

    def __init__(self, *, budget=0.25, threshold: float | None = None, rule: str = "max",
                 sink: int = 0, alloc: str = "head") -> None:  # fmt: skip
        if rule not in RULES:
            raise InputError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
        if alloc not in ALLOCS:
            raise InputError(f"alloc must be one of {', '.join(ALLOCS)}, got {alloc!r}")
        self.alloc = alloc
        if isinstance(sink, bool) or not isinstance(sink, int) or sink < 0:
            raise InputError(f"sink must be a non-negative integer (leading blocks kept), got {sink!r}")
        self.rule = rule
        self.sink = sink
        if threshold is not None:
            check_number("threshold", threshold, low=0, high=1, low_open=True)
            budget = None
        elif budget is None:
            raise InputError("give a budget or a threshold")
        self.budget = budget
        self.threshold = threshold

    def scores(self, q, k, *, offset: int, block: int, key_means=None) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, q, k, *, offset: int, block: int, key_means=None, key_bounds=None) -> torch.Tensor:
        T, _Qb, _Kb = check_selector_inputs(q, k, offset, block)
        extra = {} if key_bounds is None else {"key_bounds": key_bounds}  # only the bound selector takes it
        P = self.scores(q, k, offset=offset, block=block, key_means=key_means, **extra)
        if P.device.type == "cpu" and not bool(torch.isfinite(P).all()):  # (H, Qb, Kb): cheap
            raise InputError("q or k contains NaN or inf (the block scores are not finite)")
        return self.mask_from_scores(P, k.shape[0], offset=offset, T=T, block=block)

    def mask_from_scores(self, P, kv_heads: int, *, offset: int, T: int, block: int) -> torch.Tensor:
        H, Qb, Kb = P.shape
        G = H // kv_heads
        if self.threshold is not None:
            vals, order = P.sort(-1, descending=True)
            csum = vals.cumsum(-1)
            total = csum[..., -1:]
            # keep entry i iff the mass before it has not yet reached τ·total
            keep_sorted = (csum - vals) < self.threshold * total
            mask = torch.zeros_like(keep_sorted)
            mask.scatter_(-1, order, keep_sorted)
            return mask & (P > 0)
        own = own_blocks(offset, T, block)
        keep = len(own) + resolve_budget(self.budget, own.start)
        # per-row priority of every block (larger = kept first); own blocks first, then the sink blocks
        prio = P if self.rule == "max" else -mass_before(P, own)
        prio = prio.clone()
        prio[..., own.start : own.stop] = float("inf")
        prio[..., : min(self.sink, own.start)] = float("inf")
        best = prio.reshape(kv_heads, G * Qb, Kb).amax(1)
        chosen = torch.zeros(kv_heads, Kb, dtype=torch.bool)
        if self.alloc == "head":  # every KV head gets the same number of blocks
            top = best.topk(keep, dim=-1)
            chosen.scatter_(1, top.indices, True)
            theta = top.values[:, -1:]  # the group's threshold
        else:  # "pooled": the kv_heads·keep blocks with the largest priority over all groups together
            top = best.flatten().topk(kv_heads * keep)
            chosen.view(-1)[top.indices] = True
            theta = best.masked_fill(~chosen, float("inf")).amin(-1, keepdim=True)
        mask = (prio.reshape(kv_heads, G, Qb, Kb) >= theta[:, None, None, :]) & chosen[:, None, None, :]
        return mask.reshape(H, Qb, Kb)


def mass_before(P: torch.Tensor, own: range) -> torch.Tensor:
    """XAttention's cumulative-mass rule with the chunk's own blocks counted first: for each row of P
    (H, Qb, Kb), the fraction of the row's estimated mass held by its own blocks plus the past blocks it
    ranks strictly above block j. A row at threshold τ keeps exactly the past blocks with value < τ, so
    ranking blocks by the group minimum of this value and keeping the first k is the threshold rule with
    τ set so that the union holds k past blocks. Own blocks get 0."""
    total = P.sum(-1, keepdim=True).clamp_min(torch.finfo(P.dtype).tiny)
    own_mass = P[..., own.start : own.stop].sum(-1, keepdim=True)
    past = P[..., : own.start]
    vals, order = past.sort(-1, descending=True)
    before = own_mass + vals.cumsum(-1) - vals
    out = torch.zeros_like(P)
    out[..., : own.start] = torch.empty_like(past).scatter_(-1, order, before)
    return out / total


class MeanPoolSelector(BlockSelector):
    """P[h, b, j] = softmax_j(mean(q of Q-block b) · mean(k of KV block j) · scaling) over the KV blocks
    visible to Q-block b. ``key_means`` (H_kv, Kb, D), e.g. :meth:`PagedKVCache.block_means`, saves the
    pass over the keys."""

    name = "meanpool"

    def scores(self, q, k, *, offset: int, block: int, key_means=None) -> torch.Tensor:
        T, Qb, Kb = check_selector_inputs(q, k, offset, block)
        H, _, D = q.shape
        Hkv = k.shape[0]
        G = H // Hkv
        qp = torch.nn.functional.pad(q, (0, 0, 0, Qb * block - T)).view(H, Qb, block, D).sum(2)
        counts = torch.full((Qb,), float(block), dtype=q.dtype)
        counts[-1] = T - (Qb - 1) * block
        qm = qp / counts[None, :, None]
        if key_means is None:
            N = k.shape[1]
            kp = torch.nn.functional.pad(k, (0, 0, 0, Kb * block - N)).view(Hkv, Kb, block, D).sum(2)
            kc = torch.full((Kb,), float(block), dtype=k.dtype)
            kc[-1] = N - (Kb - 1) * block
            key_means = kp / kc[None, :, None]
        elif key_means.shape != (Hkv, Kb, D):
            raise InputError(f"key_means must be {(Hkv, Kb, D)}, got {tuple(key_means.shape)}")
        s = (qm.reshape(Hkv, G * Qb, D) @ key_means.to(q.dtype).transpose(1, 2)) / math.sqrt(D)
        s = s.view(H, Qb, Kb).masked_fill(~block_causal(T, offset, block, Kb)[None], float("-inf"))
        return torch.softmax(s, -1)


class AntidiagonalSelector(BlockSelector):
    """XAttention-style estimate: with stride S, the strided query row r = concat_j q[rS + S-1-j] and
    key column c = concat_j k[cS + j] score Σ_j q[rS+S-1-j]·k[cS+j] (an antidiagonal of the S×S tile);
    softmax over the visible columns (scaling 1/(√D·S)), then summed over each B×B block and averaged
    over the rows of the Q-block. Needs block % stride == 0."""

    name = "antidiagonal"

    def __init__(self, *, stride: int = 8, budget=0.25, threshold: float | None = None, rule: str = "max",
                 sink: int = 0, pool: str = "mean", alloc: str = "head") -> None:  # fmt: skip
        super().__init__(budget=budget, threshold=threshold, rule=rule, sink=sink, alloc=alloc)
        if pool not in ("mean", "max"):
            raise InputError(f"pool must be 'mean' or 'max', got {pool!r}")
        self.pool = pool
        if not isinstance(stride, int) or stride < 1:
            raise InputError(f"stride must be a positive integer, got {stride!r}")
        self.stride = stride

    def scores(self, q, k, *, offset: int, block: int, key_means=None) -> torch.Tensor:
        T, Qb, Kb = check_selector_inputs(q, k, offset, block)
        S = self.stride
        if block % S:
            raise InputError(f"block ({block}) must be a multiple of the antidiagonal stride ({S})")
        H, _, D = q.shape
        Hkv, N, _ = k.shape
        G = H // Hkv
        R, C = math.ceil(T / S), math.ceil(N / S)
        qs = torch.nn.functional.pad(q, (0, 0, 0, R * S - T)).view(H, R, S, D).flip(2).reshape(H, R, S * D)
        ks = torch.nn.functional.pad(k, (0, 0, 0, C * S - N)).reshape(Hkv, C, S * D)
        s = (qs.reshape(Hkv, G * R, S * D) @ ks.transpose(1, 2)).view(H, R, C)
        s.mul_(1.0 / (math.sqrt(D) * S))
        last_q = offset + torch.minimum((torch.arange(R) + 1) * S, torch.tensor(T)) - 1
        visible = (torch.arange(C)[None, :] * S) <= last_q[:, None]
        s.masked_fill_(~visible[None], float("-inf"))
        p = torch.softmax(s, -1)
        per = block // S
        p = torch.nn.functional.pad(p, (0, Kb * per - C)).view(H, R, Kb, per).sum(-1)  # (H, R, Kb)
        p = torch.nn.functional.pad(p, (0, 0, 0, Qb * per - R)).view(H, Qb, per, Kb)
        if self.pool == "max":  # every strided row is a distribution: keep their max, renormalised
            p = p.amax(2)
            return p / p.sum(-1, keepdim=True)
        rows = torch.full((Qb,), float(per), dtype=p.dtype)
        rows[-1] = R - (Qb - 1) * per
        return p.sum(2) / rows[None, :, None]


class BoundSelector(BlockSelector):
    """Quest-style estimate per query (this package's addition, not in the paper): with the elementwise
    minimum and maximum key of every KV block, U[h, t, j] = Σ_d max(q_d·kmax_jd, q_d·kmin_jd) bounds
    q·k from above for every key of block j; P[h, t, ·] = softmax_j(U / √D) over the blocks visible to
    query t, then pooled over the Q-block by ``pool`` ("max", default: the largest of its queries,
    renormalised; or "mean"). A single query–key pair that dominates a query's attention (an answer token
    copying a needle) lifts its block's bound for that query, where strided and mean-pooled estimates
    average it away. Cost: two (G·T × D) @ (D × Kb) matmuls per KV head, 2/B of the dense QKᵀ.
    ``key_bounds`` ((H_kv, Kb, D) minima, maxima), e.g. :meth:`PagedKVCache.block_bounds`, saves the
    pass over the keys."""

    name = "bound"

    def __init__(self, *, budget=0.25, threshold: float | None = None, rule: str = "max", sink: int = 0,
                 pool: str = "max", alloc: str = "head") -> None:  # fmt: skip
        super().__init__(budget=budget, threshold=threshold, rule=rule, sink=sink, alloc=alloc)
        if pool not in ("mean", "max"):
            raise InputError(f"pool must be 'mean' or 'max', got {pool!r}")
        self.pool = pool

    def scores(self, q, k, *, offset: int, block: int, key_means=None, key_bounds=None) -> torch.Tensor:
        T, Qb, Kb = check_selector_inputs(q, k, offset, block)
        H, _, D = q.shape
        Hkv = k.shape[0]
        if key_bounds is None:
            key_bounds = block_bounds(k, block)
        kmin, kmax = key_bounds
        if kmin.shape != (Hkv, Kb, D) or kmax.shape != (Hkv, Kb, D):
            raise InputError(f"key_bounds must be two tensors of shape {(Hkv, Kb, D)}")
        u = score_bounds(q, kmin, kmax).mul_(1.0 / math.sqrt(D))
        visible = (torch.arange(Kb)[None, :] * block) <= (offset + torch.arange(T))[:, None]
        p = torch.softmax(u.masked_fill_(~visible[None], float("-inf")), -1)
        p = torch.nn.functional.pad(p, (0, 0, 0, Qb * block - T)).view(H, Qb, block, Kb)
        if self.pool == "max":
            p = p.amax(2)
            return p / p.sum(-1, keepdim=True)
        rows = torch.full((Qb,), float(block), dtype=p.dtype)
        rows[-1] = T - (Qb - 1) * block
        return p.sum(2) / rows[None, :, None]


class TailQuerySelector(BlockSelector):
    """Exact attention of a few queries per Q-block (this package's addition, not in the paper): for each
    Q-block, its last ``queries`` queries score every visible key exactly, softmax per query, summed over
    each KV block; P[h, b, ·] is the largest of those per-query block distributions, renormalised. The
    last queries of a block are the ones nearest to the tokens that follow (SnapKV's observation window,
    applied per Q-block), and in the chunk that ends a prompt they are the question itself, whose few
    needle tokens a strided or pooled estimate averages away. Cost: ``queries``/B of the dense QKᵀ plus one
    pass of exp over those rows; one KV group at a time, so the score buffer is G·Qb·queries × N."""

    name = "tail"

    def __init__(self, *, queries: int = 8, budget=0.25, threshold: float | None = None, rule: str = "max",
                 sink: int = 0, alloc: str = "head") -> None:  # fmt: skip
        super().__init__(budget=budget, threshold=threshold, rule=rule, sink=sink, alloc=alloc)
        if isinstance(queries, bool) or not isinstance(queries, int) or queries < 1:
            raise InputError(f"queries must be a positive integer (scored per Q-block), got {queries!r}")
        self.queries = queries

    def scores(self, q, k, *, offset: int, block: int, key_means=None) -> torch.Tensor:
        T, Qb, Kb = check_selector_inputs(q, k, offset, block)
        if self.queries > block:
            raise InputError(f"queries ({self.queries}) must be at most the block size ({block})")
        H, _, D = q.shape
        Hkv, N, _ = k.shape
        G, W = H // Hkv, self.queries
        rows = tail_rows(T, block, W)  # (Qb·W,) chunk-relative, Q-block by Q-block
        # a scored query at chunk position t sees keys up to offset + t: only chunk keys can be in its future
        future = torch.arange(T)[None, :] > rows[:, None]  # (Qb·W, T)
        full = N // block
        out = torch.empty(H, Qb * W, Kb, dtype=q.dtype)
        # one score buffer for all groups: a fresh 30 MB tensor per group costs its page faults each time
        buf = torch.empty(G * rows.numel(), N, dtype=q.dtype)
        for g in range(Hkv):
            qg = q[g * G : (g + 1) * G, rows].reshape(G * rows.numel(), D) * (1.0 / math.sqrt(D))
            s = torch.mm(qg, k[g].T.to(q.dtype), out=buf).view(G, rows.numel(), N)
            s[..., offset:].masked_fill_(future[None], float("-inf"))
            s.sub_(s.amax(-1, keepdim=True)).exp_()  # unnormalised per-query probabilities
            mass = out[g * G : (g + 1) * G]
            mass[..., :full] = s[..., : full * block].view(G, rows.numel(), full, block).sum(-1)
            if full < Kb:
                mass[..., full] = s[..., full * block :].sum(-1)
        out /= out.sum(-1, keepdim=True)
        p = out.view(H, Qb, W, Kb).amax(2)
        return p / p.sum(-1, keepdim=True)


def tail_rows(T: int, block: int, queries: int) -> torch.Tensor:
    """Chunk-relative positions of the last ``queries`` queries of every Q-block (a Q-block shorter than
    that repeats its first query, which changes nothing under a max)."""
    Qb = math.ceil(T / block)
    starts = torch.arange(Qb) * block
    ends = torch.minimum(starts + block, torch.tensor(T))
    rows = ends[:, None] - 1 - torch.arange(queries)[None, :]
    return torch.maximum(rows, starts[:, None]).flatten()


def score_bounds(q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor) -> torch.Tensor:
    """U (H, T, Kb) with U[h, t, j] = Σ_d max(q_d·kmax_jd, q_d·kmin_jd) ≥ q_t·k for every key k of block j,
    for q (H, T, D) and the GQA group's block bounds kmin, kmax (H_kv, Kb, D)."""
    H, T, D = q.shape
    Hkv, Kb, _ = kmax.shape
    qg = q.reshape(Hkv, H // Hkv * T, D)
    # max(q_d·hi, q_d·lo) = max(q_d, 0)·hi + min(q_d, 0)·lo, since hi ≥ lo
    hi, lo = kmax.to(q.dtype).transpose(1, 2), kmin.to(q.dtype).transpose(1, 2)
    return (qg.clamp_min(0) @ hi + qg.clamp_max(0) @ lo).view(H, T, Kb)


def block_bounds(k: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Elementwise (minimum, maximum) key of every block of ``block`` tokens: two (H_kv, Kb, D) tensors."""
    Hkv, N, D = k.shape
    Kb = math.ceil(N / block)
    pad = Kb * block - N
    lo = torch.nn.functional.pad(k, (0, 0, 0, pad), value=float("inf")).view(Hkv, Kb, block, D).amin(2)
    hi = torch.nn.functional.pad(k, (0, 0, 0, pad), value=float("-inf")).view(Hkv, Kb, block, D).amax(2)
    return lo, hi


class FixedMask:
    """Plug a precomputed mask (bool (H, Qb, Kb)) or a function ``f(q, k, offset, block) -> mask`` into
    the selector interface."""

    name = "fixed"

    def __init__(self, mask_or_fn) -> None:
        self.mask_or_fn = mask_or_fn

    def __call__(self, q, k, *, offset: int, block: int, key_means=None) -> torch.Tensor:
        _T, Qb, Kb = check_selector_inputs(q, k, offset, block)
        m = self.mask_or_fn(q, k, offset, block) if callable(self.mask_or_fn) else self.mask_or_fn
        return check_mask(m, q.shape[0], Qb, Kb)


def check_mask(m, heads: int, q_blocks: int, kv_blocks: int) -> torch.Tensor:
    """``m`` as a bool tensor of shape (heads, q_blocks, kv_blocks), or an InputError saying what it is."""
    want = (heads, q_blocks, kv_blocks)
    expected = f"a selector must return a bool mask of shape {want}"
    try:
        m = torch.as_tensor(m)
    except (TypeError, ValueError, RuntimeError):
        raise InputError(f"{expected}, got {type(m).__name__}") from None
    if m.dtype != torch.bool or tuple(m.shape) != want:
        raise InputError(f"{expected}, got {m.dtype} {tuple(m.shape)}")
    return m


SELECTORS = {
    "antidiagonal": AntidiagonalSelector,
    "meanpool": MeanPoolSelector,
    "bound": BoundSelector,
    "tail": TailQuerySelector,
}


def make_selector(name: str, **kw) -> BlockSelector:
    if name not in SELECTORS:
        raise InputError(f"selector must be one of {', '.join(SELECTORS)}, got {name!r}")
    try:
        return SELECTORS[name](**kw)
    except TypeError as exc:  # an option the selector does not take (meanpool has no stride or pool)
        raise InputError(f"selector {name!r}: {exc}") from None
