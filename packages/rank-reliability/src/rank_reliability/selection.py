"""Item selection at a fixed budget, and the rank stability it yields on held-out items.

All λ★6 rules below are reconstructions (the paper's full text, and so its selection procedure, could
not be found); λ★6 itself is defined in :mod:`rank_reliability.classical`.

``method="lambda6_star_pool"`` (the default) — greedy forward selection maximising the λ★6 lower bound
of the *short form's* reliability with respect to the whole benchmark. λ★6 bounds an item's error
variance by its regression on the rest score, eⱼ² = Sⱼⱼ(1 − r²ⱼ,rest), i.e. it bounds the item's
reliability below by r²ⱼ,rest. Applied to the selected subset S as one part of the item pool P, the
same bound reads ρ_S ≥ r²(T_S, T_P∖S): if the subset total and the total of the items left out measure
the same model scores with uncorrelated errors, corr(T_S, T_P∖S)² = ρ_S ρ_P∖S ≤ ρ_S. Each step adds the
item that maximises corr(T_S, T_P∖S); the first step is exactly the largest item–rest correlation.
Because the "rest" is the remainder of the benchmark, not of the subset, the subset is pulled toward
the full benchmark's estimand (its mean score) instead of toward whatever its own items share.

``"lambda6_star"`` — greedy forward selection maximising λ★6 of the selected subset itself (its
internal consistency; rest scores recomputed within the subset), started from the item with the
highest item–rest correlation. On data whose model × item interaction is structured by difficulty (a
model population spanning weak to strong) it concentrates the subset in one difficulty band and ranks
the models worse than random subsets (see the README). The fast path keeps the covariances of the
selected items with all candidates, so one step scores every candidate in O(|S| · I); the reference
(:func:`rank_reliability.reference.greedy_lambda6_star`) recomputes λ★6 from scratch per candidate.

``"lambda6_star_strat"`` — the same greedy with difficulty stratification: the items are cut into
``N_STRATA`` equal-count strata of mean score and each stratum receives a quota proportional to its size
(largest remainders), as in stratified α; the greedy only considers strata whose quota is not used up.

``"item_rest"`` is the cheap one-shot variant (top-B items by Sⱼⱼ r²ⱼ,rest on the full set);
``"stratified"`` is stratified random sampling with the same strata and quotas. The anchors —
``"random"`` and ``"irt_info"`` — live in :mod:`rank_reliability.baselines`.
"""

from __future__ import annotations

import numpy as np

from papershelf.errors import InputError, check_choice, check_int

from .classical import item_residuals
from .matrix import check_matrix

METHODS = (
    "lambda6_star_pool",
    "lambda6_star",
    "lambda6_star_strat",
    "item_rest",
    "random",
    "stratified",
    "irt_info",
)
DEFAULT_METHOD = "lambda6_star_pool"
N_STRATA = 10  # difficulty strata of the stratified rules (deciles of the items' mean score)


def first_item(arr: np.ndarray, allowed: np.ndarray | None = None) -> int:
    """The starting item of greedy λ★6: the largest item–rest correlation among ``allowed`` items."""
    Xc = arr - arr.mean(axis=0)
    s2 = np.einsum("mi,mi->i", Xc, Xc)
    Tc = Xc.sum(axis=1)
    cov_rest = Tc @ Xc - s2
    var_rest = float(Tc @ Tc) - 2 * (Tc @ Xc) + s2
    r = np.divide(cov_rest, np.sqrt(s2 * var_rest), out=np.full_like(s2, -np.inf), where=var_rest > 0)
    if allowed is not None:
        r[~allowed] = -np.inf
    return int(np.argmax(r))


def difficulty_strata(arr: np.ndarray, n_strata: int = N_STRATA) -> np.ndarray:
    """Stratum label per item: ``n_strata`` equal-count strata of the items' mean score (0 = hardest)."""
    n_items = arr.shape[1]
    n_strata = min(n_strata, n_items)
    order = np.argsort(arr.mean(axis=0), kind="stable")
    labels = np.empty(n_items, dtype=np.int64)
    labels[order] = np.arange(n_items) * n_strata // n_items
    return labels


def stratum_quotas(labels: np.ndarray, budget: int) -> np.ndarray:
    """Proportional allocation of ``budget`` items over the strata (largest remainders, ties to lower)."""
    size = np.bincount(labels)
    share = budget * size / size.sum()
    quota = np.floor(share).astype(np.int64)
    quota[np.argsort(-(share - quota), kind="stable")[: budget - int(quota.sum())]] += 1
    return quota


def stratified_selection(arr: np.ndarray, budget: int, rng: np.random.Generator) -> np.ndarray:
    """Stratified random sampling: each difficulty stratum contributes its quota, drawn uniformly."""
    labels = difficulty_strata(arr)
    quota = stratum_quotas(labels, budget)
    parts = [rng.choice(np.flatnonzero(labels == h), q, replace=False) for h, q in enumerate(quota) if q]
    return np.concatenate(parts)


def greedy_lambda6_star(arr: np.ndarray, budget: int, *, stratified: bool = False) -> np.ndarray:
    """Greedy forward λ★6 selection on a validated complete matrix; item indices in selection order.

    With ``stratified`` every difficulty stratum is filled up to its proportional quota and no further.
    """
    n_models, n_items = arr.shape
    Xc = arr - arr.mean(axis=0)
    s2 = np.einsum("mi,mi->i", Xc, Xc) / (n_models - 1)
    taken = np.zeros(n_items, dtype=bool)
    if stratified:
        labels = difficulty_strata(arr)
        left = stratum_quotas(labels, budget)
        taken |= left[labels] == 0

    def take(k: int) -> None:
        taken[k] = True
        if stratified:
            left[labels[k]] -= 1
            if left[labels[k]] == 0:
                taken[labels == labels[k]] = True

    selected = [first_item(arr, ~taken)]
    take(selected[0])
    G = np.empty((budget, n_items))  # G[t] = cov(item selected[t], every item)
    G[0] = Xc[:, selected[0]] @ Xc / (n_models - 1)
    g = G[0].copy()  # cov(every item, total of the selected items)
    var_t = float(s2[selected[0]])
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
        k = _best(lam, taken)
        selected.append(k)
        take(k)
        G[t] = Xc[:, k] @ Xc / (n_models - 1)
        var_t = float(var_new[k])
        g += G[t]
    return np.asarray(selected)


def greedy_lambda6_star_pool(arr: np.ndarray, budget: int) -> np.ndarray:
    """Greedy forward selection maximising corr(T_S, T_P∖S), the λ★6 bound on the subset's reliability.

    One step scores every candidate k from covariances with the running subset total S and the rest
    R = P∖S: corr(S + xₖ, R − xₖ) = (c_SR − c_Sk + c_kR − s²ₖ) / √((v_S + 2c_Sk + s²ₖ)(v_R − 2c_Rk + s²ₖ)),
    O(M · I) per step. When the rest becomes constant (the budget takes nearly all items) the bound is
    undefined and the remaining items are taken in column order.
    """
    n_models, n_items = arr.shape
    Xc = arr - arr.mean(axis=0)
    s2 = np.einsum("mi,mi->i", Xc, Xc)
    total = Xc.sum(axis=1)
    S = np.zeros(n_models)
    taken = np.zeros(n_items, dtype=bool)
    selected: list[int] = []
    for _ in range(budget):
        R = total - S
        c_s, c_r = S @ Xc, R @ Xc
        var_s = float(S @ S) + 2 * c_s + s2
        var_r = float(R @ R) - 2 * c_r + s2
        cov = float(S @ R) - c_s + c_r - s2
        scale = float(total @ total) + float(s2.sum())
        ok = (var_s > 1e-12 * scale) & (var_r > 1e-12 * scale)
        r = np.divide(cov, np.sqrt(np.where(ok, var_s * var_r, 1.0)), out=np.full_like(s2, -np.inf), where=ok)
        k = _best(r, taken)
        selected.append(k)
        taken[k] = True
        S += Xc[:, k]
    return np.asarray(selected)


def _best(score: np.ndarray, taken: np.ndarray) -> int:
    """The untaken candidate with the largest finite score (first such column; else the first untaken)."""
    score = np.where(taken | ~np.isfinite(score), -np.inf, score)
    k = int(np.argmax(score))
    if not np.isfinite(score[k]):
        k = int(np.flatnonzero(~taken)[0])
    return k


def top_item_rest(arr: np.ndarray, budget: int) -> np.ndarray:
    """The ``budget`` items with the largest explained variance Sⱼⱼ r²ⱼ,rest, best first."""
    s2 = arr.var(axis=0, ddof=1)
    e2, _ = item_residuals(arr, "rest")
    return np.argsort(-(s2 - e2), kind="stable")[:budget]


def select_items(
    X: object,
    budget: int,
    *,
    method: str = DEFAULT_METHOD,
    seed: int = 0,
    drop_constant: bool = False,
) -> np.ndarray:
    """Choose ``budget`` items (column indices into ``X``, in selection order) by ``method``.

    Methods (λ★6 rules reconstructed, see the module docstring): ``"lambda6_star_pool"`` (default;
    greedy on the λ★6 bound corr²(subset total, total of the other items)), ``"lambda6_star"`` (greedy
    λ★6 of the subset itself), ``"lambda6_star_strat"`` (the latter within difficulty-stratum quotas),
    ``"item_rest"`` (top item–rest contributions), ``"random"`` (uniform without replacement, seeded),
    ``"stratified"`` (stratified random over difficulty deciles, seeded), ``"irt_info"`` (2PL Fisher
    information summed over the models' fitted abilities; 0/1 matrices only). Needs a complete matrix.

    >>> import numpy as np
    >>> from rank_reliability.data import simulate_2pl
    >>> X = simulate_2pl(40, 200, seed=0, drop_constant=True).X
    >>> sel = select_items(X, 20)
    >>> sel.shape, len(set(sel.tolist()))
    ((20,), 20)
    """
    check_choice("method", method, METHODS)
    arr, keep = check_matrix(X, allow_missing=False, drop_constant=drop_constant)
    n_items = arr.shape[1]
    budget = check_int("budget", budget, low=1)
    if budget > n_items:
        raise InputError(f"budget {budget} is larger than the number of items ({n_items})")
    return keep[_pick(arr, method, budget, np.random.default_rng(seed))]


def _pick(arr: np.ndarray, method: str, budget: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of the ``budget`` items ``method`` picks from the columns of a validated matrix."""
    from .baselines import irt_information_selection, random_selection

    if method == "lambda6_star_pool":
        return greedy_lambda6_star_pool(arr, budget)
    if method in ("lambda6_star", "lambda6_star_strat"):
        stratified = method == "lambda6_star_strat"
        if budget == 1:
            labels = difficulty_strata(arr)
            allowed = stratum_quotas(labels, 1)[labels] > 0 if stratified else None
            return np.array([first_item(arr, allowed)])
        return greedy_lambda6_star(arr, budget, stratified=stratified)
    if method == "item_rest":
        return top_item_rest(arr, budget)
    if method == "random":
        return random_selection(arr.shape[1], budget, seed=rng)
    if method == "stratified":
        return stratified_selection(arr, budget, rng)
    return irt_information_selection(arr, budget)


def selection_stability(
    X: object,
    budget: int,
    *,
    methods: tuple[str, ...] = ("lambda6_star_pool", "lambda6_star", "random", "irt_info"),
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
    Random and stratified subsets are drawn from the draw's own generator. Returns
    ``{method: τ per draw}``.
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
    P = arr[np.ix_(sel_models, pool)]
    varying = np.flatnonzero(P.min(axis=0) < P.max(axis=0))
    if varying.size < budget:
        raise InputError(f"draw {draw}: only {varying.size} pool items vary across models; budget {budget}")
    picked = _pick(P[:, varying], method, budget, rng)
    return arr[np.ix_(eval_models, pool[varying][picked])].mean(axis=1)
