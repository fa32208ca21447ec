"""The per-step decoder: walks the layers of one decode step and keeps the selection that the next layer
proposes from. One :class:`PrismDecoder` serves Prism and every baseline (``config.method``)."""

from __future__ import annotations

import torch

from papershelf.errors import InputError
from prism_attn import ops
from prism_attn.baselines import QuestCache, quest_select
from prism_attn.config import PrismConfig, check_decode_inputs


class PrismDecoder:
    """Sparse decode attention for a stack of layers, called layer by layer in order at every step.

    ``step(layer, q, K, V)`` returns (o (B, H, D), selection (B, H_kv, κ) or ``None`` for a dense layer).
    A non-anchor Prism layer proposes from the selection that layer − 1 made in the same step; if that is
    not available (layers called out of order, a different cache length) it acts as an anchor.
    ``backend``: ``"torch"`` or ``"triton"`` (sparse attention through the Triton kernel, CUDA or
    ``TRITON_INTERPRET=1``), ``"auto"``: Triton on CUDA tensors, torch otherwise.
    ``small_threads``: CPU threads for the small, latency-bound work of non-anchor layers (proposal,
    candidate gather and scoring, attention over κ tokens); ``None`` (the default) leaves torch's setting,
    the fastest on an idle machine (2 threads: 32K stack 381 ms against 594 ms with 1, same run). On a
    machine shared with other jobs, 1 avoids paying an OpenMP barrier per small op, which can cost a whole
    scheduler slice. The cache-streaming work (anchor and dense layers, the global term) keeps every thread.
    """

    def __init__(
        self, config: PrismConfig | None = None, *, backend: str = "auto", small_threads: int | None = None
    ) -> None:
        from papershelf.errors import check_choice, check_int

        if config is not None and not isinstance(config, PrismConfig):
            raise InputError(f"config must be a PrismConfig, got {type(config).__name__}")
        self.config = (config or PrismConfig()).validate()
        self.backend = check_choice("backend", backend, ("auto", "torch", "triton"))
        self.small_threads = (
            None if small_threads is None else check_int("small_threads", small_threads, low=1)
        )
        self._prev: tuple[int, int, torch.Tensor] | None = None  # (layer, n, selection)
        self._anchor: tuple[int, torch.Tensor] | None = None  # (n, selection)
        self._quest: dict[int, QuestCache] = {}  # Quest's page metadata (the baseline)
        self._bounds: dict[int, ops.PageBounds] = {}  # the global term's page bounds
        self._work = ops.Workspace()
        self.bytes_read = 0  # KV-cache bytes read by every step so far (keys scored + values attended)

    def reset(self) -> None:
        self._prev = self._anchor = None
        self._quest.clear()
        self._bounds.clear()

    def _uses_triton(self, q) -> bool:
        return self.backend == "triton" or (self.backend == "auto" and q.is_cuda)

    def _sparse(self, q, K, V, idx, scaling):
        if self._uses_triton(q):
            from prism_attn.kernels import sparse_decode_triton

            return sparse_decode_triton(q, K, V, idx, scaling)
        return ops.sparse_decode(q, K, V, idx, scaling)

    def step(self, layer: int, q, K, V, scaling: float | None = None):
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise InputError(f"layer must be an index >= 0, got {layer!r}")
        scaling = check_decode_inputs(q, K, V, scaling)
        cfg = self.config
        n = K.shape[2]
        kappa = cfg.budget(n)
        row = K.shape[0] * K.shape[1] * K.shape[3] * K.element_size()  # one token of one cache
        if cfg.method == "dense" or kappa >= n:
            self.bytes_read += 2 * n * row
            out = ops.dense_decode(q, K, V, scaling)
            every = torch.arange(n, device=K.device).expand(K.shape[0], K.shape[1], n)
            self._set(layer, n, every, anchor=True)
            return out, None
        if cfg.is_dense(layer):
            self.bytes_read += 2 * n * row
            out, idx = ops.dense_with_selection(q, K, V, kappa, scaling)
            self._set(layer, n, idx, anchor=True)
            return out, None
        m = cfg.method
        prev = self._prev[2] if self._prev and self._prev[:2] == (layer - 1, n) else None
        if m == "oracle" or (m in ("prism", "static") and (cfg.is_anchor(layer) or prev is None)):
            out, idx = ops.anchor(q, K, V, kappa, scaling)
            self.bytes_read += (n + kappa) * row
            self._set(layer, n, idx, anchor=True)
            return out, idx
        # the global term streams page bounds of the whole cache: it keeps every thread, like an anchor
        extra = self._global_term(layer, q, K, n, kappa, row, scaling) if m == "prism" else None
        threads = torch.get_num_threads()
        small = self.small_threads is not None and not q.is_cuda and self.small_threads < threads
        if small:
            torch.set_num_threads(self.small_threads)
        try:
            out, idx = self._sparse_layer(m, layer, prev, q, K, V, n, kappa, row, scaling, extra)
        finally:
            if small:
                torch.set_num_threads(threads)
        self._set(layer, n, idx, anchor=False)
        return out, idx

    def _global_term(self, layer, q, K, n, kappa, row, scaling):
        """Top pages by the Quest bound over incrementally kept page bounds, as block ids (or ``None``)."""
        cfg = self.config
        G = cfg.global_count(kappa)
        if not G:
            return None
        block = cfg.block_for(kappa)
        bounds = self._bounds.get(layer)
        if bounds is None or bounds.page != block * cfg.global_span:  # a budget that changed the block
            bounds = self._bounds[layer] = ops.PageBounds(
                block * cfg.global_span, cfg.global_meta_dtype(K.dtype)
            )
        meta = bounds.update(K)
        self.bytes_read += meta.shape[2] * meta.shape[3] * meta.element_size() * K.shape[0] * K.shape[1]
        return ops.global_blocks(
            q, meta, G, n, block=block, sink=cfg.sink, local=cfg.local, scaling=scaling,
            span=cfg.global_span,
        )  # fmt: skip

    def _sparse_layer(self, m, layer, prev, q, K, V, n, kappa, row, scaling, extra):
        cfg = self.config
        if m == "static":
            idx = self._anchor[1] if self._anchor and self._anchor[0] == n else prev
            out = self._sparse(q, K, V, idx, scaling)
            self.bytes_read += 2 * idx.shape[-1] * row
        elif m == "quest":
            meta = self._quest.setdefault(layer, QuestCache(cfg.page)).update(K)
            idx = quest_select(q, K, kappa, cfg.page, scaling, meta=meta)
            out = self._sparse(q, K, V, idx, scaling)
            self.bytes_read += (2 * meta[0].shape[2] + 2 * idx.shape[-1]) * row
        else:
            block = cfg.block_for(kappa)
            cand = ops._propose(
                prev, n, cfg.radius, block, cfg.sink, cfg.local, cfg.candidate_cap(kappa), extra
            )
            if self._uses_triton(q):  # select, then attend through the Triton kernel
                idx = ops.refine_attend(q, K, V, cand, kappa, scaling, attend=False, work=self._work)[1]
                out = self._sparse(q, K, V, idx, scaling)
            else:  # the torch twin reuses the candidates' scores for the attention itself
                out, idx = ops.refine_attend(q, K, V, cand, kappa, scaling, work=self._work)
            self.bytes_read += (cand.shape[-1] + kappa) * row
        return out, idx

    def _set(self, layer, n, idx, *, anchor: bool) -> None:
        self._prev = (layer, n, idx)
        if anchor:
            self._anchor = (n, idx)


def decode_step(qs, Ks, Vs, config: PrismConfig | None = None, scaling: float | None = None, backend="auto"):
    """One decode step through a stack: per-layer lists of q (B, H, D), K, V (B, H_kv, n, D).

    Returns (outputs, selections) like :func:`prism_attn.reference.decode_step`."""
    if not (len(qs) == len(Ks) == len(Vs)):
        raise InputError(f"qs, Ks and Vs must list the same layers, got {len(qs)}, {len(Ks)}, {len(Vs)}")
    dec = PrismDecoder(config, backend=backend)
    outs, sels = [], []
    for layer, (q, K, V) in enumerate(zip(qs, Ks, Vs, strict=True)):
        o, idx = dec.step(layer, q, K, V, scaling)
        outs.append(o)
        sels.append(idx)
    return outs, sels
