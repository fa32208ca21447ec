"""The slow, plain-torch reference of one decode step: selection, proposal, refinement, sparse attention.

Everything loops over batch rows and KV groups and works on any float dtype (float64 for exactness).
Shapes: ``q`` (B, H, D) — one decode query per head; ``K``, ``V`` (B, H_kv, n, D) — the cache after RoPE;
query head h reads KV head h // (H / H_kv). A selection is a LongTensor (B, H_kv, κ) of token positions,
ascending, padded with -1 when fewer than κ tokens were eligible.

Equations (s_h = q_h K^T · scaling, the logits of head h):
  pooled score over a token set S of KV group j: P_j(i) = Σ_{h ∈ j} softmax_S(s_h)_i   (i ∈ S)
  anchor selection:  I_j = top-κ of P_j over all n tokens
  proposal:          C_j = blocks holding a token of the previous layer's I_j, dilated by r blocks,
                     plus the sink and local-window blocks (capped, see :func:`propose`),
                     plus the G global blocks of :func:`global_blocks` (on top of the cap)
  refinement:        I_j = top-κ of P_j over the tokens of C_j only
  sparse attention:  o_h = softmax_{I_j}(s_h) V[I_j]
  attention loss:    1 − Σ_{i ∈ I_j} softmax(s_h)_i
"""

from __future__ import annotations

import math

import torch

from papershelf.errors import InputError, check_int
from prism_attn.config import PrismConfig, check_decode_inputs, check_idx, check_kappa


def logits(q: torch.Tensor, K: torch.Tensor, scaling: float | None = None) -> torch.Tensor:
    """s (B, H, n): every head's scaled scores against its KV head."""
    scaling = check_decode_inputs(q, K, K, scaling)
    g = q.shape[1] // K.shape[1]
    Kr = K.repeat_interleave(g, dim=1)
    return torch.einsum("bhd,bhnd->bhn", q, Kr) * scaling


def _top(scores: torch.Tensor, tokens: list[int], kappa: int) -> list[int]:
    order = torch.argsort(scores, descending=True, stable=True)[:kappa]
    return sorted(tokens[i] for i in order.tolist())


def _pad(rows: list[list[list[int]]], kappa: int, device) -> torch.Tensor:
    out = torch.full((len(rows), len(rows[0]), kappa), -1, dtype=torch.long, device=device)
    for b, row in enumerate(rows):
        for j, sel in enumerate(row):
            out[b, j, : len(sel)] = torch.tensor(sel, dtype=torch.long)
    return out


def refine(q, K, candidates: torch.Tensor, kappa: int, scaling: float | None = None) -> torch.Tensor:
    """Top-κ of the GQA-pooled score P_j, computed over each group's candidate tokens only."""
    scaling = check_decode_inputs(q, K, K, scaling)
    kappa = check_kappa(kappa)
    check_idx(candidates, K, "cand", distinct=True)
    s = logits(q, K, scaling)
    B, H, _ = q.shape
    Hkv = K.shape[1]
    g = H // Hkv
    rows = []
    for b in range(B):
        row = []
        for j in range(Hkv):
            cand = [int(c) for c in candidates[b, j].tolist() if c >= 0]
            pooled = sum(torch.softmax(s[b, h, cand], dim=-1) for h in range(j * g, (j + 1) * g))
            row.append(_top(pooled, cand, kappa))
        rows.append(row)
    return _pad(rows, kappa, q.device)


def select_topk(q, K, kappa: int, scaling: float | None = None) -> torch.Tensor:
    """Exact (oracle / anchor) top-κ per KV group over all n tokens."""
    n = K.shape[2] if K.dim() == 4 else 0
    B, Hkv = (K.shape[0], K.shape[1]) if K.dim() == 4 else (0, 0)
    every = torch.arange(n, device=K.device).expand(B, Hkv, n)
    return refine(q, K, every, kappa, scaling)


def propose(
    prev: torch.Tensor,
    n: int,
    *,
    radius: int = 1,
    block: int = 16,
    sink: int = 4,
    local: int = 64,
    cap: int | None = None,
    extra: torch.Tensor | None = None,
) -> torch.Tensor:
    """Candidate tokens (B, H_kv, c) for the next layer, ascending, padded with -1.

    Blocks of ``block`` tokens: every block holding a token of ``prev`` is dilated by ``radius`` blocks on
    each side; the blocks over the first ``sink`` and the last ``local`` tokens are always added. When the
    proposed blocks exceed ``cap`` tokens (sink and local blocks come on top of the cap), blocks are kept by
    priority by the *region* they belong to: a run of consecutive blocks holding selected tokens is a region
    of mass m (its selected-token count); its blocks rank 2m + 1, a dilation-only block 2·(the largest m of
    a region within ``radius`` blocks) — so the margins of heavy regions come before isolated selected
    tokens — and earlier blocks first on ties. ``extra`` (B, H_kv, G; block ids, -1 padded): blocks added
    like the sink and local blocks, on top of the cap (the global term, :func:`global_blocks`).
    """
    n = check_int("n", n, low=1)
    radius, block = check_int("radius", radius, low=0), check_int("block", block, low=1)
    sink, local = check_int("sink", sink, low=0), check_int("local", local, low=0)
    if cap is not None:
        cap = check_int("cap", cap, low=1)
    if not isinstance(prev, torch.Tensor) or prev.dim() != 3 or prev.dtype not in (torch.int64, torch.int32):
        raise InputError("prev must be an integer tensor (B, H_kv, k) of token positions")
    nb = math.ceil(n / block)
    always = _forced_blocks(n, block, sink, local)
    rows = []
    for b in range(prev.shape[0]):
        row = []
        for j in range(prev.shape[1]):
            forced = set(always)
            if extra is not None:
                forced |= {int(c) for c in extra[b, j].tolist() if c >= 0}
            counts: dict[int, int] = {}
            for t in prev[b, j].tolist():
                if t >= 0:
                    counts[t // block] = counts.get(t // block, 0) + 1
            dilated = {c + d for c in counts for d in range(-radius, radius + 1) if 0 <= c + d < nb}
            blocks = dilated | forced

            region: dict[int, int] = {}  # block -> selected tokens in its run of consecutive selected blocks
            for c in sorted(counts):
                if c - 1 in region:
                    continue
                run = [c]
                while run[-1] + 1 in counts:
                    run.append(run[-1] + 1)
                mass = sum(counts[x] for x in run)
                region.update({x: mass for x in run})

            def tier(c: int, region=region, forced=forced) -> int:
                if c in forced:
                    return 2 * n + 2
                if c in region:
                    return 2 * region[c] + 1
                return 2 * max(region.get(c + d, 0) for d in range(-radius, radius + 1))

            chosen = sorted(blocks, key=lambda c: (-tier(c), c))
            if cap is not None:
                chosen = chosen[: len(forced) + max(1, cap // block)]
            row.append([t for c in sorted(chosen) for t in range(c * block, min(n, (c + 1) * block))])
        rows.append(row)
    width = max(len(sel) for row in rows for sel in row)
    return _pad(rows, width, prev.device)


def _forced_blocks(n: int, block: int, sink: int, local: int) -> set[int]:
    nb = math.ceil(n / block)
    return set(range(math.ceil(sink / block))) | set(range(max(0, n - local) // block, nb) if local else ())


def _page_bounds(q, K, page: int, scaling: float) -> list[list[torch.Tensor]]:
    """Per batch row and query head, Quest's upper bound Σ_d max(q_d·min_d, q_d·max_d)·scaling of q·k over
    each page of ``page`` tokens (channel-wise min/max of K over the page)."""
    B, H, _ = q.shape
    Hkv, n = K.shape[1], K.shape[2]
    g = H // Hkv
    npages = math.ceil(n / page)
    out = []
    for b in range(B):
        row = []
        for h in range(H):
            j = h // g
            lo = torch.stack([K[b, j, p * page : (p + 1) * page].amin(0) for p in range(npages)])
            hi = torch.stack([K[b, j, p * page : (p + 1) * page].amax(0) for p in range(npages)])
            row.append(torch.maximum(lo * q[b, h], hi * q[b, h]).sum(-1) * scaling)
        out.append(row)
    return out


def global_blocks(
    q, K, count: int, *, block=16, sink=4, local=64, scaling: float | None = None, span: int = 1
) -> torch.Tensor:
    """The proposal's global term: per KV group, the ``count`` pages of ``span`` blocks that hold no sink or
    local block with the largest GQA-pooled Quest bound P_j(p) = Σ_{h∈j} softmax_p(bound_h)_p (softmax
    over all pages); their block ids (B, H_kv, count'·span) ascending, -1 past the last block, where
    count' = min(count, eligible pages)."""
    scaling = check_decode_inputs(q, K, K, scaling)
    B, H, _ = q.shape
    Hkv, n = K.shape[1], K.shape[2]
    g = H // Hkv
    nb = math.ceil(n / block)
    span = min(span, nb)  # a page of more blocks than the cache holds is the whole cache
    npages = math.ceil(nb / span)
    forced = _forced_blocks(n, block, sink, local)
    free = [p for p in range(npages) if not any(p * span + i in forced for i in range(span))]
    count = min(count, len(free))
    if count == 0:
        return torch.empty(B, Hkv, 0, dtype=torch.long)
    bounds = _page_bounds(q, K, span * block, scaling)
    rows = []
    for b in range(B):
        row = []
        for j in range(Hkv):
            pooled = sum(torch.softmax(bounds[b][h], dim=-1) for h in range(j * g, (j + 1) * g))
            pages = _top(pooled[free], free, count)
            row.append([p * span + i if p * span + i < nb else -1 for p in pages for i in range(span)])
        rows.append(row)
    return _pad(rows, count * span, q.device)


def sparse_attention(q, K, V, idx: torch.Tensor, scaling: float | None = None) -> torch.Tensor:
    """o (B, H, D): each head's softmax attention over its group's selected tokens (-1 entries ignored)."""
    scaling = check_decode_inputs(q, K, V, scaling)
    check_idx(idx, K, every_row=True)
    B, H, _D = q.shape
    g = H // K.shape[1]
    out = torch.empty_like(q)
    for b in range(B):
        for h in range(H):
            sel = [int(t) for t in idx[b, h // g].tolist() if t >= 0]
            s = (K[b, h // g, sel] @ q[b, h]) * scaling
            out[b, h] = torch.softmax(s, dim=-1) @ V[b, h // g, sel]
    return out


def dense_attention(q, K, V, scaling: float | None = None) -> torch.Tensor:
    """o (B, H, D): exact softmax attention over the whole cache."""
    scaling = check_decode_inputs(q, K, V, scaling)
    p = torch.softmax(logits(q, K, scaling), dim=-1)
    g = q.shape[1] // K.shape[1]
    return torch.einsum("bhn,bhnd->bhd", p, V.repeat_interleave(g, dim=1))


def attention_loss(q, K, idx: torch.Tensor, scaling: float | None = None) -> torch.Tensor:
    """(B, H): the dense attention mass that falls outside each head's selected tokens."""
    check_idx(idx, K, distinct=True)
    p = torch.softmax(logits(q, K, scaling), dim=-1)
    g = q.shape[1] // K.shape[1]
    loss = torch.empty(p.shape[:2], dtype=p.dtype)
    for b in range(p.shape[0]):
        for h in range(p.shape[1]):
            sel = sorted({int(t) for t in idx[b, h // g].tolist() if t >= 0})  # a set of positions
            loss[b, h] = 1 - p[b, h, sel].sum()
    return loss


def quest_select(q, K, kappa: int, page: int = 16, scaling: float | None = None) -> torch.Tensor:
    """Quest: per page, the upper bound Σ_d max(q_d·min_d, q_d·max_d) of q·k; the top ⌊κ/page⌋ pages of the
    GQA-pooled softmax of the bounds; their tokens."""
    scaling = check_decode_inputs(q, K, K, scaling)
    kappa = check_kappa(kappa)
    page = min(check_int("page", page, low=1), K.shape[2])  # a page longer than the cache: the whole cache
    B, H, _ = q.shape
    Hkv, n = K.shape[1], K.shape[2]
    g = H // Hkv
    npages = math.ceil(n / page)
    keep = max(1, min(npages, kappa // page))
    bounds = _page_bounds(q, K, page, scaling)
    rows = []
    for b in range(B):
        row = []
        for j in range(Hkv):
            pooled = sum(torch.softmax(bounds[b][h], dim=-1) for h in range(j * g, (j + 1) * g))
            pages = _top(pooled, list(range(npages)), keep)
            row.append([t for p in pages for t in range(p * page, min(n, (p + 1) * page))])
        rows.append(row)
    return _pad(rows, keep * page, q.device)


def decode_step(qs, Ks, Vs, config: PrismConfig, scaling: float | None = None):
    """One decode step through a stack of layers: lists of per-layer q, K, V.

    Returns (outputs, selections): per layer, o (B, H, D) and the selection (B, H_kv, κ) it attended to
    (``None`` for a dense layer).
    """
    if not isinstance(config, PrismConfig):
        raise InputError(f"config must be a PrismConfig, got {type(config).__name__}")
    config.validate()
    if not (len(qs) == len(Ks) == len(Vs)):
        raise InputError(f"qs, Ks and Vs must list the same layers, got {len(qs)}, {len(Ks)}, {len(Vs)}")
    outs, sels = [], []
    prev = anchor = None
    for layer, (q, K, V) in enumerate(zip(qs, Ks, Vs)):
        n = K.shape[2]
        kappa = config.budget(n)
        if config.is_dense(layer) or kappa >= n:
            outs.append(dense_attention(q, K, V, scaling))
            sels.append(None)
            prev = anchor = select_topk(q, K, kappa, scaling) if config.method != "dense" else None
            continue
        m = config.method
        if m == "oracle" or (m in ("prism", "static") and (config.is_anchor(layer) or prev is None)):
            idx = anchor = select_topk(q, K, kappa, scaling)
        elif m == "static":
            idx = anchor
        elif m == "quest":
            idx = quest_select(q, K, kappa, config.page, scaling)
        else:
            G = config.global_count(kappa)
            extra = None
            if G:
                extra = global_blocks(
                    q, K, G, block=config.block_for(kappa), sink=config.sink, local=config.local,
                    scaling=scaling,
                    span=config.global_span,
                )  # fmt: skip
            cand = propose(
                prev,
                n,
                radius=config.radius,
                block=config.block_for(kappa),
                sink=config.sink,
                local=config.local,
                cap=config.candidate_cap(kappa),
                extra=extra,
            )
            idx = refine(q, K, cand, kappa, scaling)
        outs.append(sparse_attention(q, K, V, idx, scaling))
        sels.append(idx)
        prev = idx
    return outs, sels
