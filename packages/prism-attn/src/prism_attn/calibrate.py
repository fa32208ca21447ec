"""Anchor layers chosen on a development text instead of a fixed schedule.

A refined layer can only keep what its proposal contains: the previous layer's selection dilated by
``radius`` blocks, the sink and local blocks (and the global term). Where a layer attends to places the
layer before it does not — a retrieval head deep in the stack — the proposal misses them, and an exact
anchor there is what helps. :func:`calibrate_anchors` measures, for every layer l ≥ 1, the **proposal
coverage**: the share of layer l's GQA-pooled attention mass that lies inside the proposal built from
layer l−1's *exact* top-κ, over the last ``queries`` positions of development texts (they stand in for
decode steps), and makes the ``anchors − 1`` layers with the lowest coverage exact anchors besides layer 0.
Kascade also picks its anchors on a development set (by a dynamic program over top-k overlaps); this is
a simpler, greedy reading of the same idea, this package's addition.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from papershelf.errors import InputError, check_int
from prism_attn import ops
from prism_attn.config import PrismConfig
from prism_attn.hf import check_model

_names = itertools.count()
QUERIES = 32  # the last positions of a text that stand in for decode steps


@dataclass
class Calibration:
    """``anchor_layers`` for :class:`PrismConfig`; ``coverage[l]``: mean proposal coverage of layer l over
    the texts (``None`` for layer 0, which has no previous layer); ``kappa`` per text; ``queries``."""

    anchor_layers: tuple[int, ...]
    coverage: list[float | None]
    kappa: list[int]
    queries: int


def pooled_probabilities(query, key, scaling: float, queries: int) -> torch.Tensor:
    """(m, H_kv, n): the causal softmax of the last m = ``queries`` query positions of one sequence
    (query (1, H, T, D), key (1, H_kv, n, D), the queries the last T of the n positions), summed over
    each GQA group — the pooling the anchor's top-κ uses. Computed in float64."""
    _, H, T, D = query.shape
    Hkv, n = key.shape[1], key.shape[2]
    m = min(queries, T)
    q = query[0, :, T - m :].double().reshape(Hkv, H // Hkv * m, D)
    s = (q @ key[0].double().transpose(1, 2)).view(Hkv, H // Hkv, m, n) * scaling
    pos = n - m + torch.arange(m)
    s = s.masked_fill(torch.arange(n)[None, None, None, :] > pos[None, None, :, None], float("-inf"))
    return torch.softmax(s, -1).sum(1).transpose(0, 1).contiguous()


def proposal_coverage(p_prev: torch.Tensor, p: torch.Tensor, kappa: int, config: PrismConfig) -> float:
    """Mean share of ``p``'s mass (m, H_kv, n) inside the proposal that ``config`` builds from the exact
    top-κ of ``p_prev`` (same shape; each row is one query position, as a batch of m decode steps)."""
    n = p.shape[-1]
    kappa = min(kappa, n)
    prev = p_prev.topk(kappa, -1).indices.sort(-1).values
    block = config.block_for(kappa)
    cand = ops.propose(prev, n, radius=config.radius, block=block, sink=config.sink, local=config.local,
                       cap=config.candidate_cap(kappa))  # fmt: skip
    inside = p.gather(-1, cand.clamp(min=0)) * (cand >= 0)
    return float(inside.sum() / p.sum())


class CoverageMeter:
    """Proposal coverage accumulated layer by layer as a forward pass runs: :meth:`observe` each layer's
    query and key in order (layer 0 first) for every text, then :meth:`result`. Used by
    :func:`calibrate_anchors` and by ``enable(..., calibrate_anchors=N)``, which calibrates on the prompt
    during its dense prefill."""

    def __init__(self, config: PrismConfig, layers: int, queries: int = QUERIES) -> None:
        self.config, self.layers, self.queries = config, layers, queries
        self.totals = [0.0] * layers
        self.kappas: list[int] = []
        self._prev: tuple[int, torch.Tensor, int] | None = None  # (layer, pooled p, κ) of the last layer seen

    def observe(self, layer: int, query: torch.Tensor, key: torch.Tensor, scaling: float) -> None:
        """One layer's (1, H, T, D) query and (1, H_kv, n, D) key; a layer 0 starts a new text."""
        n = key.shape[2]
        if layer == 0:
            self.kappas.append(self.config.budget(n))
        p = pooled_probabilities(query, key, scaling, self.queries)
        prev = self._prev
        if layer > 0 and prev is not None and prev[0] == layer - 1 and prev[1].shape == p.shape:
            self.totals[layer] += proposal_coverage(prev[1], p, prev[2], self.config)
        self._prev = (layer, p, self.config.budget(n))

    def result(self, anchors: int) -> Calibration:
        """Layer 0 and the ``anchors − 1`` layers of lowest mean coverage over the texts observed."""
        texts = max(1, len(self.kappas))
        coverage = [None] + [t / texts for t in self.totals[1:]]
        worst = sorted(range(1, self.layers), key=lambda layer: coverage[layer])[: anchors - 1]
        return Calibration(tuple(sorted({0, *worst})), coverage, list(self.kappas), self.queries)


def calibrate_anchors(model, texts, config: PrismConfig | None = None, *, anchors: int = 2,
                      queries: int = QUERIES) -> Calibration:  # fmt: skip
    """Pick ``anchors`` exact layers (layer 0 and the ``anchors − 1`` layers of lowest proposal coverage)
    for ``model`` (a transformers model) from ``texts``: token ids (1, n), or a list of them. ``config``
    gives κ (its budget at each text's length), radius, block, sink, local and the candidate cap."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    config = config or PrismConfig()
    texts = [texts] if isinstance(texts, torch.Tensor) else list(texts)
    layers = int(check_model(model).num_hidden_layers)
    anchors = check_int("anchors", anchors, low=1, high=layers)
    queries = check_int("queries", queries, low=1)
    if not texts:
        raise InputError("texts is empty: give token ids (1, n) or a list of them")
    for i, ids in enumerate(texts):
        if (
            not isinstance(ids, torch.Tensor)
            or ids.dim() != 2
            or ids.shape[0] != 1
            or ids.dtype.is_floating_point
        ):
            raise InputError(f"texts[{i}] must be integer token ids of shape (1, n)")
        if ids.shape[1] <= queries:
            raise InputError(f"texts[{i}] has {ids.shape[1]} tokens; it needs more than queries = {queries}")
    meter = CoverageMeter(config, layers, queries)

    def recording(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        out = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                     scaling=scaling, **kwargs)  # fmt: skip
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        meter.observe(module.layer_idx, query, key, scale)
        return out

    name = f"prism_attn_calibrate_{next(_names)}"
    previous = model.config._attn_implementation
    AttentionInterface.register(name, recording)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model.set_attn_implementation(name)
    try:
        with torch.no_grad():
            for ids in texts:
                model(input_ids=ids, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
    return meter.result(anchors)
