"""The configuration of a sparse decode method and the validation of its inputs."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from papershelf.errors import InputError, check_choice, check_int, check_number

METHODS = ("prism", "oracle", "static", "quest", "dense")
_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclass
class PrismConfig:
    """How each decode step selects the KV tokens it attends to.

    ``method``: ``"prism"`` (proposal + refinement), ``"oracle"`` (exact top-κ in every layer),
    ``"static"`` (exact top-κ in anchor layers, reused unchanged until the next anchor — Kascade-style),
    ``"quest"`` (top pages by the page min/max upper bound of q·k) or ``"dense"``.

    ``kappa``: the budget κ in tokens per KV head; an ``int`` is absolute, a ``float`` in (0, 1] is a fraction
    of the cache length n (κ = max(kappa_min, ⌈kappa·n⌉)). A cache with n ≤ κ is attended densely.
    ``radius``: the proposal's dilation of the previous layer's selection, in blocks of ``block`` tokens.
    ``min_blocks``: a small budget still spans this many blocks — for κ < min_blocks·block the proposal and
    the global term use blocks of the largest power of two ≤ κ/min_blocks tokens (at least 1) instead of
    ``block`` (:meth:`block_for`); ``0`` keeps ``block`` at every κ. With the defaults (64 blocks of 16) it
    applies below κ = 1024, i.e. on caches shorter than ~10K tokens at κ = 0.1·n: there the global term's
    pages shrink with the blocks, so its page bounds cost up to 2/block of the key cache (single-token
    pages, κ < 128, make it an exact scan of the keys in the bounds' dtype). Caches that short are cheap to
    scan; what it buys is retrieval at small budgets (README, "Quality on tiny-m").
    ``sink`` / ``local``: tokens at the start / end of the cache that are always candidates.
    ``max_candidates``: the candidate cap as a multiple of κ (``None``: no cap).
    ``anchor_layers``: layers that compute exact top-κ (``None``: every ``anchor_every``-th layer from 0).
    ``dense_layers``: layers attended densely (their exact top-κ still seeds the next layer).
    ``page``: Quest's page size in tokens.
    ``global_pages``: the proposal's coarse *global* term (not in the paper's abstract; see the README's
    Fidelity): besides the blocks around the previous layer's selection, a refined layer also proposes the
    ⌈global_pages·κ / (global_span·block)⌉ pages of ``global_span`` blocks (outside the sink/local blocks)
    with the largest Quest-style upper bound of q·k (per-page channel min/max of K, GQA-pooled), so it can
    reach regions the previous layer did not select. ``0`` turns it off (the proposal is then built from
    the previous selection only). ``global_min_pages``: the global term proposes at least this many pages,
    so a small budget still searches enough places (with the defaults it binds only for κ < 16, where
    blocks are single tokens; the speed benchmarks' κ = 2048 proposes 128). ``global_span``: blocks per
    page of the global term (its metadata costs 2/(global_span·block) of the key cache per layer).
    ``global_dtype``: the precision those page bounds are stored and scored in — ``"auto"`` (bfloat16 for
    a float32 cache, which halves the bytes the global term reads; the cache's own dtype otherwise, so
    float64 stays exact), ``"same"`` (the cache's dtype) or a dtype name. The bounds are rounded outward,
    and refinement scores the proposed tokens exactly.
    """

    method: str = "prism"
    kappa: int | float = 0.1
    kappa_min: int = 128
    radius: int = 1
    block: int = 16
    min_blocks: int = 64
    sink: int = 4
    local: int = 64
    max_candidates: float | None = 2.0
    anchor_layers: tuple[int, ...] | None = None
    anchor_every: int = 16
    dense_layers: tuple[int, ...] = field(default_factory=lambda: (0,))
    page: int = 16
    global_pages: float = 1.0
    global_min_pages: int = 16
    global_span: int = 1
    global_dtype: str = "auto"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> PrismConfig:
        check_choice("method", self.method, METHODS)
        if isinstance(self.kappa, numbers.Integral) and not isinstance(self.kappa, bool | int):
            self.kappa = int(self.kappa)  # a numpy integer
        if isinstance(self.kappa, bool) or not isinstance(self.kappa, int | float):
            raise InputError(f"kappa must be a positive int or a fraction in (0, 1], got {self.kappa!r}")
        if isinstance(self.kappa, float):
            check_number("kappa", self.kappa, low=0, high=1, low_open=True)
        elif self.kappa <= 0:
            raise InputError(f"kappa must be a positive int or a fraction in (0, 1], got {self.kappa}")
        check_int("kappa_min", self.kappa_min, low=1)
        check_int("radius", self.radius, low=0)
        check_int("block", self.block, low=1)
        check_int("min_blocks", self.min_blocks, low=0)
        check_int("sink", self.sink, low=0)
        check_int("local", self.local, low=0)
        check_int("anchor_every", self.anchor_every, low=1)
        check_int("page", self.page, low=1)
        check_number("global_pages", self.global_pages, low=0)
        check_int("global_min_pages", self.global_min_pages, low=0)
        check_int("global_span", self.global_span, low=1)
        check_choice("global_dtype", self.global_dtype, ("auto", "same", *_DTYPES))
        if self.max_candidates is not None:
            check_number("max_candidates", self.max_candidates, low=1)
        for name in ("anchor_layers", "dense_layers"):
            layers = getattr(self, name)
            if layers is None:
                continue
            if isinstance(layers, int | str) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers
            ):
                raise InputError(f"{name} must be a sequence of layer indices >= 0, got {layers!r}")
            setattr(self, name, tuple(sorted(set(layers))))
        if self.method in ("prism", "static") and self.anchor_layers is not None:
            if 0 not in set(self.anchor_layers) | set(self.dense_layers):
                raise InputError(
                    f"anchor_layers must include layer 0 (or dense_layers must), got {self.anchor_layers}"
                )
        return self

    def budget(self, n: int) -> int:
        """κ for a cache of ``n`` tokens (never more than n)."""
        if isinstance(self.kappa, float):
            k = max(self.kappa_min, math.ceil(self.kappa * n))
        else:
            k = self.kappa
        return min(n, k)

    def is_anchor(self, layer: int) -> bool:
        if self.anchor_layers is None:
            return layer % self.anchor_every == 0
        return layer in self.anchor_layers

    def is_dense(self, layer: int) -> bool:
        return self.method == "dense" or layer in self.dense_layers

    def block_for(self, kappa: int) -> int:
        """The proposal's block size for budget κ: ``block``, or smaller so κ spans ``min_blocks`` blocks."""
        if not self.min_blocks or kappa >= self.min_blocks * self.block:
            return self.block
        b = max(1, kappa // self.min_blocks)
        return min(self.block, 1 << (b.bit_length() - 1))

    def global_count(self, kappa: int) -> int:
        """How many pages (of ``global_span`` blocks) the global term proposes for budget κ: κ·global_pages
        tokens' worth, at least ``global_min_pages`` (0 when ``global_pages`` is 0: no global term)."""
        if not self.global_pages:
            return 0
        pages = math.ceil(self.global_pages * kappa / (self.global_span * self.block_for(kappa)))
        return max(pages, self.global_min_pages)

    def global_meta_dtype(self, cache_dtype):
        """The torch dtype of the global term's page bounds for a cache of ``cache_dtype``."""
        import torch

        if self.global_dtype == "same" or (self.global_dtype == "auto" and cache_dtype != torch.float32):
            return cache_dtype
        return torch.bfloat16 if self.global_dtype == "auto" else getattr(torch, self.global_dtype)

    def candidate_cap(self, kappa: int) -> int | None:
        return None if self.max_candidates is None else math.ceil(self.max_candidates * kappa)


def check_decode_inputs(q, K, V, scaling=None) -> float:
    """Check one decode step's ``q`` (B, H, D), ``K``/``V`` (B, H_kv, n, D); return the scaling."""
    import torch

    for name, t, dim in (("q", q, 3), ("K", K, 4), ("V", V, 4)):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if str(t.dtype).removeprefix("torch.") not in _DTYPES:
            raise InputError(f"{name} has unsupported dtype {t.dtype}; expected one of {', '.join(_DTYPES)}")
        if t.dim() != dim:
            shape = "(B, H, D)" if dim == 3 else "(B, H_kv, n, D)"
            raise InputError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    if not (q.dtype == K.dtype == V.dtype):
        raise InputError(f"q, K and V must share a dtype, got {q.dtype}, {K.dtype}, {V.dtype}")
    if K.shape != V.shape:
        raise InputError(f"K and V must have the same shape, got {tuple(K.shape)} and {tuple(V.shape)}")
    B, H, D = q.shape
    if B == 0 or H == 0 or D == 0:
        raise InputError(f"q must have a non-empty batch, head count and head dim, got {tuple(q.shape)}")
    # q is tiny: checked on the CPU (on an accelerator the check would cost a host sync per layer). The
    # cache is not scanned: that would read all of K and V every step, the cost sparse decoding avoids.
    if q.device.type == "cpu" and not bool(torch.isfinite(q).all()):
        raise InputError("q contains NaN or inf")
    if K.shape[0] != B:
        raise InputError(f"K has batch {K.shape[0]} but q has batch {B}")
    if K.shape[3] != D:
        raise InputError(f"mismatched head dims: q has D = {D}, K has D = {K.shape[3]}")
    if K.shape[2] == 0:
        raise InputError("K is an empty cache (n = 0); decode needs at least one cached token")
    if K.shape[1] == 0 or H % K.shape[1]:
        raise InputError(f"query heads H = {H} must be a multiple of KV heads H_kv = {K.shape[1]}")
    if scaling is None:
        return 1.0 / math.sqrt(D)
    return check_number("scaling", scaling, low=0, low_open=True)


def check_kappa(kappa) -> int:
    if hasattr(kappa, "item") and not isinstance(kappa, int):  # a numpy / torch scalar
        try:
            kappa = kappa.item()
        except (ValueError, RuntimeError):  # more than one element
            pass
    if isinstance(kappa, bool) or not isinstance(kappa, int):
        got = repr(kappa) if isinstance(kappa, float | str | bool | None) else f"a {type(kappa).__name__}"
        raise InputError(f"kappa must be a positive integer, got {got}")
    if kappa <= 0:
        raise InputError(f"kappa must be a positive integer, got {kappa}")
    return kappa


def check_idx(idx, K, name: str = "idx", *, every_row: bool = False, distinct: bool = False):
    """Check a selection / candidate list ``idx`` (B, H_kv, k) of token positions in [0, n) or -1 (padding)
    against the cache ``K`` (B, H_kv, n, D); return it as int64.

    ``every_row``: each (batch, KV head) row must hold at least one token (attention over an empty set has
    no value: a softmax over nothing would be NaN). ``distinct``: no token twice in one row."""
    import torch

    if not isinstance(idx, torch.Tensor) or idx.dtype not in (torch.int64, torch.int32):
        raise InputError(f"{name} must be an integer torch.Tensor of token positions (B, H_kv, k)")
    if idx.dim() != 3 or tuple(idx.shape[:2]) != tuple(K.shape[:2]):
        raise InputError(
            f"{name} must have shape (B, H_kv, k) = ({K.shape[0]}, {K.shape[1]}, k), got {tuple(idx.shape)}"
        )
    if idx.shape[2] == 0:
        raise InputError(f"{name} selects no token (k = 0)")
    if int(idx.max()) >= K.shape[2] or int(idx.min()) < -1:
        raise InputError(f"{name} entries must be in [0, n = {K.shape[2]}) or -1 for padding")
    if every_row and not bool((idx >= 0).any(-1).all()):
        b, j = (~(idx >= 0).any(-1)).nonzero()[0].tolist()
        raise InputError(f"{name} row (batch {b}, KV head {j}) selects no token (all -1)")
    if distinct:
        s = idx.sort(-1).values
        if bool(((s[..., 1:] == s[..., :-1]) & (s[..., 1:] >= 0)).any()):  # a token counted twice
            raise InputError(f"{name} repeats a token in one row; a selection is a set of positions")
    return idx.long()
