"""Exact analyses behind the issue-13 targets (all on explicit joints, oracle predictor).

* :func:`best_deterministic_frontier`: the best possible *deterministic adaptive* rule. Any rule that
  chooses the next set S as a function of the revealed context (ascending entropy-sum, EB-sampler,
  max-entropy thresholding, top-k confidence, and every other such rule) has, along the target's
  trajectories, KL(p || q) = E_p[sum_t TC(X_S_t | ctx_t)] and E_p[#iterations]. A dynamic program over
  all partial states of the support and all 2^m subsets of the masked positions minimises
  E_p[#iterations] + lam * KL for each lam; the lower convex hull of the (E_p[#iterations], KL) points
  it returns is a lower bound on E_p[#iterations] at a given KL for every deterministic rule (and a
  random mixture of two hull rules attains it).
* :func:`copy_counterexample`: a four-position target on which the sampler's own expected iteration
  count E_q exceeds (H + KL)/eta + 1 although E_p stays within it.
* :func:`pairs_counterexample`: independent copied pairs on which ascending-order entropy-sum with the
  crossing token has KL = H(X_0) at a fixed eta, for every number of pairs (random order, and ascending
  order without the crossing token, do not).
* :func:`sampler_bound`: E_q <= E_p + (L - 1) * TV, a bound on the sampler's own iterations that holds
  for every predictor fallback.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from entropy_unmask.data import Joint, check_joint
from entropy_unmask.exact import MAX_STATES, ExactResult, exact_analysis, iteration_bound
from entropy_unmask.schedules import EntropySum, Schedule
from papershelf.errors import InputError

MAX_PAIR_WORK = 3**12  # (mask, subset) pairs of the frontier DP: 3^L


def _onehot_sum(ids: np.ndarray, weights: np.ndarray, G: int) -> np.ndarray:
    """Row-wise grouped sums: weights (k, n), ids (n,) in [0, G) -> (k, G)."""
    out = np.zeros((weights.shape[0], G))
    for r in range(weights.shape[0]):
        out[r] = np.bincount(ids, weights=weights[r], minlength=G)
    return out


def deterministic_dp(joint: Joint, lam: float, *, policy: bool = False) -> dict[str, Any]:
    """The deterministic adaptive rule minimising E_p[#iterations] + lam * KL(p || q), exactly.

    Returns its E_p[#iterations], its KL (= E_p[sum TC], exact for a deterministic rule) and the
    objective; with ``policy=True`` also the rule itself as a :class:`PolicySchedule`. Work: one pass
    over the 3^L (mask, subset) pairs, each O(n)."""
    support, p, L, V = joint.support, joint.probs, joint.L, joint.V
    n = support.shape[0]
    if 3**L > MAX_PAIR_WORK or n * (1 << L) > MAX_STATES:
        raise InputError(
            f"the frontier DP visits 3^L = {3**L:,} (mask, subset) pairs over n = {n:,} rows "
            f"(limits {MAX_PAIR_WORK:,} pairs, n * 2^L <= {MAX_STATES:,})"
        )
    pow_v = V ** np.arange(L, dtype=np.int64)
    full = (1 << L) - 1
    sid: dict[int, np.ndarray] = {}
    logP: dict[int, np.ndarray] = {}  # per row: log of the probability of the row's state under mask M
    for M in range(1 << L):
        obs = np.array([(M >> i) & 1 for i in range(L)], bool)
        codes = support[:, obs] @ pow_v[obs] if obs.any() else np.zeros(n, np.int64)
        _, inv = np.unique(codes, return_inverse=True)
        inv = inv.ravel()
        sid[M] = inv
        logP[M] = np.log(np.bincount(inv, weights=p)[inv])
    table: dict[tuple[int, int], int] = {}
    value = {full: np.zeros(n)}  # per row: the objective of the row's state (constant within a state)
    iters = {full: np.zeros(n)}
    tcsum = {full: np.zeros(n)}
    for M in sorted(range(full), key=lambda b: -bin(b).count("1")):
        free = [i for i in range(L) if not (M >> i) & 1]
        e = np.stack([logP[M] - logP[M | (1 << i)] for i in free])  # (m, n) -log p(x_i | state)
        subsets = [
            sum(1 << free[j] for j in range(len(free)) if (s >> j) & 1) for s in range(1, 1 << len(free))
        ]
        bits = np.array([[(S >> i) & 1 for i in free] for S in subsets], dtype=np.float64)  # (k, m)
        # per row: sum of -log p(x_i | state) over S minus -log p(x_S | state); its p-average within a
        # state is TC(X_S | state)
        t = bits @ e - np.stack([logP[M] - logP[M | S] for S in subsets])
        cost = 1.0 + lam * t + np.stack([value[M | S] for S in subsets])
        ids = sid[M]
        G = int(ids.max()) + 1
        Pst = np.bincount(ids, weights=p, minlength=G)
        cst = _onehot_sum(ids, cost * p[None, :], G) / Pst[None, :]  # (k, G)
        best = np.argmin(cst, axis=0)  # (G,)
        choice = best[ids]  # per row
        rows = np.arange(n)
        n_child = np.stack([iters[M | S] for S in subsets])[choice, rows]
        tc_child = np.stack([tcsum[M | S] for S in subsets])[choice, rows]
        t_row = t[choice, rows]
        if policy:
            obs = np.array([(M >> i) & 1 for i in range(L)], bool)
            codes = support[:, obs] @ pow_v[obs] if obs.any() else np.zeros(n, np.int64)
            for code, S in zip(codes.tolist(), np.array(subsets, dtype=np.int64)[choice].tolist()):
                table[(M, code)] = S
        value[M] = cst[best, np.arange(G)][ids]
        iters[M] = (1.0 + np.bincount(ids, weights=p * n_child, minlength=G) / Pst)[ids]
        tcsum[M] = (np.bincount(ids, weights=p * (t_row + tc_child), minlength=G) / Pst)[ids]
    out: dict[str, Any] = {
        "lam": lam,
        "iterations": float(iters[0][0]),
        "kl": max(0.0, float(tcsum[0][0])),
        "objective": float(value[0][0]),
    }
    if policy:
        out["policy"] = PolicySchedule(table, L, V)
    return out


class PolicySchedule(Schedule):
    """A deterministic rule given as a table (mask bits, code of the observed values) -> set bits.

    Contexts missing from the table (off the support) reveal every masked position."""

    name = "dp-policy"

    def __init__(self, table: dict[tuple[int, int], int], L: int, V: int):
        self.table, self.L, self.V = table, L, V
        self._pow = V ** np.arange(L, dtype=np.int64)
        self._bit = 1 << np.arange(L, dtype=np.int64)

    def select_batch(self, probs: np.ndarray, masked: np.ndarray, rng: Any = None) -> np.ndarray:
        """Without the tokens (an off-support context): reveal every masked position."""
        return masked.copy()

    def first_set(self) -> int:
        """The set (bits) revealed at the first iteration, from the fully masked sequence."""
        return self.table[(0, 0)]

    def choose(self, tokens: np.ndarray) -> np.ndarray:
        obs = tokens >= 0
        masks = obs.astype(np.int64) @ self._bit
        codes = np.where(obs, tokens, 0) @ self._pow
        out = np.zeros(tokens.shape, bool)
        for b, (M, c) in enumerate(zip(masks.tolist(), codes.tolist())):
            S = self.table.get((M, c))
            out[b] = ~obs[b] if S is None else (S & self._bit) > 0
        return out


def lower_hull(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Lower convex hull of (iterations, KL) points, by increasing iterations."""
    pts = sorted(set(points))
    hull: list[tuple[float, float]] = []
    for x, y in pts:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1) <= 0:
                hull.pop()
            else:
                break
        hull.append((x, y))
    # keep the decreasing part (more iterations never needs more KL)
    out = [hull[0]]
    for pt in hull[1:]:
        if pt[1] < out[-1][1]:
            out.append(pt)
    return out


def iterations_at_kl(hull: list[tuple[float, float]], kl_target: float) -> float:
    """Smallest iterations on the hull with KL <= kl_target (linear between hull points)."""
    ok = [pt for pt in hull if pt[1] <= kl_target + 1e-15]
    if not ok:
        return math.inf
    x0, y0 = min(ok)
    before = [pt for pt in hull if pt[0] < x0]
    if not before:
        return x0
    x1, y1 = max(before)  # the hull point just left of x0, with KL above the target
    if y1 <= y0:
        return x0
    return x1 + (x0 - x1) * (y1 - kl_target) / (y1 - y0)


DEFAULT_LAMBDAS = tuple(float(v) for v in np.geomspace(0.5, 2000.0, 25))


def best_deterministic_frontier(
    joint: Joint, kl_target: float = 0.05, lambdas: tuple[float, ...] = DEFAULT_LAMBDAS
) -> dict[str, Any]:
    """Lower bound on E_p[#iterations] at KL <= kl_target over every deterministic adaptive rule."""
    pts = [deterministic_dp(joint, lam) for lam in lambdas]
    pts.append({"lam": 0.0, "iterations": 1.0, "kl": _one_step_kl(joint), "objective": 1.0})
    hull = lower_hull([(r["iterations"], r["kl"]) for r in pts])
    pure = [r for r in pts if r["kl"] <= kl_target + 1e-15]
    return {
        "points": pts,
        "hull": hull,
        "iterations_at_target": iterations_at_kl(hull, kl_target),
        "best_pure": min(pure, key=lambda r: r["iterations"]) if pure else None,
    }


def _one_step_kl(joint: Joint) -> float:
    """KL of revealing everything in one step: the total correlation of X_0."""
    support, p = joint.support, joint.probs
    hsum = 0.0
    for i in range(joint.L):
        m = np.bincount(support[:, i], weights=p, minlength=joint.V)
        m = m[m > 0]
        hsum += float(-(m * np.log(m)).sum())
    return hsum - joint.entropy


def tv_distance(joint: Joint, res: ExactResult) -> float:
    """TV(p, q) from an exact analysis: half the L1 distance on the support plus the off-support mass."""
    return 0.5 * (float(np.abs(joint.probs - res.q_support).sum()) + res.off_support_mass)


def sampler_bound(joint: Joint, res: ExactResult) -> float:
    """E_q[#iterations] <= E_p[#iterations] + (L - 1) * TV(p, q) for a deterministic rule.

    The trajectory is a function of the final sequence and the iteration count lies in [1, L], so the
    two expectations of it differ by at most (L - 1) times the total variation between the laws of the
    trajectories, which is TV(p, q). It holds whatever the predictor does off the support."""
    return res.p_expected_iterations + (joint.L - 1) * tv_distance(joint, res)


def copy_joint(L: int = 4, V: int = 3) -> Joint:
    """One fair bit copied to all L positions, over a vocabulary of V >= 2 symbols (the rest unused)."""
    return Joint(np.array([[0] * L, [1] * L]), np.array([0.5, 0.5]), V, name="copy-bit")


def copy_counterexample(L: int = 4, V: int = 3, eta: float = 1.0) -> dict[str, float]:
    """E_q above (H + KL)/eta + 1 on :func:`copy_joint` (uniform off-support fallback).

    With log 2 < eta <= log V, the first step reveals two positions (entropies log 2 each); they
    disagree with probability 1/2, the oracle then has no conditional and falls back to uniform rows
    of entropy log V >= eta, one position per step, L - 1 steps in all. E_p = 2, KL = log 2."""
    joint = copy_joint(L, V)
    res = exact_analysis(joint.oracle(), EntropySum(eta), joint)
    return {
        "L": L,
        "V": V,
        "eta": eta,
        "H": res.entropy,
        "kl": res.kl,
        "E_p": res.p_expected_iterations,
        "E_q": res.expected_iterations,
        "bound": iteration_bound(res.entropy, res.kl, eta),
        "off_support_mass": res.off_support_mass,
        "tv": tv_distance(joint, res),
        "sampler_bound": sampler_bound(joint, res),
    }


def pairs_joint(n_pairs: int, p_low: float = 0.10, p_high: float = 0.12, V: int = 2) -> Joint:
    """n independent pairs (X_2j = X_2j+1 ~ Bernoulli(p_j)), p_j evenly spaced in [p_low, p_high]."""
    if n_pairs < 1 or n_pairs > 8:
        raise InputError(f"n_pairs must be in [1, 8], got {n_pairs}")
    ps = np.linspace(p_low, p_high, n_pairs)
    sup, pr = [], []
    for bits in itertools.product((0, 1), repeat=n_pairs):
        sup.append([b for b in bits for _ in range(2)])
        pr.append(float(np.prod([q if b else 1 - q for b, q in zip(bits, ps)])))
    s, w = check_joint(np.array(sup), np.array(pr), V)
    return Joint(s, w, V, name="pairs")


def pairs_counterexample(n_values: tuple[int, ...] = (2, 3, 4, 5, 6), eta: float = 0.45) -> list[dict]:
    """Ascending and random-order entropy-sum at one eta on :func:`pairs_joint` with 2..6 pairs.

    Every pair entropy h_j lies in (eta/2, eta) (0.325..0.367 for eta = 0.45), so ascending order with
    the crossing token (the default) takes the two lowest-entropy positions, which are the two copies of
    one pair, in every step: KL = sum of the pair entropies = H(X_0), growing with L at fixed eta.

    Ascending order *without* the crossing token (``include_crossing=False``) escapes this: the second
    copy would cross eta, so a step stops after one copy; the other copy then has entropy 0 and is
    revealed first in the next step. KL = 0 exactly, in n + 1 iterations. So the counterexample is
    against the pair (ascending order, crossing token), not against ordering by entropy as such."""
    rows = []
    for n in n_values:
        joint = pairs_joint(n)
        asc = exact_analysis(joint.oracle(), EntropySum(eta), joint)
        asc_nc = exact_analysis(joint.oracle(), EntropySum(eta, include_crossing=False), joint)
        rnd = exact_analysis(joint.oracle(), EntropySum(eta, order="random"), joint)
        rows.append(
            {
                "pairs": n,
                "L": joint.L,
                "H": joint.entropy,
                "eta": eta,
                "kl_ascending": asc.kl,
                "iters_ascending": asc.expected_iterations,
                "kl_ascending_no_crossing": asc_nc.kl,
                "iters_ascending_no_crossing": asc_nc.expected_iterations,
                "kl_random": rnd.kl,
                "iters_random": rnd.expected_iterations,
            }
        )
    return rows
