"""Environments: the paper's Gaussian two-stage model, a Countdown task with a noisy reward model, and an
adapter that turns any sampler + scorer (an LLM and a reward model, say) into an :class:`Environment`."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import special

from papershelf.errors import InputError, check_int, check_number
from slg_search.tail import expected_max_normal


def _check_vector(name: str, values: Any, *, positive: bool = False) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be numeric") from None
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"{name} must be a non-empty 1-D list of numbers, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} must be finite")
    if positive and np.any(arr <= 0):
        raise InputError(f"{name} must be > 0")
    return arr


def mixture_expected_max(
    n: int, means: np.ndarray, sds: np.ndarray, weights: np.ndarray, points: int = 40_001
) -> float:
    """E[max of n draws] from the Gaussian mixture Σ w_i N(μ_i, σ_i²), by integrating x d(F^n) on a grid."""
    lo = float(np.min(means - 10 * sds))
    hi = float(np.max(means + 10 * sds))
    x = np.linspace(lo, hi, points)
    z = (x[:, None] - means[None, :]) / sds[None, :]
    cdf = np.clip(special.ndtr(z) @ weights, 1e-300, 1.0)
    pdf = (np.exp(-0.5 * z * z) / (sds * math.sqrt(2 * math.pi))[None, :]) @ weights
    dens = n * pdf * np.exp((n - 1) * np.log(cdf))
    return float(np.trapezoid(x * dens, x))


# ---- Gaussian two-stage model ----------------------------------------------------------------------
class GaussianTwoStage:
    """The paper's Gaussian two-stage model.

    The root's first step picks child i with probability ``weights[i]`` (uniform by default); a
    response through child i then has reward ~ N(μ_i, σ_i²). States: ``"root"`` and the child indices
    0..K−1; responses are the child index of each draw.

    >>> env = GaussianTwoStage([0.0, 1.0], [1.0, 0.5])
    >>> round(env.expected_best(1, 2), 4)  # 1 + 0.5/√π
    1.2821
    """

    root = "root"

    def __init__(self, means: Any, sds: Any, weights: Any = None) -> None:
        self.means = _check_vector("means", means)
        self.sds = _check_vector("sds", sds, positive=True)
        if self.sds.size != self.means.size:
            raise InputError(f"sds must have one entry per child ({self.means.size}), got {self.sds.size}")
        if weights is None:
            self.weights = np.full(self.means.size, 1.0 / self.means.size)
        else:
            w = _check_vector("weights", weights)
            if w.size != self.means.size or np.any(w < 0) or w.sum() <= 0:
                raise InputError("weights must be >= 0, one per child, with a positive sum")
            self.weights = w / w.sum()

    @property
    def k(self) -> int:
        return int(self.means.size)

    @classmethod
    def random(
        cls, k: int = 8, rng: Any = None, *, mean_sd: float = 0.5, sd_low: float = 0.2, sd_high: float = 1.5
    ) -> GaussianTwoStage:
        """K heterogeneous children from the prior μ_i ~ N(0, mean_sd²), σ_i ~ U[sd_low, sd_high]."""
        k = check_int("k", k, low=1)
        check_number("mean_sd", mean_sd, low=0)
        check_number("sd_low", sd_low, low=0, low_open=True)
        check_number("sd_high", sd_high, low=sd_low)
        rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
        return cls(rng.normal(0.0, mean_sd, k), rng.uniform(sd_low, sd_high, k))

    def _child(self, state: Any) -> int:
        if isinstance(state, int | np.integer) and 0 <= state < self.k:
            return int(state)
        raise InputError(f"unknown state {state!r}: expected 'root' or a child index 0..{self.k - 1}")

    def rollout(self, state: Any, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if state == self.root:
            idx = rng.choice(self.k, size=n, p=self.weights)
        else:
            idx = np.full(n, self._child(state))
        return idx, self.means[idx] + self.sds[idx] * rng.standard_normal(n)

    def first_step(self, state: Any, response: Any) -> int | None:
        return int(response) if state == self.root else None

    def children(self, state: Any) -> list[int]:
        return list(range(self.k)) if state == self.root else []

    def expected_best(self, state: Any, n: int) -> float:
        """Exact E[max of n rewards] sampled from ``state``."""
        if state == self.root:
            return mixture_expected_max(n, self.means, self.sds, self.weights)
        i = self._child(state)
        return float(self.means[i] + self.sds[i] * expected_max_normal(n))


# ---- Countdown ----------------------------------------------------------------------------------------
OPS = ("+", "-", "*", "/")


def _apply(a: int, op: str, b: int) -> int | None:
    if op == "+":
        return a + b
    if op == "*":
        return a * b
    if op == "-":
        return a - b if a > b else None
    return a // b if b > 0 and a % b == 0 else None


@lru_cache(maxsize=200_000)
def legal_moves(pool: tuple[int, ...]) -> tuple[tuple[int, str, int, int], ...]:
    """Every legal step (a, op, b, result) on a sorted pool: positive integer results only, a >= b."""
    moves = []
    n = len(pool)
    seen = set()
    for i in range(n):
        for j in range(n):
            if i == j or pool[i] < pool[j] or (pool[i] == pool[j] and i > j):
                continue
            for op in OPS:
                res = _apply(pool[i], op, pool[j])
                if res is None or res <= 0:
                    continue
                key = (pool[i], op, pool[j])
                if key not in seen:
                    seen.add(key)
                    moves.append((pool[i], op, pool[j], res))
    return tuple(moves)


def _after(pool: tuple[int, ...], move: tuple[int, str, int, int]) -> tuple[int, ...]:
    rest = list(pool)
    rest.remove(move[0])
    rest.remove(move[2])
    rest.append(move[3])
    return tuple(sorted(rest))


@lru_cache(maxsize=100_000)
def _outcomes(pool: tuple[int, ...]) -> tuple[tuple[int, float], ...]:
    """The exact distribution of the final number under the uniform policy from ``pool``."""
    if len(pool) == 1:
        return ((pool[0], 1.0),)
    moves = legal_moves(pool)
    if not moves:
        return ((max(pool), 1.0),)
    acc: dict[int, float] = {}
    for mv in moves:
        for value, p in _outcomes(_after(pool, mv)):
            acc[value] = acc.get(value, 0.0) + p / len(moves)
    return tuple(sorted(acc.items()))


class Countdown:
    """Countdown as a sequential generation task, with a noisy reward model and no LLM.

    Combine the ``numbers`` pairwise with + − × ÷ (positive integer results only) until one number is
    left; the aim is ``target``. A *state* is the tuple of steps taken so far, a step is
    ``(a, op, b, result)``; a *response* is a complete tuple of steps. The generator is a stochastic
    policy: each step is uniform over the legal steps, so the first step strongly conditions what can
    still be reached. The true score of a final number x is exp(−|x − target| / s) with s =
    max(1, target/10) (1 for an exact hit); the reward model returns the true score plus
    N(0, ``noise``²) noise, drawn afresh for every rollout.

    >>> env = Countdown((3, 7, 25, 50), 161)
    >>> round(env.true_score(((50, '+', 25, 75), (75, '-', 7, 68), (68, '*', 3, 204))), 4)
    0.0692
    """

    root: tuple = ()

    def __init__(self, numbers: Sequence[int], target: int, noise: float = 0.1) -> None:
        try:
            nums = tuple(sorted(int(x) for x in numbers))
        except (TypeError, ValueError):
            raise InputError("numbers must be integers") from None
        if not 2 <= len(nums) <= 6 or any(x < 1 for x in nums):
            raise InputError(f"numbers must be 2 to 6 positive integers, got {list(numbers)}")
        self.numbers = nums
        self.target = check_int("target", target, low=1)
        self.noise = check_number("noise", noise, low=0.0)
        self.scale = max(1.0, self.target / 10.0)

    def pool(self, state: tuple) -> tuple[int, ...]:
        pool = self.numbers
        for step in state:
            if step not in legal_moves(pool):
                raise InputError(f"illegal step {step!r} for numbers {list(pool)}")
            pool = _after(pool, step)
        return pool

    def score_value(self, x: Any) -> Any:
        return np.exp(-np.abs(np.asarray(x, dtype=np.float64) - self.target) / self.scale)

    def final(self, response: tuple) -> int:
        pool = self.pool(response)
        return pool[0] if len(pool) == 1 else max(pool)

    def true_score(self, response: tuple) -> float:
        return float(self.score_value(self.final(response)))

    def solves(self, response: tuple) -> bool:
        return self.final(response) == self.target

    def rollout(self, state: Any, n: int, rng: np.random.Generator) -> tuple[list[tuple], np.ndarray]:
        state = tuple(state)
        start = self.pool(state)
        responses = []
        finals = np.empty(n)
        for r in range(n):
            pool, steps = start, list(state)
            while len(pool) > 1:
                moves = legal_moves(pool)
                if not moves:
                    break
                mv = moves[int(rng.integers(len(moves)))]
                steps.append(mv)
                pool = _after(pool, mv)
            responses.append(tuple(steps))
            finals[r] = pool[0] if len(pool) == 1 else max(pool)
        rewards = self.score_value(finals) + self.noise * rng.standard_normal(n)
        return responses, rewards

    def first_step(self, state: Any, response: Any) -> tuple | None:
        state = tuple(state)
        # a child must leave at least one step to generate (its rollouts are then not all identical)
        if len(response) <= len(state) + 1:
            return None
        return tuple(response[: len(state) + 1])

    def children(self, state: Any) -> list[tuple]:
        state = tuple(state)
        pool = self.pool(state)
        if len(pool) <= 2:
            return []
        return [(*state, mv) for mv in legal_moves(pool)]

    def outcome_distribution(self, state: Any) -> tuple[np.ndarray, np.ndarray]:
        """Exact (final numbers, probabilities) of the policy's rollouts from ``state``."""
        pairs = _outcomes(self.pool(tuple(state)))
        return np.array([v for v, _ in pairs], dtype=np.float64), np.array([p for _, p in pairs])

    def expected_best(self, state: Any, n: int) -> float:
        """Exact E[max of n rewards] from ``state``: the reward is a mixture of N(score_j, noise²)."""
        values, probs = self.outcome_distribution(state)
        scores = self.score_value(values)
        if self.noise == 0:
            order = np.argsort(scores)
            s, p = scores[order], probs[order]
            cdf = np.cumsum(p)
            below = np.concatenate([[0.0], cdf[:-1]])
            return float(np.sum(s * (np.minimum(cdf, 1.0) ** n - below**n)))
        return mixture_expected_max(n, scores, np.full(scores.size, self.noise), probs, points=6_001)

    def describe(self, response: tuple) -> str:
        return ", ".join(f"{a}{op}{b}={r}" for a, op, b, r in response)


def random_countdown(rng: Any = None, *, n_numbers: int = 4, noise: float = 0.1) -> Countdown:
    """A random solvable puzzle: numbers from 1–10 and {25, 50, 75, 100}, target reached by a random
    sequence of steps, in [10, 999] and not one of the numbers."""
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    small, large = list(range(1, 11)), [25, 50, 75, 100]
    while True:
        n_large = int(rng.integers(0, 3))
        nums = [int(x) for x in rng.choice(large, n_large, replace=False)] + [
            int(x) for x in rng.choice(small, n_numbers - n_large)
        ]
        env = Countdown(nums, 1, noise=noise)
        responses, _ = env.rollout((), 1, rng)
        target = env.final(responses[0])
        if 10 <= target <= 999 and target not in nums and len(responses[0]) == n_numbers - 1:
            return Countdown(nums, target, noise=noise)


# ---- any sampler + reward model ------------------------------------------------------------------
class FunctionEnvironment:
    """Wrap user callables as an :class:`~slg_search.search.Environment`.

    * ``sample(state, n, rng) -> list of n responses`` — e.g. n completions of a prompt prefix;
    * ``score(state, responses) -> n rewards`` — e.g. a reward model on (prompt, completion);
    * ``first_step(state, response) -> child state or None`` — e.g. the prefix extended by the first
      line / sentence / reasoning step of the completion; None when there is no further step.

    States must be hashable (strings, tuples).
    """

    def __init__(
        self,
        sample: Callable[[Any, int, np.random.Generator], Sequence[Any]],
        score: Callable[[Any, Sequence[Any]], Any],
        first_step: Callable[[Any, Any], Hashable | None],
    ) -> None:
        for name, fn in (("sample", sample), ("score", score), ("first_step", first_step)):
            if not callable(fn):
                raise InputError(f"{name} must be callable")
        self._sample, self._score, self._first = sample, score, first_step

    def rollout(self, state: Any, n: int, rng: np.random.Generator) -> tuple[list[Any], np.ndarray]:
        responses = list(self._sample(state, n, rng))
        if len(responses) != n:
            raise InputError(f"sample returned {len(responses)} responses, expected {n}")
        rewards = np.asarray(self._score(state, responses), dtype=np.float64).reshape(-1)
        if rewards.size != n:
            raise InputError(f"score returned {rewards.size} rewards for {n} responses")
        if not np.all(np.isfinite(rewards)):
            raise InputError("score returned a non-finite reward")
        return responses, rewards

    def first_step(self, state: Any, response: Any) -> Hashable | None:
        return self._first(state, response)
