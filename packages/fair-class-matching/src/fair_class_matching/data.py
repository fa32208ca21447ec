"""Instance generators (numpy only, seeded): the adversarial and random families of the experiments.

* :func:`upper_triangular` — the classic worst case of water-filling: item t has edges to agents
  t, t+1, …, n−1, so the offline optimum is perfect (item t → agent t) while water-filling matches
  only ≈ (1 − 1/e) n. Classes partition the agents ``"interleaved"`` (a mod k), in contiguous
  ``"blocks"`` (early agents in class 0), ``"reversed"`` blocks (early agents in the last class) or
  ``"random"``ly.
* :func:`random_gnp` — G(n, m, p) bipartite graphs with imbalanced classes (sizes ∝ ``imbalance``^c).
* :func:`block_classes` — each item has a home class: edges to it with probability ``p_in``, to the
  other classes with ``p_out``.
* :func:`ride_sharing` — drivers (agents) in a unit-square city, classes = regions with unequal
  densities; riders (items) arrive around a hot spot that drifts across the city and can be served by
  drivers within ``radius``; optional fare values ∝ 1 + trip length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fair_class_matching.instance import Instance
from papershelf.errors import InputError, check_choice, check_int, check_number

PARTITIONS = ("interleaved", "blocks", "reversed", "random")
FAMILIES = ("upper-triangular", "gnp", "block", "ride-sharing")


def _partition(n: int, k: int, how: str, rng: np.random.Generator) -> np.ndarray:
    check_choice("partition", how, PARTITIONS)
    if how == "interleaved":
        return np.arange(n) % k
    blocks = np.minimum(np.arange(n) * k // n, k - 1)
    if how == "blocks":
        return blocks
    if how == "reversed":
        return k - 1 - blocks
    labels = np.arange(n) % k
    return rng.permutation(labels)


def upper_triangular(n: int, k: int = 2, *, partition: str = "blocks", seed: int = 0) -> Instance:
    """n agents, n items; item t has edges to agents t..n−1; k classes partitioned as ``partition``."""
    n = check_int("n", n, low=1)
    k = check_int("k", k, low=1, high=n)
    rng = np.random.default_rng(seed)
    labels = _partition(n, k, partition, rng)
    items = [np.arange(t, n) for t in range(n)]
    return Instance.from_lists(labels, items, name=f"upper-triangular(n={n},k={k},{partition})")


def _class_sizes(n: int, k: int, imbalance: float) -> np.ndarray:
    weights = imbalance ** np.arange(k, dtype=float)
    sizes = np.maximum(1, np.floor(n * weights / weights.sum())).astype(int)
    sizes[0] += n - sizes.sum()
    if sizes[0] < 1:
        raise InputError(f"cannot split {n} agents into {k} non-empty classes with imbalance {imbalance}")
    return sizes


def random_gnp(
    n_agents: int,
    n_items: int | None = None,
    p: float = 0.1,
    *,
    k: int = 3,
    imbalance: float = 0.4,
    seed: int = 0,
) -> Instance:
    """Random bipartite graph: every (item, agent) edge with probability ``p``; class c has a share of
    the agents ∝ ``imbalance``^c (class 0 largest)."""
    n_agents = check_int("n_agents", n_agents, low=1)
    n_items = n_agents if n_items is None else check_int("n_items", n_items, low=0)
    p = check_number("p", p, low=0, high=1)
    k = check_int("k", k, low=1, high=n_agents)
    imbalance = check_number("imbalance", imbalance, low=0, high=1, low_open=True)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(k), _class_sizes(n_agents, k, imbalance)))
    adj = rng.random((n_items, n_agents)) < p
    items = [np.flatnonzero(row) for row in adj]
    return Instance.from_lists(labels, items, name=f"gnp(n={n_agents},m={n_items},p={p:g},k={k})")


def block_classes(
    k: int = 3,
    agents_per_class: int = 10,
    n_items: int | None = None,
    *,
    p_in: float = 0.3,
    p_out: float = 0.05,
    skew: float = 2.0,
    seed: int = 0,
) -> Instance:
    """k classes of ``agents_per_class`` agents; items pick a home class (class c with weight
    ``skew``^-c) and connect to home agents with probability ``p_in``, to others with ``p_out``."""
    k = check_int("k", k, low=1)
    per = check_int("agents_per_class", agents_per_class, low=1)
    n = k * per
    n_items = n if n_items is None else check_int("n_items", n_items, low=0)
    p_in = check_number("p_in", p_in, low=0, high=1)
    p_out = check_number("p_out", p_out, low=0, high=1)
    skew = check_number("skew", skew, low=1)
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(k), per)
    weights = skew ** -np.arange(k, dtype=float)
    home = rng.choice(k, size=n_items, p=weights / weights.sum())
    prob = np.where(labels[None, :] == home[:, None], p_in, p_out)
    adj = rng.random((n_items, n)) < prob
    items = [np.flatnonzero(row) for row in adj]
    return Instance.from_lists(labels, items, name=f"block(k={k},per={per},m={n_items})")


def ride_sharing(
    n_drivers: int = 40,
    n_riders: int | None = None,
    *,
    k: int = 3,
    radius: float = 0.2,
    fares: bool = False,
    seed: int = 0,
) -> Instance:
    """A ride-sharing-like geometric instance.

    The city is the unit square cut into k vertical strips (the classes); drivers are placed with
    density ∝ 1/(c+1) in strip c (so outer districts are poorer in drivers); riders arrive around a hot
    spot that drifts from left to right over time (plus 30% uniform background) and can be served by
    the drivers within ``radius``. With ``fares`` an item's value is 1 + its trip length.
    """
    n = check_int("n_drivers", n_drivers, low=k)
    m = n if n_riders is None else check_int("n_riders", n_riders, low=0)
    k = check_int("k", k, low=1)
    radius = check_number("radius", radius, low=0, low_open=True)
    rng = np.random.default_rng(seed)
    weights = 1.0 / (np.arange(k) + 1.0)
    sizes = (
        _class_sizes(n, k, 1.0)
        if k == 1
        else np.maximum(1, np.round(n * weights / weights.sum())).astype(int)
    )
    sizes[0] += n - sizes.sum()
    labels = np.repeat(np.arange(k), sizes)
    xs = (labels + rng.random(n)) / k
    ys = rng.random(n)
    drivers = np.stack([xs, ys], axis=1)
    time = np.arange(m) / max(m - 1, 1)
    centre = np.stack([0.1 + 0.8 * time, 0.5 + 0.3 * np.sin(2 * np.pi * time)], axis=1)
    riders = np.clip(centre + 0.12 * rng.standard_normal((m, 2)), 0, 1)
    background = rng.random(m) < 0.3
    riders[background] = rng.random((int(background.sum()), 2))
    dist = np.linalg.norm(riders[:, None, :] - drivers[None, :, :], axis=2)
    items = [np.flatnonzero(row <= radius) for row in dist]
    values = None
    if fares:
        trip = rng.exponential(0.3, size=m)
        values = np.round(1.0 + trip, 2)
    return Instance.from_lists(labels, items, values, name=f"ride-sharing(n={n},m={m},k={k})")


def family(name: str, size: int, *, seed: int = 0, **options: Any) -> Instance:
    """One instance of a named family at a given size (the sweep and reproduce families)."""
    check_choice("family", name, FAMILIES)
    size = check_int("size", size, low=2)
    rng = np.random.default_rng(seed)
    if name == "upper-triangular":
        k = options.get("k", int(rng.integers(2, 5)))
        partition = options.get("partition", PARTITIONS[int(rng.integers(len(PARTITIONS)))])
        return upper_triangular(size, min(k, size), partition=partition, seed=seed)
    if name == "gnp":
        p = options.get("p", float(rng.uniform(1.5, 4.0)) / size)
        k = options.get("k", int(rng.integers(2, 5)))
        return random_gnp(
            size, size, min(p, 1.0), k=min(k, size), imbalance=float(rng.uniform(0.2, 0.8)), seed=seed
        )
    if name == "block":
        k = options.get("k", int(rng.integers(2, 5)))
        per = max(1, size // k)
        return block_classes(k, per, k * per, p_in=min(1.0, 3.0 / per), p_out=min(1.0, 0.5 / per), seed=seed)
    k = options.get("k", int(rng.integers(2, 5)))
    return ride_sharing(max(size, k), size, k=k, radius=options.get("radius", 0.15), seed=seed)
