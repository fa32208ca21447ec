"""Item selection at a fixed budget, and the rank stability it yields on held-out items.

``method="lambda6_star"`` is greedy forward selection maximising λ★6 of the selected subset (the
paper's selection criterion; λ★6 itself is our reconstruction, see :mod:`rank_reliability.classical`).
It starts from the item with the highest item–rest correlation and then adds, one at a time, the item
whose inclusion gives the largest λ★6 of the subset — every item's rest score is recomputed within the
subset. The fast path keeps the covariances of the selected items with all candidates, so one step
scores every candidate in O(|S| · I) without re-reading the data; the reference
(:func:`rank_reliability.reference.greedy_lambda6_star`) recomputes λ★6 from scratch per candidate.

``"item_rest"`` is the cheap one-shot variant (top-B items by Sⱼⱼ r²ⱼ,rest on the full set). The
anchors — ``"random"`` and ``"irt_info"`` — live in :mod:`rank_reliability.baselines`.
"""

from __future__ import annotations

import numpy as np

from papershelf.errors import InputError, check_choice, check_int

from .classical import item_residuals
from .matrix import check_matrix

METHODS = ("lambda6_star", "item_rest", "random", "irt_info")


def first_item(arr: np.ndarray) -> int:
    """The starting item of greedy λ★6: the largest item–rest correlation on all candidates."""
    Xc = arr - arr.mean(axis=0)
    s2 = np.einsum("mi,mi->i", Xc, Xc)
    Tc = Xc.sum(axis=1)
    cov_rest = Tc @ Xc - s2
    var_rest = float(Tc @ Tc) - 2 * (Tc @ Xc) + s2
    r = np.divide(cov_rest, np.sqrt(s2 * var_rest), out=np.full_like(s2, -np.inf), where=var_rest > 0)
    return int(np.argmax(r))


def greedy_lambda6_star(arr: np.ndarray, budget: int) -> np.ndarray:
    """Greedy forward λ★6 selection on a validated complete matrix; item indices in selection order."""
    n_models, n_items = arr.shape
    Xc = arr - arr.mean(axis=0)
    s2 = np.einsum("mi,mi->i", Xc, Xc) / (n_models - 1)
    selected = [first_item(arr)]
    G = np.empty((budget, n_items))  # G[t] = cov(item selected[t], every item)
    G[0] = Xc[:, selected[0]] @ Xc / (n_models - 1)
    g = G[0].copy()  # cov(every item, total of the selected items)
    var_t = float(s2[selected[0]])
    taken = np.zeros(n_items, dtype=bool)
    taken[selected[0]] = True
    for t in range(1, budget):
        sel = np.asarray(selected)
        Gs = G[:t]
        s2_sel = s2[sel][:, None]
        cov_new_total = g[sel][:, None] + Gs  # cov(selected j, total + candidate k): (t, items)
        var_new = var_t + 2 * g + s2  # variance of the new total, per candidate
        c = cov_new_total - s2_sel  # cov(j, its rest score in S ∪ {k})
        v = var_new[None, :] - 2 * cov_new_total + s2_sel  # var(rest score of j)
        explained = np.divide(c * c, v, out=np.zeros_like(c), where=v > 1e-12 * var_new[None, :])
        e2_sel = np.maximum(s2_sel - explained, 0.0).sum(axis=0)
        e2_new = np.maximum(s2 - g * g / var_t, 0.0)  # candidate's rest score is the old total
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = 1.0 - (e2_sel + e2_new) / var_new
        lam[taken | ~np.isfinite(lam)] = -np.inf
        k = int(np.argmax(lam))
        selected.append(k)
        taken[k] = True
        G[t] = Xc[:, k] @ Xc / (n_models - 1)
        var_t = float(var_new[k])
        g += G[t]
    return np.asarray(selected)


def top_item_rest(arr: np.ndarray, budget: int) -> np.ndarray:
    """The ``budget`` items with the largest explained variance Sⱼⱼ r²ⱼ,rest, best first."""
    s2 = arr.var(axis=0, ddof=1)
    e2, _ = item_residuals(arr, "rest")
    return np.argsort(-(s2 - e2), kind="stable")[:budget]


def select_items(
    X: object,
    budget: int,
    *,
    method: str = "lambda6_star",
    seed: int = 0,
    drop_constant: bool = False,
) -> np.ndarray:
    """Choose ``budget`` items (column indices into ``X``, in selection order) by ``method``.

    Methods: ``"lambda6_star"`` (greedy λ★6), ``"item_rest"`` (top item–rest contributions),
    ``"random"`` (uniform without replacement, seeded), ``"irt_info"`` (2PL Fisher information summed over
    the models' fitted abilities; 0/1 matrices only). Needs a complete matrix.

    >>> import numpy as np
    >>> from rank_reliability.data import simulate_2pl
    >>> X = simulate_2pl(40, 200, seed=0, drop_constant=True).X
    >>> sel = select_items(X, 20, method="lambda6_star")
    >>> sel.shape, len(set(sel.tolist()))
    ((20,), 20)
    """
    check_choice("method", method, METHODS)
    arr, keep = check_matrix(X, allow_missing=False, drop_constant=drop_constant)
    n_items = arr.shape[1]
    budget = check_int("budget", budget, low=1)
    if budget > n_items:
        raise InputError(f"budget {budget} is larger than the number of items ({n_items})")
    if method == "lambda6_star":
        if budget == 1:
            picked = np.array([first_item(arr)])
        else:
            picked = greedy_lambda6_star(arr, budget)
    elif method == "item_rest":
        picked = top_item_rest(arr, budget)
    else:
        from .baselines import irt_information_selection, random_selection

        if method == "random":
            picked = random_selection(n_items, budget, seed=seed)
        else:
            picked = irt_information_selection(arr, budget)
    return keep[picked]


def selection_stability(
    X: object,
    budget: int,
    *,
    methods: tuple[str, ...] = ("lambda6_star", "random", "irt_info"),
    n_draws: int = 100,
    seed: int = 0,
    heldout_models: bool = False,
    parallel: bool = False,
    drop_constant: bool = False,
) -> dict[str, np.ndarray]:
    """Rank stability on held-out items of the subsets each method selects, over ``n_draws`` draws.

    Each draw splits the items at random into a selection pool (⌊I/2⌋ items) and a held-out half.
    Every method picks ``budget`` items from the pool (items constant inside the pool are not
    candidates, for any method); the models ranked by their mean on the subset are compared with the
    models ranked by their mean on the held-out half (Kendall τ-b). With ``heldout_models`` the models
    are split at random too: selection sees one half of the models, τ is measured on the other half.
    With ``parallel`` the comparison ranking is not the held-out half's mean but the same method's own
    ``budget``-item selection from the held-out half (parallel-form stability of the procedure).
    Random subsets are drawn from the draw's own generator. Returns ``{method: τ per draw}``.
    """
    for m in methods:
        check_choice("methods", m, METHODS)
    arr, _ = check_matrix(X, allow_missing=False, drop_constant=drop_constant, min_models=6)
    n_draws = check_int("n_draws", n_draws, low=1)
    n_models, n_items = arr.shape
    pool_size = n_items // 2
    budget = check_int("budget", budget, low=2)
    if parallel and heldout_models:
        raise InputError("choose one of parallel and heldout_models")
    if budget > pool_size:
        raise InputError(f"budget {budget} is larger than the selection pool ({pool_size} = half the items)")
    out = {m: np.empty(n_draws) for m in methods}
    from .concordance import kendall_tau

    for d in range(n_draws):
        rng = np.random.default_rng([seed, d])
        perm = rng.permutation(n_items)
        pool, held = perm[:pool_size], perm[pool_size:]
        if heldout_models:
            mperm = rng.permutation(n_models)
            sel_models, eval_models = mperm[: n_models // 2], mperm[n_models // 2 :]
        else:
            sel_models = eval_models = np.arange(n_models)
        held_scores = arr[np.ix_(eval_models, held)].mean(axis=1)
        for m in methods:
            sub_scores = _subset_scores(arr, m, pool, sel_models, eval_models, budget, rng, d)
            if parallel:
                other = _subset_scores(arr, m, held, sel_models, eval_models, budget, rng, d)
                out[m][d] = float(kendall_tau(sub_scores, other))
            else:
                out[m][d] = float(kendall_tau(sub_scores, held_scores))
    return out


def _subset_scores(
    arr: np.ndarray,
    method: str,
    pool: np.ndarray,
    sel_models: np.ndarray,
    eval_models: np.ndarray,
    budget: int,
    rng: np.random.Generator,
    draw: int,
) -> np.ndarray:
    """Mean score of the evaluation models on the ``budget`` items ``method`` picks from ``pool``."""
    from .baselines import irt_information_selection, random_selection

    P = arr[np.ix_(sel_models, pool)]
    varying = np.flatnonzero(P.min(axis=0) < P.max(axis=0))
    if varying.size < budget:
        raise InputError(f"draw {draw}: only {varying.size} pool items vary across models; budget {budget}")
    P = P[:, varying]
    candidates = pool[varying]
    if method == "lambda6_star":
        picked = greedy_lambda6_star(P, budget)
    elif method == "item_rest":
        picked = top_item_rest(P, budget)
    elif method == "random":
        picked = random_selection(candidates.size, budget, seed=rng)
    else:
        picked = irt_information_selection(P, budget)
    return arr[np.ix_(eval_models, candidates[picked])].mean(axis=1)
