"""The online matchers: the γ-threshold algorithm (divisible) and its randomized indivisible version.

Every matcher is a real online algorithm: it is built from the offline side only (the agents and their
classes), then sees items one at a time through :meth:`OnlineMatcher.arrive` and commits each item's
assignment irrevocably before the next one arrives. It never sees a future item.

Divisible γ-threshold rule (:class:`ThresholdMatcher`). Agent a has a fill level x_a ∈ [0, 1]; class
c has a level h_c (by default the value it holds, u_c = Σ_{a∈c} value received). An arriving item's
unit of mass is poured continuously:

* **phase 1 (fair zone)** — while a neighbour of the item is below γ, pour only into neighbours below
  γ, raising the lowest class level among the classes that have such a neighbour (all tied classes
  together, at equal rates of level) and, inside a class, water-filling its neighbours below γ;
* **phase 2 (efficiency zone)** — water-fill all neighbours (raise the least-filled ones together)
  up to capacity 1;
* stop when the mass is used up or every neighbour is full (non-wasteful).

γ = 0 is water-filling (BALANCE); γ = 1 is EQUAL-FILLING. The continuous process is computed in
closed form: phase 1 is a capped water-filling over class levels (breakpoints h_c and h_c + w·cap_c
/ s_c), then a water-filling inside each class, then phase 2 — O(d log d) for an item of degree d.
:mod:`fair_class_matching.reference` simulates the same process event by event as the oracle.

Indivisible (:class:`ThresholdRanking`, a reconstruction): every agent draws a rank y_a ~ U[0, 1]
before any item arrives. An item with a free neighbour of rank < γ goes to the class with the lowest
level among the classes with such a neighbour, to that class's lowest-ranked such neighbour; otherwise
to its lowest-ranked free neighbour (RANKING). γ = 0 is RANKING.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fair_class_matching.instance import Instance
from papershelf.errors import InputError, check_choice, check_number

PHASE1_RULES = ("equal", "normalized", "greedy")
EPS = 1e-12


@dataclass(frozen=True)
class Assignment:
    """Where one item went: ``agents`` (int64, sorted) and the ``amounts`` (float64) each received."""

    agents: np.ndarray
    amounts: np.ndarray

    @property
    def total(self) -> float:
        """The item mass assigned (≤ 1)."""
        return float(self.amounts.sum())


class OnlineMatcher:
    """Base class: holds agents' fill levels and class levels; subclasses implement ``_assign``.

    ``arrive(neighbors, value)`` validates the item, assigns it irrevocably and returns the
    :class:`Assignment`. ``loads`` (n_agents,) and ``class_value`` (n_classes,) are read-only copies.
    """

    name = "online matcher"
    integral = False

    def __init__(self, agent_class: Sequence[int] | np.ndarray | Instance) -> None:
        if isinstance(agent_class, Instance):
            labels = agent_class.agent_class
            k = agent_class.n_classes
        else:
            labels = Instance.from_lists(agent_class, []).agent_class
            k = int(labels.max()) + 1
        self._cls: list[int] = labels.tolist()
        self._n = len(self._cls)
        self._k = k
        self._sizes: list[int] = np.bincount(labels, minlength=k).tolist()
        self._x: list[float] = [0.0] * self._n
        self._u: list[float] = [0.0] * k
        self.n_arrived = 0

    @property
    def n_agents(self) -> int:
        return self._n

    @property
    def loads(self) -> np.ndarray:
        return np.array(self._x)

    @property
    def class_value(self) -> np.ndarray:
        return np.array(self._u)

    def arrive(self, neighbors: Sequence[int] | np.ndarray, value: float = 1.0) -> Assignment:
        """Assign one arriving item (its neighbour list and value per unit) irrevocably."""
        try:
            nbrs = np.unique(np.asarray(neighbors, dtype=np.int64))
        except (TypeError, ValueError):
            raise InputError("neighbors must be a list of agent indices") from None
        if nbrs.size != len(neighbors):
            raise InputError("neighbors lists an agent twice")
        if nbrs.size and (nbrs[0] < 0 or nbrs[-1] >= self._n):
            bad = nbrs[0] if nbrs[0] < 0 else nbrs[-1]
            raise InputError(f"edge to unknown agent {int(bad)}; agents are 0..{self._n - 1}")
        value = check_number("value", value, low=0, low_open=True)
        return self._arrive(nbrs.tolist(), value)

    def _arrive(self, nbrs: list[int], value: float) -> Assignment:
        before = [self._x[a] for a in nbrs]
        self._assign(nbrs, value)
        x = self._x
        agents, amounts = [], []
        for a, old in zip(nbrs, before):
            d = x[a] - old
            if d > 0.0:
                agents.append(a)
                amounts.append(d)
                self._u[self._cls[a]] += value * d
        self.n_arrived += 1
        return Assignment(np.array(agents, dtype=np.int64), np.array(amounts, dtype=np.float64))

    def _assign(self, nbrs: list[int], value: float) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


# ---- closed-form pouring ---------------------------------------------------------------------------
def water_level(levels: list[float], cap: float, amount: float) -> float | None:
    """The level L with Σ max(0, min(L, cap) − x) = ``amount`` over ``levels`` (all < cap).

    Returns None when the levels cannot absorb ``amount`` below ``cap`` (then all rise to ``cap``).
    """
    xs = sorted(levels)
    d = len(xs)
    prefix = 0.0
    for t in range(1, d + 1):
        prefix += xs[t - 1]
        level = (amount + prefix) / t
        if t < d:
            if level <= xs[t]:
                return level
        elif level < cap:
            return level
    return None


def fill_levels(
    bases: list[float], slopes: list[float], caps: list[float], amount: float
) -> tuple[list[float], bool]:
    """Water-fill with slopes and caps: find L with Σ_i clip(s_i (L − b_i), 0, c_i) = ``amount``.

    Returns (the amount each entry receives, whether ``amount`` was used up). When the caps cannot
    absorb ``amount`` every entry receives its cap.
    """
    if sum(caps) <= amount:
        return list(caps), False
    events = []
    for i, (b, s, c) in enumerate(zip(bases, slopes, caps)):
        if c > 0.0:
            events.append((b, s, i))
            events.append((b + c / s, -s, i))
    events.sort(key=lambda e: (e[0], e[1]))
    pos = events[0][0]
    filled = 0.0
    slope = 0.0
    level = pos
    for q, ds, _ in events:
        gain = slope * (q - pos)
        if slope > 0.0 and filled + gain >= amount:
            level = pos + (amount - filled) / slope
            break
        filled += gain
        pos = q
        slope += ds
        level = q
    out = []
    for b, s, c in zip(bases, slopes, caps):
        out.append(min(max(s * (level - b), 0.0), c))
    return out, True


def _pour(x: list[float], agents: list[int], cap: float, amount: float) -> bool:
    """Water-fill ``amount`` into ``agents`` (levels < cap) up to ``cap``; True if all of it fit."""
    level = water_level([x[a] for a in agents], cap, amount)
    if level is None:
        for a in agents:
            x[a] = cap
        return False
    for a in agents:
        if x[a] < level:
            x[a] = min(level, cap)
    return True


class ThresholdMatcher(OnlineMatcher):
    """The divisible γ-threshold algorithm ALG_γ (see the module docstring).

    ``phase1`` picks how phase 1 splits mass among neighbours below γ: ``"equal"`` (default: raise the
    lowest class value u_c, as EQUAL-FILLING does), ``"normalized"`` (the lowest u_c / |c|) or
    ``"greedy"`` (the lowest-index neighbour below γ first — not class-fair; the USW guarantee does not
    depend on the phase-1 rule, which the tests check).
    """

    def __init__(
        self, agent_class: Sequence[int] | np.ndarray | Instance, gamma: float, *, phase1: str = "equal"
    ) -> None:
        self.gamma = check_number("gamma", gamma, low=0, high=1)
        self.phase1 = check_choice("phase1", phase1, PHASE1_RULES)
        super().__init__(agent_class)
        self.name = f"threshold(γ={self.gamma:g})" + ("" if phase1 == "equal" else f"[{phase1}]")
        self._norm = [float(s) for s in self._sizes] if phase1 == "normalized" else [1.0] * self._k

    def _assign(self, nbrs: list[int], value: float) -> None:
        x, g = self._x, self.gamma
        remaining = 1.0
        if g > 0.0:
            low = [a for a in nbrs if x[a] < g]
            if low:
                if self.phase1 == "greedy":
                    for a in low:
                        room = g - x[a]
                        if room >= remaining:
                            x[a] += remaining
                            remaining = 0.0
                            break
                        x[a] = g
                        remaining -= room
                else:
                    remaining = self._phase1_classes(low, value, remaining)
        if remaining > 0.0:
            free = [a for a in nbrs if x[a] < 1.0]
            if free:
                _pour(x, free, 1.0, remaining)

    def _phase1_classes(self, low: list[int], value: float, remaining: float) -> float:
        x, g, cls = self._x, self.gamma, self._cls
        groups: dict[int, list[int]] = {}
        for a in low:
            groups.setdefault(cls[a], []).append(a)
        classes = list(groups)
        caps = [sum(g - x[a] for a in groups[c]) for c in classes]
        bases = [self._u[c] / self._norm[c] for c in classes]
        slopes = [self._norm[c] / value for c in classes]  # mass per unit of class level
        masses, used_up = fill_levels(bases, slopes, caps, remaining)
        for c, m, cap in zip(classes, masses, caps):
            if m <= 0.0:
                continue
            if m >= cap:
                for a in groups[c]:
                    x[a] = g
            else:
                _pour(x, groups[c], g, m)
        return 0.0 if used_up else max(remaining - sum(caps), 0.0)


class ThresholdRanking(OnlineMatcher):
    """The randomized indivisible γ-threshold algorithm (reconstruction; see the module docstring).

    Ranks y_a ~ U[0, 1] are drawn from ``seed`` when the matcher is built, before any item arrives.
    """

    integral = True

    def __init__(
        self,
        agent_class: Sequence[int] | np.ndarray | Instance,
        gamma: float,
        *,
        seed: int | np.random.Generator | None = 0,
        phase1: str = "equal",
    ) -> None:
        self.gamma = check_number("gamma", gamma, low=0, high=1)
        self.phase1 = check_choice("phase1", phase1, ("equal", "normalized"))
        super().__init__(agent_class)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.ranks: list[float] = rng.random(self._n).tolist()
        self.name = f"threshold-ranking(γ={self.gamma:g})"
        self._norm = [float(s) for s in self._sizes] if phase1 == "normalized" else [1.0] * self._k

    def _assign(self, nbrs: list[int], value: float) -> None:
        x, y, g, cls = self._x, self.ranks, self.gamma, self._cls
        free = [a for a in nbrs if x[a] == 0.0]
        if not free:
            return
        low = [a for a in free if y[a] < g]
        if low:
            # the lowest class level; among tied classes the one holding the lowest rank
            best = min(low, key=lambda a: (self._u[cls[a]] / self._norm[cls[a]], y[a]))
        else:
            best = min(free, key=lambda a: y[a])
        x[best] = 1.0


# ---- running an instance ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Audit:
    """Per-arrival checks: loads ≤ 1, item mass ≤ 1, only edges used, non-wastefulness."""

    arrivals: int
    violations: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass(frozen=True)
class Allocation:
    """The outcome of an online run: item t gave ``amounts[indptr[t]:indptr[t+1]]`` to those ``agents``."""

    instance: Instance
    algorithm: str
    indptr: np.ndarray
    agents: np.ndarray
    amounts: np.ndarray
    loads: np.ndarray
    audit: Audit | None = None

    @property
    def integral(self) -> bool:
        return bool(np.all((self.amounts == 0.0) | (self.amounts == 1.0)))

    def item_mass(self) -> np.ndarray:
        """(n_items,) mass of each item that was assigned."""
        m = self.instance.n_items
        rows = np.repeat(np.arange(m), np.diff(self.indptr))
        return np.bincount(rows, weights=self.amounts, minlength=m)

    def class_mass(self) -> np.ndarray:
        """(n_items, n_classes): Y[t, c] = mass of item t held by class c (the classes' bundles)."""
        inst = self.instance
        y = np.zeros((inst.n_items, inst.n_classes))
        rows = np.repeat(np.arange(inst.n_items), np.diff(self.indptr))
        np.add.at(y, (rows, inst.agent_class[self.agents]), self.amounts)
        return y

    def usw(self) -> float:
        """Utilitarian social welfare: Σ_t value_t · (mass of item t assigned)."""
        return float(self.item_mass() @ self.instance.values)

    def assignment(self, t: int) -> Assignment:
        lo, hi = self.indptr[t], self.indptr[t + 1]
        return Assignment(self.agents[lo:hi], self.amounts[lo:hi])


def run_online(
    instance: Instance, matcher: OnlineMatcher, *, audit: bool = False, tol: float = 1e-9
) -> Allocation:
    """Feed ``instance``'s items to ``matcher`` one at a time, in order; optionally audit every arrival."""
    if matcher.n_agents != instance.n_agents:
        raise InputError(f"the matcher has {matcher.n_agents} agents, the instance {instance.n_agents}")
    if matcher.n_arrived:
        raise InputError("the matcher has already seen items; build a fresh one for each run")
    indptr = [0]
    agents: list[np.ndarray] = []
    amounts: list[np.ndarray] = []
    violations: list[str] = []
    for t, (nbrs, value) in enumerate(zip(instance.items, instance.values.tolist())):
        res = matcher._arrive(nbrs.tolist(), value)
        agents.append(res.agents)
        amounts.append(res.amounts)
        indptr.append(indptr[-1] + res.agents.size)
        if audit and len(violations) < 20:
            violations.extend(_audit_arrival(t, nbrs, res, matcher._x, matcher.integral, tol))
    cat_a = np.concatenate(agents) if agents else np.zeros(0, dtype=np.int64)
    cat_m = np.concatenate(amounts) if amounts else np.zeros(0)
    return Allocation(
        instance,
        matcher.name,
        np.array(indptr, dtype=np.int64),
        cat_a.astype(np.int64),
        cat_m.astype(np.float64),
        matcher.loads,
        Audit(instance.n_items, tuple(violations)) if audit else None,
    )


def _audit_arrival(
    t: int, nbrs: np.ndarray, res: Assignment, x: list[float], integral: bool, tol: float
) -> list[str]:
    out = []
    if res.agents.size and not np.isin(res.agents, nbrs).all():
        out.append(f"item {t}: assigned to a non-neighbour")
    if (res.amounts < 0).any():
        out.append(f"item {t}: negative amount")
    total = res.total
    if total > 1.0 + tol:
        out.append(f"item {t}: assigned mass {total:.12g} > 1")
    over = [a for a in nbrs.tolist() if x[a] > 1.0 + tol]
    if over:
        out.append(f"item {t}: agent {over[0]} load {x[over[0]]:.12g} > 1")
    if integral:
        if res.agents.size > 1 or (res.agents.size == 1 and res.amounts[0] != 1.0):
            out.append(f"item {t}: split by an indivisible matcher")
        if res.agents.size == 0 and any(x[a] == 0.0 for a in nbrs.tolist()):
            out.append(f"item {t}: wasted although a neighbour was free")
    elif total < 1.0 - tol and any(x[a] < 1.0 - tol for a in nbrs.tolist()):
        out.append(f"item {t}: {1 - total:.3g} of its mass wasted although a neighbour had room")
    return out


def threshold_divisible(
    instance: Instance, gamma: float, *, phase1: str = "equal", audit: bool = False
) -> Allocation:
    """Run the divisible γ-threshold algorithm on ``instance`` online (items in order)."""
    return run_online(instance, ThresholdMatcher(instance, gamma, phase1=phase1), audit=audit)


def threshold_indivisible(
    instance: Instance, gamma: float, *, seed: int | np.random.Generator | None = 0, audit: bool = False
) -> Allocation:
    """Run the randomized indivisible γ-threshold algorithm on ``instance`` online (items in order)."""
    return run_online(instance, ThresholdRanking(instance, gamma, seed=seed), audit=audit)
