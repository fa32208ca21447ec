"""The anchors, each its own online matcher (independent code, so the γ = 0 / γ = 1 tests mean something).

* :class:`WaterFilling` — BALANCE (Kalyanasundaram & Pruhs): pour each item into its least-filled
  neighbours together; (1 − 1/e)-competitive for divisible items, no class fairness. Vectorised with
  NumPy (sort, cumulative sums).
* :class:`EqualFilling` — EQUAL-FILLING (Hosseini, Huang, Igarashi & Shah, AAAI 2023): pour into the
  class holding the least value among the classes with a non-full neighbour (tied classes at equal
  rates), water-filling inside the class; (1 − 1/e)-CEF and 1/2-USW. Computed class event by class
  event.
* :class:`Ranking` — RANKING (Karp, Vazirani & Vazirani): random agent ranks drawn up front, each
  item to its lowest-ranked free neighbour; (1 − 1/e)-competitive in expectation, indivisible.
* :class:`Greedy` — each item to its lowest-index neighbours with room (indivisible on unit items);
  1/2-competitive.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fair_class_matching.instance import Instance
from fair_class_matching.matching import Allocation, OnlineMatcher, run_online


def _water_fill(levels: np.ndarray, amount: float, cap: float = 1.0) -> np.ndarray:
    """New levels after water-filling ``amount`` into ``levels`` (all < cap) up to ``cap``."""
    xs = np.sort(levels)
    prefix = np.cumsum(xs)
    t = np.arange(1, xs.size + 1)
    cand = (amount + prefix) / t  # water level if exactly the t lowest receive
    nxt = np.append(xs[1:], np.inf)
    ok = np.flatnonzero(cand <= nxt)
    level = cand[ok[0]]
    if level >= cap:
        return np.full_like(levels, cap)
    return np.maximum(levels, level)


class WaterFilling(OnlineMatcher):
    """Water-filling / BALANCE for divisible items."""

    name = "water-filling"

    def _assign(self, nbrs: list[int], value: float) -> None:
        x = self._x
        free = [a for a in nbrs if x[a] < 1.0]
        if not free:
            return
        new = _water_fill(np.array([x[a] for a in free]), 1.0)
        for a, v in zip(free, new.tolist()):
            x[a] = v


class EqualFilling(OnlineMatcher):
    """EQUAL-FILLING for divisible items (class levels = value held by the class)."""

    name = "equal-filling"

    def _assign(self, nbrs: list[int], value: float) -> None:
        x, cls, u = self._x, self._cls, self._u
        remaining = 1.0
        level = {c: u[c] for c in {cls[a] for a in nbrs}}  # class value including this item's mass
        while remaining > 1e-15:
            groups: dict[int, list[int]] = {}
            for a in nbrs:
                if x[a] < 1.0:
                    groups.setdefault(cls[a], []).append(a)
            if not groups:
                return
            low = min(level[c] for c in groups)
            tol = 1e-12 * max(1.0, abs(low))
            tied = [c for c in groups if level[c] <= low + tol]
            higher = [level[c] for c in groups if level[c] > low + tol]
            room = {c: sum(1.0 - x[a] for a in groups[c]) for c in tied}
            # the mass each tied class takes before the next event: the next class level is reached,
            # a tied class fills up, or the item runs out
            step = min(room.values())
            next_level = min(higher) if higher else None
            if next_level is not None:
                step = min(step, (next_level - low) / value)
            step = min(step, remaining / len(tied))
            for c in tied:
                if step >= room[c]:
                    for a in groups[c]:
                        x[a] = 1.0
                    got = room[c]
                else:
                    members = groups[c]
                    new = _water_fill(np.array([x[a] for a in members]), step)
                    for a, v in zip(members, new.tolist()):
                        x[a] = v
                    got = step
                level[c] = low + value * got
                if next_level is not None and abs(level[c] - next_level) <= tol:
                    level[c] = next_level
                remaining -= got


class Ranking(OnlineMatcher):
    """RANKING (indivisible): ranks y_a ~ U[0, 1] drawn from ``seed`` before any item arrives."""

    name = "ranking"
    integral = True

    def __init__(
        self,
        agent_class: Sequence[int] | np.ndarray | Instance,
        *,
        seed: int | np.random.Generator | None = 0,
    ) -> None:
        super().__init__(agent_class)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.ranks: list[float] = rng.random(self._n).tolist()

    def _assign(self, nbrs: list[int], value: float) -> None:
        free = [a for a in nbrs if self._x[a] == 0.0]
        if free:
            self._x[min(free, key=self.ranks.__getitem__)] = 1.0


class Greedy(OnlineMatcher):
    """Greedy: pour each item into its neighbours with room in index order."""

    name = "greedy"

    def _assign(self, nbrs: list[int], value: float) -> None:
        x = self._x
        remaining = 1.0
        for a in nbrs:
            room = 1.0 - x[a]
            if room <= 0.0:
                continue
            if room >= remaining:
                x[a] += remaining
                return
            x[a] = 1.0
            remaining -= room


def water_filling(instance: Instance, *, audit: bool = False) -> Allocation:
    return run_online(instance, WaterFilling(instance), audit=audit)


def equal_filling(instance: Instance, *, audit: bool = False) -> Allocation:
    return run_online(instance, EqualFilling(instance), audit=audit)


def ranking(
    instance: Instance, *, seed: int | np.random.Generator | None = 0, audit: bool = False
) -> Allocation:
    return run_online(instance, Ranking(instance, seed=seed), audit=audit)


def greedy(instance: Instance, *, audit: bool = False) -> Allocation:
    return run_online(instance, Greedy(instance), audit=audit)
