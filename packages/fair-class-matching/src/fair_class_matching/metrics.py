"""Fairness and efficiency of an allocation: class values, class envy-freeness, welfare, offline optimum.

* Class c's bundle X_c gives item t the mass Y[t, c] that class c's agents hold of it.
* v_i(X_j), the value class i could extract from class j's bundle, is the maximum (fractional)
  matching between class i's agents (capacity 1 each) and X_j's items (capacity Y[t, j] each), weighted
  by the items' values. It is a max-flow (source → item t, capacity Y[t, j]; item → class-i neighbour;
  agent → sink, capacity 1). With item values it is a polymatroid greedy: Σ_ℓ (w_ℓ − w_{ℓ+1})
  F(items of value ≥ w_ℓ) over the distinct values w_1 > w_2 > …, one max-flow per level.
* α-CEF holds when v_i(X_i) ≥ α v_i(X_j) for all classes i ≠ j; the measured CEF of an allocation is
  min_{i≠j, v_i(X_j)>0} v_i(X_i) / v_i(X_j) (1 when no class can extract anything from another).
* USW = Σ_t value_t · (mass of item t matched); OPT is the offline maximum (value-weighted) matching —
  integral, so SciPy's integer max-flow computes it exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fair_class_matching.flow import dinic_max_flow, scipy_max_flow
from fair_class_matching.instance import Instance
from fair_class_matching.matching import Allocation
from papershelf.errors import check_choice

METHODS = ("maxflow", "lp")


def _bundle_flow(
    instance: Instance, cls: int, masses: np.ndarray, items: np.ndarray, *, integral: bool
) -> float:
    """Max flow from the given items (capacities ``masses``) into class ``cls``'s agents."""
    agent_class = instance.agent_class
    agent_node: dict[int, int] = {}
    tails: list[int] = []
    heads: list[int] = []
    caps: list[float] = []
    n_items = len(items)
    # nodes: 0 source, 1..n_items items, then agents, then sink (numbered at the end)
    for pos, (t, y) in enumerate(zip(items.tolist(), masses.tolist())):
        nbrs = instance.items[t]
        mine = nbrs[agent_class[nbrs] == cls]
        if mine.size == 0:
            continue
        tails.append(0)
        heads.append(pos + 1)
        caps.append(y)
        for a in mine.tolist():
            node = agent_node.setdefault(a, n_items + 1 + len(agent_node))
            tails.append(pos + 1)
            heads.append(node)
            caps.append(1.0)
    if not agent_node:
        return 0.0
    sink = n_items + 1 + len(agent_node)
    for node in agent_node.values():
        tails.append(node)
        heads.append(sink)
        caps.append(1.0)
    if integral:
        return float(scipy_max_flow(sink + 1, tails, heads, [round(c) for c in caps], 0, sink))
    return dinic_max_flow(sink + 1, tails, heads, caps, 0, sink)


def bundle_value(
    instance: Instance, cls: int, masses: np.ndarray, *, method: str = "maxflow", tol: float = 1e-12
) -> float:
    """v_cls(X) for a bundle X giving item t the mass ``masses[t]`` (shape (n_items,))."""
    check_choice("method", method, METHODS)
    masses = np.asarray(masses, dtype=np.float64)
    if method == "lp":
        from fair_class_matching.reference import bundle_value_lp

        return bundle_value_lp(instance, cls, masses)
    held = np.flatnonzero(masses > tol)
    if held.size == 0:
        return 0.0
    integral = bool(np.all(np.abs(masses[held] - 1.0) <= tol))
    values = instance.values[held]
    levels = np.unique(values)[::-1]
    total = 0.0
    for i, w in enumerate(levels):
        nxt = levels[i + 1] if i + 1 < levels.size else 0.0
        keep = values >= w
        flow = _bundle_flow(instance, cls, masses[held][keep], held[keep], integral=integral)
        total += (w - nxt) * flow
    return total


def class_values(allocation: Allocation, *, method: str = "maxflow") -> np.ndarray:
    """(n_classes, n_classes) matrix V with V[i, j] = v_i(X_j); the diagonal is each class's own value."""
    check_choice("method", method, METHODS)
    inst = allocation.instance
    y = allocation.class_mass()
    k = inst.n_classes
    out = np.zeros((k, k))
    for j in range(k):
        for i in range(k):
            if i == j:
                out[i, i] = float(y[:, i] @ inst.values)
            else:
                out[i, j] = bundle_value(inst, i, y[:, j], method=method)
    return out


def cef_from_values(values: np.ndarray, tol: float = 1e-12) -> float:
    """min_{i≠j, V[i,j]>0} V[i,i] / V[i,j], capped at 1; 1 when there is no envy to measure."""
    k = values.shape[0]
    best = 1.0
    for i in range(k):
        for j in range(k):
            if i != j and values[i, j] > tol:
                best = min(best, values[i, i] / values[i, j])
    return float(best)


def cef(allocation: Allocation, *, method: str = "maxflow") -> float:
    """The largest α for which ``allocation`` is α-CEF (capped at 1)."""
    return cef_from_values(class_values(allocation, method=method))


def ex_ante_cef(allocations: Sequence[Allocation], *, method: str = "maxflow") -> tuple[float, float]:
    """(ex-ante CEF, mean per-run CEF) of a randomized algorithm's runs on one instance.

    Ex ante: min_{i≠j} E[v_i(X_i)] / E[v_i(X_j)] with expectations estimated by the mean over runs —
    the notion a randomized α-CEF guarantee is stated in. The mean per-run CEF is reported beside it.
    """
    mats = [class_values(a, method=method) for a in allocations]
    mean = np.mean(mats, axis=0)
    return cef_from_values(mean), float(np.mean([cef_from_values(m) for m in mats]))


def usw(allocation: Allocation) -> float:
    """Utilitarian social welfare of the allocation."""
    return allocation.usw()


def offline_opt(instance: Instance, *, method: str = "maxflow") -> float:
    """The offline optimum: a maximum value-weighted matching of all items (integral; by max-flow)."""
    check_choice("method", method, METHODS)
    if method == "lp":
        from fair_class_matching.reference import offline_opt_lp

        return offline_opt_lp(instance)
    m, n = instance.n_items, instance.n_agents
    values = instance.values
    levels = np.unique(values)[::-1]
    total = 0.0
    for i, w in enumerate(levels):
        nxt = levels[i + 1] if i + 1 < levels.size else 0.0
        items = np.flatnonzero(values >= w)
        tails, heads = [], []
        for pos, t in enumerate(items.tolist()):
            nbrs = instance.items[t]
            if nbrs.size == 0:
                continue
            tails.append(0)
            heads.append(pos + 1)
            tails.extend([pos + 1] * nbrs.size)
            heads.extend((m + 1 + nbrs).tolist())
        tails.extend(range(m + 1, m + n + 1))
        heads.extend([m + n + 1] * n)
        flow = scipy_max_flow(m + n + 2, tails, heads, [1] * len(tails), 0, m + n + 1)
        total += (w - nxt) * flow
    return float(total)


def usw_ratio(allocation: Allocation, opt: float | None = None) -> float:
    """USW / OPT (1 when OPT = 0)."""
    opt = offline_opt(allocation.instance) if opt is None else opt
    return 1.0 if opt <= 0 else allocation.usw() / opt


def evaluate(allocation: Allocation, *, opt: float | None = None, method: str = "maxflow") -> dict:
    """CEF, USW, OPT, USW/OPT and the class-value matrix of one allocation."""
    opt = offline_opt(allocation.instance) if opt is None else opt
    values = class_values(allocation, method=method)
    out = {
        "algorithm": allocation.algorithm,
        "cef": cef_from_values(values),
        "usw": allocation.usw(),
        "opt": opt,
        "usw_ratio": 1.0 if opt <= 0 else allocation.usw() / opt,
        "class_values": values.tolist(),
    }
    if allocation.audit is not None:
        out["non_wasteful"] = allocation.audit.ok
        out["audit_violations"] = list(allocation.audit.violations)
    return out
