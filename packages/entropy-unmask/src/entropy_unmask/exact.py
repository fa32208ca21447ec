"""Exact output distribution, KL and expected iterations of any schedule, by dynamic programming.

For every target sequence x (a row of the support) and every set M of revealed positions, the DP holds

* ``Q[x, M]``: the probability that the sampler's trajectory passes through the partial state
  (M, x_M) — the sampler's law, with reveals drawn independently from the predictor's marginals;
* ``R[x, M]``: the probability that the *target's* trajectory (x ~ p, sets chosen by the same rule on
  the same predictor) passes through M given x.

Masks are visited by increasing size; one batched predictor call per mask covers every distinct
partial state with that mask (memoised: duplicates are merged before the call). Then
q(x) = Q[x, full], KL(p || q) = sum_x p(x) log(p(x)/q(x)), the expected number of iterations is the
mass of every non-terminal partial state visited, and E_p[sum_t sum_{i in S_t} h_i] follows from R.

Sampler mass that leaves the support (a combination of independently drawn tokens of probability 0
under p) is tracked: ``off_support_mass``. When the predictor is an :class:`ExactOracle` with uniform
fallback, the rest of such a trajectory is deterministic in length, so the expected iteration count
stays exact; for other predictors it is bracketed (``iterations_low``, ``iterations_high``).

With ``support`` = all V^L sequences the result is the sampler's full output distribution.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from entropy_unmask.data import Joint
from entropy_unmask.predictors import MASK, predict, token_entropy
from entropy_unmask.schedules import Schedule
from papershelf.errors import InputError, check_int, check_number

MAX_STATES = 2**25  # n * 2^L cells of the DP


@dataclass
class ExactResult:
    """What :func:`exact_analysis` computes (all in nats)."""

    q_support: np.ndarray  # (n,) q(x) for every support row
    off_support_mass: float  # 1 - sum(q_support)
    kl: float  # KL(p || q)
    expected_iterations: float  # E_q[#iterations] (NaN when only bracketed)
    iterations_low: float
    iterations_high: float
    entropy: float  # H(X_0)
    p_expected_iterations: float  # E_p[#iterations] along the target's trajectories
    p_entropy_sum: float  # E_p[sum_t sum_{i in S_t} h_i]
    n_states: int  # distinct partial states on the support that were evaluated

    @property
    def tc_sum(self) -> float:
        """E_p[sum_t TC(X_{S_t} | x_obs,t)] = E_p[sum h] - H(X_0) (chain rule)."""
        return self.p_entropy_sum - self.entropy

    def as_dict(self) -> dict[str, float]:
        return {
            "kl": self.kl,
            "expected_iterations": self.expected_iterations,
            "iterations_low": self.iterations_low,
            "iterations_high": self.iterations_high,
            "off_support_mass": self.off_support_mass,
            "entropy": self.entropy,
            "p_expected_iterations": self.p_expected_iterations,
            "p_entropy_sum": self.p_entropy_sum,
            "tc_sum": self.tc_sum,
            "n_states": self.n_states,
        }


def kl_divergence(p: Any, q: Any) -> float:
    """KL(p || q) = sum p log(p/q) in nats over matching arrays (inf where q = 0 < p).

    >>> round(kl_divergence([0.5, 0.5], [0.25, 0.75]), 6)
    0.143841
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise InputError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    if (p < 0).any() or (q < 0).any() or not (np.isfinite(p).all() and np.isfinite(q).all()):
        raise InputError("p and q must be finite and non-negative")
    pos = p > 0
    if (q[pos] <= 0).any():
        return math.inf
    return float(np.sum(p[pos] * (np.log(p[pos]) - np.log(q[pos]))))


def iteration_bound(entropy: float, kl: float, eta: float) -> float:
    """E_p[#iterations] <= (H(X_0) + KL) / eta + 1 for the entropy-sum rule with the crossing token.

    Every iteration but the last reveals entropy >= eta, and E_p[sum of revealed entropies] =
    H(X_0) + KL(p || q) (chain rule plus the total-correlation identity).

    >>> round(iteration_bound(2.0, 0.05, 0.5), 6)
    5.1
    """
    eta = check_number("eta", eta, low=0, low_open=True)
    vals = []
    for name, value in (("entropy", entropy), ("kl", kl)):
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise InputError(f"{name} must be a number, got {value!r}") from None
        if not v >= -1e-9:  # rounding may leave an exact 0 slightly negative; refuses NaN; inf is kept
            raise InputError(f"{name} must be >= 0, got {value}")
        vals.append(v)
    return (vals[0] + vals[1]) / eta + 1.0


def offsupport_iterations(schedule: Schedule, L: int, V: int) -> np.ndarray:
    """r[m]: iterations a schedule needs for m masked positions when every row is uniform."""
    r = np.zeros(L + 1)
    rng = np.random.default_rng(0)
    for m in range(1, L + 1):
        probs = np.full((1, L, V), 1.0 / V)
        masked = np.zeros((1, L), bool)
        masked[0, :m] = True
        size = int(schedule.select_batch(probs, masked, rng).sum())
        r[m] = 1 + r[m - size]
    return r


def full_support(L: int, V: int) -> np.ndarray:
    if V**L * 2**L > MAX_STATES:
        raise InputError(
            f"full enumeration needs V^L * 2^L = {V**L * 2**L:,} DP cells (limit {MAX_STATES:,})"
        )
    return np.array(list(itertools.product(range(V), repeat=L)), dtype=np.int64)


def exact_analysis(
    predictor: Any,
    schedule: Schedule,
    target: Joint,
    *,
    full: bool = False,
) -> ExactResult:
    """Exact law of ``schedule`` driven by ``predictor`` against ``target`` (see the module doc).

    ``full=True`` runs the DP over all V^L sequences (the full output distribution; small L, V only).
    """
    if not isinstance(schedule, Schedule):
        raise InputError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    V, L = target.V, target.L
    if full:
        support = full_support(L, V)
        pmap = dict(zip(map(tuple, target.support.tolist()), target.probs))
        p = np.array([pmap.get(tuple(r), 0.0) for r in support.tolist()])
    else:
        support, p = target.support, target.probs
    n = support.shape[0]
    if n * (1 << L) > MAX_STATES:
        raise InputError(
            f"the exact DP needs n * 2^L = {n:,} * {1 << L:,} = {n * (1 << L):,} cells "
            f"(limit {MAX_STATES:,})",
            hint="use a smaller L, or a family with a smaller support",
        )
    pow_v = V ** np.arange(L, dtype=np.int64)
    span = int(V) ** L  # codes of partial states are < V^L <= 2^62 (Joint refuses larger spaces)
    exact_tail = bool(getattr(predictor, "offsupport_uniform", False))
    # a state-independent rule (fixed-k) chooses set sizes that depend on the masked count only, so every
    # trajectory, on or off the support, takes the same number of iterations: no off-support tracking
    sizes_fixed = bool(schedule.state_independent)
    tail = offsupport_iterations(schedule, L, V) if (exact_tail or sizes_fixed) else None
    Q = np.zeros((1 << L, n))  # mask-major: each mask's row is contiguous
    R = np.zeros((1 << L, n))
    Q[0] = 1.0
    R[0] = 1.0
    iters = 0.0
    iters_hi = 0.0  # extra for bracketing when the tail is unknown
    iters_lo = 0.0
    off = 0.0
    p_iters = 0.0
    p_hsum = 0.0
    n_states = 0
    full_mask = (1 << L) - 1
    masks = sorted(range(full_mask), key=lambda b: bin(b).count("1"))
    bit = 1 << np.arange(L, dtype=np.int64)
    for M in masks:
        QM, RM = Q[M], R[M]
        rows = np.nonzero((QM > 0) | (RM > 0))[0]
        if rows.size == 0:
            continue
        obs = (M & bit) > 0
        codes = support[np.ix_(rows, np.nonzero(obs)[0])] @ pow_v[obs]
        ucodes, first, inv = np.unique(codes, return_index=True, return_inverse=True)
        G = ucodes.size
        n_states += G
        tokens = np.where(obs[None, :], support[rows[first]], MASK)
        probs = predict(predictor, tokens)  # (G, L, V)
        if probs.shape[-1] != V:
            raise InputError(
                f"predictor returns {probs.shape[-1]} token probabilities, the target has V = {V}"
            )
        h = token_entropy(probs)
        masked = np.repeat(~obs[None, :], G, axis=0)
        q_state = QM[rows[first]]
        iters += float(q_state.sum())
        p_iters += float((p[rows] * RM[rows]).sum())
        m = L - int(obs.sum())
        # the sets chosen at the distinct states: W[g, s] = probability of choosing set s at state g
        if schedule.deterministic:
            if hasattr(schedule, "choose"):  # a rule that reads the observed tokens (PolicySchedule)
                chosen = schedule.choose(tokens) & masked
            else:
                chosen = schedule.select_batch(probs, masked, None)
            sbits = chosen.astype(np.int64) @ bit
            sets, col = np.unique(sbits, return_inverse=True)
            W = np.zeros((G, sets.size))
            W[np.arange(G), col] = 1.0
        elif hasattr(schedule, "set_weights") and not schedule.deterministic:
            sets, W = schedule.set_weights(probs, ~obs)  # all G states at once
        elif schedule.state_independent:
            dist = schedule.set_distribution(probs[0], masked[0])
            sets = np.array([sum(1 << i for i in S) for S, _ in dist], dtype=np.int64)
            W = np.repeat(np.array([pr for _, pr in dist])[None, :], G, axis=0)
        else:
            acc: dict[tuple[int, int], float] = {}
            for g in range(G):
                for S, pr in schedule.set_distribution(probs[g], masked[g]):
                    key = (g, sum(1 << i for i in S))
                    acc[key] = acc.get(key, 0.0) + pr
            sets, col = np.unique(np.array([k[1] for k in acc], dtype=np.int64), return_inverse=True)
            W = np.zeros((G, sets.size))
            np.add.at(W, (np.array([k[0] for k in acc]), col), np.array(list(acc.values())))
        Smat = ((sets[:, None] & bit[None, :]) > 0).astype(np.float64)  # (nS, L)
        nS = sets.size
        # per row: its own token's marginal probability and entropy at every position
        row_tok_prob = probs[inv[:, None], np.arange(L)[None, :], support[rows]]  # (r, L)
        logtp = np.log(np.maximum(row_tok_prob, 1e-300))
        logtp[row_tok_prob <= 0] = -1e5
        pq = np.exp(logtp @ Smat.T)  # (r, nS): prod over S of the row's token probabilities
        hsum = h[inv] @ Smat.T  # (r, nS)
        Wr = W[inv]  # (r, nS)
        qrows, rrows = QM[rows], RM[rows]
        M2 = M | sets
        Q[np.ix_(M2, rows)] += (qrows[:, None] * Wr * pq).T
        R[np.ix_(M2, rows)] += (rrows[:, None] * Wr).T
        p_hsum += float((p[rows, None] * rrows[:, None] * Wr * hsum).sum())
        if sizes_fixed:
            continue
        # mass leaving the support at (state g, set s): 1 - sum over distinct consistent x_S of pq
        # (r, nS) codes of x_S; a float64 product uses BLAS and is exact while codes < V^L <= 2^53,
        # above that the integer product is needed (float64 would round distinct codes together)
        terms = support[rows] * pow_v[None, :]
        if span <= 2**53:
            contrib = np.rint(terms.astype(np.float64) @ Smat.T).astype(np.int64)
        else:
            contrib = terms @ Smat.T.astype(np.int64)
        codes2 = codes[:, None] + contrib
        gs = np.arange(nS)[None, :] * G + inv[:, None]  # (r, nS) state-set index
        live = Wr > 0
        if G * nS * span < 2**63:  # one int64 key per (state-set, code) pair
            _, uidx = np.unique(gs[live] * span + codes2[live], return_index=True)
        else:  # that key would wrap around and merge pairs: unique over the pairs themselves
            _, uidx = np.unique(np.stack([gs[live], codes2[live]], axis=1), axis=0, return_index=True)
        kept = np.bincount(gs[live][uidx], weights=pq[live][uidx], minlength=G * nS).reshape(nS, G).T
        leave = q_state[:, None] * W * np.clip(1.0 - kept, 0.0, None)  # (G, nS)
        leave[W <= 0] = 0.0
        lm = leave.sum(axis=0)
        if lm.sum() > 0:
            off += float(lm.sum())
            rest = m - Smat.sum(axis=1).astype(np.int64)
            if exact_tail:
                iters += float((lm * tail[rest]).sum())
            else:
                iters_lo += float(lm[rest > 0].sum())
                iters_hi += float((lm * rest).sum())
    q = Q[full_mask].copy()
    kl = kl_divergence(p, q)
    pos = p > 0
    entropy = float(-(p[pos] * np.log(p[pos])).sum())
    if sizes_fixed:
        exp_iters = lo = hi = float(tail[L])
        off = max(0.0, 1.0 - float(q.sum()))  # what did not end on a support sequence left it
    elif exact_tail or full:
        exp_iters, lo, hi = iters, iters, iters
    else:
        exp_iters, lo, hi = math.nan, iters + iters_lo, iters + iters_hi
    if full:
        off = float(q[p <= 0].sum())  # the sampler's mass on sequences the target never produces
    return ExactResult(
        q_support=q,
        off_support_mass=off,
        kl=kl,
        expected_iterations=exp_iters,
        iterations_low=lo,
        iterations_high=hi,
        entropy=entropy,
        p_expected_iterations=p_iters,
        p_entropy_sum=p_hsum,
        n_states=n_states,
    )


def exact_output_distribution(predictor: Any, schedule: Schedule, L: int, V: int) -> np.ndarray:
    """The sampler's full output law as a dense table of shape (V,)*L (small L, V only)."""
    L = check_int("L", L, low=1)
    V = check_int("V", V, low=1)
    support = full_support(L, V)
    dummy = Joint(support, np.full(support.shape[0], 1.0 / support.shape[0]), V)
    res = exact_analysis(predictor, schedule, dummy)
    table = np.zeros(V**L)
    table[support @ (V ** np.arange(L)[::-1])] = res.q_support
    return table.reshape((V,) * L)
