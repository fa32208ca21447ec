"""Monte Carlo sampling with any predictor and schedule, and the chi-square check against the exact law."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from entropy_unmask.predictors import MASK, predict
from entropy_unmask.schedules import Schedule
from papershelf.errors import InputError, check_int


def sample(
    predictor: Any,
    schedule: Schedule,
    L: int,
    n: int = 1,
    rng: Any = None,
    *,
    prompt: Any = None,
    batch: int = 4096,
    return_trace: bool = False,
):
    """Draw ``n`` sequences of length ``L``: at each iteration, ask the predictor for every masked
    position's distribution, let ``schedule`` choose the set to reveal, and sample the revealed tokens
    independently from their marginals. All unfinished sequences advance in lockstep (one batched
    predictor call per iteration).

    ``prompt``: an optional (L,) array with -1 at the positions to generate (others fixed).
    Returns ``(x, iterations)``: int64 (n, L) and int64 (n,); with ``return_trace=True`` also the
    list of revealed-set sizes of each sequence.

    >>> from entropy_unmask.data import markov
    >>> from entropy_unmask.schedules import EntropySum
    >>> j = markov(L=6, V=3, seed=0)
    >>> x, it = sample(j.oracle(), EntropySum(0.5), L=6, n=4, rng=0)
    >>> x.shape, bool((it >= 1).all() and (it <= 6).all())
    ((4, 6), True)
    """
    if not isinstance(schedule, Schedule):
        raise InputError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    L = check_int("L", L, low=1)
    n = check_int("n", n, low=1)
    batch = check_int("batch", batch, low=1)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    start = np.full(L, MASK, dtype=np.int64)
    if prompt is not None:
        pr = np.asarray(prompt)
        if pr.shape != (L,) or not np.issubdtype(pr.dtype, np.integer) or pr.min() < MASK:
            raise InputError(f"prompt must be an (L,) = ({L},) integer array with -1 at generated positions")
        start = pr.astype(np.int64)
    xs, its, traces = [], [], []
    for b0 in range(0, n, batch):
        nb = min(batch, n - b0)
        x = np.repeat(start[None, :], nb, axis=0)
        it = np.zeros(nb, dtype=np.int64)
        trace: list[list[int]] = [[] for _ in range(nb)]
        for _ in range(L + 1):
            masked = x == MASK
            active = np.nonzero(masked.any(axis=1))[0]
            if active.size == 0:
                break
            probs = predict(predictor, x[active])
            V = probs.shape[2]
            chosen = schedule.select_batch(probs, masked[active], rng)
            if not chosen.any(axis=1).all() or (chosen & ~masked[active]).any():
                raise RuntimeError(f"{schedule!r} chose an empty set or an observed position")
            r, c = np.nonzero(chosen)
            cdf = np.cumsum(probs[r, c], axis=1)
            u = rng.random(r.size) * cdf[:, -1]
            tok = np.minimum((cdf < u[:, None]).sum(axis=1), V - 1)
            x[active[r], c] = tok
            it[active] += 1
            if return_trace:
                for a, s in zip(active, chosen.sum(axis=1)):
                    trace[a].append(int(s))
        xs.append(x)
        its.append(it)
        traces.extend(trace)
    out = (np.concatenate(xs), np.concatenate(its))
    return (*out, traces) if return_trace else out


@dataclass
class ChiSquare:
    statistic: float
    dof: int
    pvalue: float
    bins: int


def chi_square_test(
    samples: np.ndarray,
    support: np.ndarray,
    q_support: np.ndarray,
    off_mass: float,
    V: int,
    min_expected: float = 5.0,
) -> ChiSquare:
    """Pearson chi-square of samples against the exact law: one bin per support sequence, one bin for
    everything off the support; bins with expected count < ``min_expected`` are pooled."""
    from scipy.stats import chi2

    N = samples.shape[0]
    L = support.shape[1]
    pow_v = V ** np.arange(L, dtype=np.int64)
    scodes = support @ pow_v
    order = np.argsort(scodes)
    sc = scodes[order]
    xc = samples @ pow_v
    pos = np.clip(np.searchsorted(sc, xc), 0, sc.size - 1)
    hit = sc[pos] == xc
    counts = np.bincount(pos[hit], minlength=sc.size).astype(float)
    obs = np.append(counts, float((~hit).sum()))
    exp = np.append(q_support[order], max(off_mass, 0.0)) * N
    big = exp >= min_expected
    o = np.append(obs[big], obs[~big].sum())
    e = np.append(exp[big], exp[~big].sum())
    if e[-1] < min_expected:  # fold the pooled remainder into the smallest kept bin
        if o.size > 1:
            j = int(np.argmin(e[:-1]))
            o[j] += o[-1]
            e[j] += e[-1]
        o, e = o[:-1], e[:-1]
    if (o[e == 0] > 0).any():
        return ChiSquare(float("inf"), max(o.size - 1, 1), 0.0, o.size)
    keep = e > 0
    stat = float(((o[keep] - e[keep]) ** 2 / e[keep]).sum())
    dof = max(int(keep.sum()) - 1, 1)
    return ChiSquare(stat, dof, float(chi2.sf(stat, dof)), int(keep.sum()))
