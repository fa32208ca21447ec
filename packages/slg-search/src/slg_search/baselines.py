"""The anchors run beside SLG on the same environment and budget: best-of-N (what users run), the
full-information oracle (simulations only), reward-pruned beam search, and two ablations of SLG that
select by the sample mean or the sample maximum instead of the predicted tail."""

from __future__ import annotations

from typing import Any

import numpy as np

from papershelf.errors import InputError, check_int
from slg_search.search import (
    Budget,
    NodeStats,
    SearchResult,
    _children,
    _one_layer,
    auto_m,
    best_of_n,
    make_rng,
    oracle_search,
)

__all__ = ["beam_search", "best_of_n", "max_guided_search", "mean_guided_search", "oracle_search"]


def mean_guided_search(
    env: Any, root: Any, budget: int, *, width: int = 8, m: int | None = None, seed: Any = None
) -> SearchResult:
    """SLG's exploration, but commit to the state with the highest *mean* reward (ablation)."""
    return _one_layer(env, root, budget, width, m, 0.2, "gaussian", "quantile", seed, select="mean")


def max_guided_search(
    env: Any, root: Any, budget: int, *, width: int = 8, m: int | None = None, seed: Any = None
) -> SearchResult:
    """SLG's exploration, but commit to the state with the highest *observed* reward (ablation)."""
    return _one_layer(env, root, budget, width, m, 0.2, "gaussian", "quantile", seed, select="max")


def beam_search(
    env: Any, root: Any, budget: int, *, beam: int = 4, m: int | None = None, seed: Any = None
) -> SearchResult:
    """Beam search with reward-model pruning.

    Level by level: sample ``m`` responses from every state in the beam; score each child state (first
    step of a response) by the best reward among the responses through it; keep the ``beam`` best as
    the next level. When a level cannot be afforded in full, or no state has children, the remaining
    budget is split evenly over the current beam.
    """
    budget = check_int("budget", budget, low=1)
    beam = check_int("beam", beam, low=1)
    m = auto_m(budget, beam) if m is None else check_int("m", m, low=1)
    if budget < m:
        raise InputError(f"budget {budget} is smaller than one level of beam search (m = {m})")
    b = Budget(env, budget, make_rng(seed))
    level = [root]
    depth = 0
    nodes: list[NodeStats] = []
    while b.remaining >= len(level) * m:
        scored: dict[Any, float] = {}
        for state in level:
            responses, rewards = b.rollout(state, m)
            nodes.append(NodeStats(state, m, float(np.max(rewards)), depth))
            for child in _children(env, state, responses, rewards, width=len(responses)):
                scored.setdefault(child, -np.inf)
            for resp, rew in zip(responses, rewards):
                child = env.first_step(state, resp)
                if child is not None and rew > scored[child]:
                    scored[child] = float(rew)
        if not scored:
            break
        level = sorted(scored, key=lambda s: -scored[s])[:beam]
        depth += 1
    share, extra = divmod(b.remaining, len(level))
    for i, state in enumerate(level):
        k = share + (1 if i < extra else 0)
        if k:
            b.rollout(state, k)
            nodes.append(NodeStats(state, k, float("nan"), depth))
    return b.result("beam", chosen=level[0], nodes=nodes)
