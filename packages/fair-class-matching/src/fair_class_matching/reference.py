"""Slow, obviously-correct versions: the continuous pouring simulated event by event, and LPs.

* :func:`reference_threshold` pours each item's unit of mass as the paper describes it — at every
  instant the receiving agents are named by the rule, each gets mass at its rate, and time advances to
  the next event (an agent reaches the next level or its cap, a class reaches the next class level,
  the mass runs out). It shares no code with :mod:`fair_class_matching.matching`, whose closed form
  it checks. O(d (d + k)) work per item of degree d.
* :func:`reference_threshold_ranking` is the indivisible rule as a plain loop over agents.
* :func:`bundle_value_lp` and :func:`offline_opt_lp` are the linear programs behind the class values
  and the offline optimum (SciPy's HiGHS), which the max-flow answers are checked against.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from fair_class_matching.instance import Instance

TIE = 1e-12


def _water_step(x: list[float], agents: list[int], cap: float, rate_total: float) -> tuple[list[int], float]:
    """Receivers (the least-filled of ``agents`` below cap) and the time until one of them meets the
    next level or the cap, when ``rate_total`` mass per unit time is split equally among them."""
    open_ = [a for a in agents if x[a] < cap - TIE]
    low = min(x[a] for a in open_)
    receivers = [a for a in open_ if x[a] <= low + TIE]
    higher = [x[a] for a in open_ if x[a] > low + TIE]
    target = min([*higher, cap])
    per_agent = rate_total / len(receivers)
    return receivers, (target - low) / per_agent


def reference_arrival(
    x: list[float],
    u: list[float],
    agent_class: list[int],
    norm: list[float],
    nbrs: list[int],
    value: float,
    gamma: float,
    phase1: str = "equal",
) -> list[float]:
    """Pour one item (mass 1) into ``nbrs``, updating levels ``x`` and class values ``u`` in place.

    Returns the amount each neighbour received.
    """
    before = [x[a] for a in nbrs]
    remaining = 1.0
    # phase 1: only neighbours below gamma
    while remaining > TIE:
        eligible = [a for a in nbrs if x[a] < gamma - TIE]
        if not eligible:
            break
        if phase1 == "greedy":
            a = min(eligible)
            got = min(gamma - x[a], remaining)
            x[a] = gamma if got == gamma - x[a] else x[a] + got
            u[agent_class[a]] += value * got
            remaining -= got
            continue
        classes = sorted({agent_class[a] for a in eligible})
        level = {c: u[c] / norm[c] for c in classes}
        lowest = min(level.values())
        tied = [c for c in classes if level[c] <= lowest + TIE]
        others = [level[c] for c in classes if level[c] > lowest + TIE]
        # each tied class's level rises at rate 1 (time unit), i.e. it takes norm_c / value mass per unit
        mass_rate = {c: norm[c] / value for c in tied}
        dt = remaining / sum(mass_rate.values())
        if others:
            dt = min(dt, min(others) - lowest)
        plans = {}
        for c in tied:
            members = [a for a in eligible if agent_class[a] == c]
            receivers, t_event = _water_step(x, members, gamma, mass_rate[c])
            plans[c] = receivers
            dt = min(dt, t_event)
        for c in tied:
            each = mass_rate[c] * dt / len(plans[c])
            for a in plans[c]:
                x[a] = min(x[a] + each, gamma)
            u[c] += value * mass_rate[c] * dt
            remaining -= mass_rate[c] * dt
    # phase 2: water-filling over all neighbours up to capacity 1
    while remaining > TIE:
        free = [a for a in nbrs if x[a] < 1.0 - TIE]
        if not free:
            break
        receivers, t_event = _water_step(x, free, 1.0, 1.0)
        dt = min(remaining, t_event)
        for a in receivers:
            x[a] = min(x[a] + dt / len(receivers), 1.0)
            u[agent_class[a]] += value * dt / len(receivers)
        remaining -= dt
    return [x[a] - b for a, b in zip(nbrs, before)]


def reference_assignments(instance: Instance, gamma: float, *, phase1: str = "equal") -> list[np.ndarray]:
    """Per item, the amounts its neighbours received (aligned with ``instance.items[t]``)."""
    agent_class = instance.agent_class.tolist()
    sizes = instance.class_sizes.tolist()
    norm = [float(s) for s in sizes] if phase1 == "normalized" else [1.0] * instance.n_classes
    x = [0.0] * instance.n_agents
    u = [0.0] * instance.n_classes
    return [
        np.array(reference_arrival(x, u, agent_class, norm, nbrs.tolist(), value, gamma, phase1))
        for nbrs, value in zip(instance.items, instance.values.tolist())
    ]


def reference_threshold(instance: Instance, gamma: float, *, phase1: str = "equal") -> np.ndarray:
    """The divisible γ-threshold allocation as a dense (n_items, n_agents) matrix, by event simulation.

    γ = 0 is water-filling and γ = 1 is EQUAL-FILLING under the same simulation.
    """
    out = np.zeros((instance.n_items, instance.n_agents))
    for t, got in enumerate(reference_assignments(instance, gamma, phase1=phase1)):
        out[t, instance.items[t]] = got
    return out


def reference_threshold_ranking(instance: Instance, gamma: float, ranks: np.ndarray) -> np.ndarray:
    """The indivisible γ-threshold rule with the given agent ranks, as an (n_items,) array of agents (-1)."""
    matched = np.zeros(instance.n_agents, dtype=bool)
    class_value = np.zeros(instance.n_classes)
    out = np.full(instance.n_items, -1)
    for t, nbrs in enumerate(instance.items):
        best = None
        for a in nbrs:
            if matched[a]:
                continue
            key = (
                (0, class_value[instance.agent_class[a]], ranks[a])
                if ranks[a] < gamma
                else (1, 0.0, ranks[a])
            )
            if best is None or key < best[0]:
                best = (key, a)
        if best is not None:
            a = best[1]
            matched[a] = True
            class_value[instance.agent_class[a]] += instance.values[t]
            out[t] = a
    return out


def _matching_lp(instance: Instance, items: np.ndarray, caps: np.ndarray, agents_ok: np.ndarray) -> float:
    """max Σ_{(t,a)} w_t f_ta s.t. Σ_a f_ta ≤ caps_t, Σ_t f_ta ≤ 1, f ≥ 0, over edges to ``agents_ok``."""
    rows_t, cols_a = [], []
    for pos, t in enumerate(items.tolist()):
        nbrs = instance.items[t]
        nbrs = nbrs[agents_ok[nbrs]]
        rows_t.extend([pos] * nbrs.size)
        cols_a.extend(nbrs.tolist())
    n_edges = len(rows_t)
    if n_edges == 0:
        return 0.0
    rows_t = np.asarray(rows_t)
    cols_a = np.asarray(cols_a)
    agents, agent_row = np.unique(cols_a, return_inverse=True)
    e = np.arange(n_edges)
    a_ub = coo_matrix(
        (np.ones(2 * n_edges), (np.concatenate([rows_t, items.size + agent_row]), np.concatenate([e, e]))),
        shape=(items.size + agents.size, n_edges),
    ).tocsr()
    b_ub = np.concatenate([caps, np.ones(agents.size)])
    cost = -instance.values[items][rows_t]
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if res.status != 0:  # pragma: no cover - a bounded feasible LP
        raise RuntimeError(f"linprog failed: {res.message}")
    return float(-res.fun)


def bundle_value_lp(instance: Instance, cls: int, masses: np.ndarray) -> float:
    """v_cls(X) for the bundle with item masses ``masses``, as a linear program."""
    items = np.flatnonzero(masses > 0)
    return _matching_lp(instance, items, masses[items], instance.agent_class == cls)


def offline_opt_lp(instance: Instance) -> float:
    """The offline optimum as the (integral) bipartite matching LP."""
    items = np.arange(instance.n_items)
    return _matching_lp(instance, items, np.ones(instance.n_items), np.ones(instance.n_agents, dtype=bool))
