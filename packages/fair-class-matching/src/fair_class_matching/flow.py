"""Maximum flow: Dinic's algorithm on real capacities, and SciPy's integer max-flow for integral ones.

``scipy.sparse.csgraph.maximum_flow`` only takes integer capacities, which is exact for the offline
optimum and for indivisible bundles; the bundles of a divisible allocation carry real masses, so they
go through :func:`dinic_max_flow` (float64, residual capacities below ``tol`` count as saturated).
"""

from __future__ import annotations

from collections import deque

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow


def dinic_max_flow(
    n_nodes: int,
    tails: list[int],
    heads: list[int],
    caps: list[float],
    source: int,
    sink: int,
    tol: float = 1e-12,
) -> float:
    """Value of a maximum ``source``→``sink`` flow in a graph with real capacities (Dinic)."""
    head: list[int] = []
    cap: list[float] = []
    adj: list[list[int]] = [[] for _ in range(n_nodes)]
    for u, v, c in zip(tails, heads, caps):
        adj[u].append(len(head))
        head.append(v)
        cap.append(float(c))
        adj[v].append(len(head))
        head.append(u)
        cap.append(0.0)
    total = 0.0
    while True:
        level = [-1] * n_nodes
        level[source] = 0
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for e in adj[u]:
                v = head[e]
                if level[v] < 0 and cap[e] > tol:
                    level[v] = level[u] + 1
                    queue.append(v)
        if level[sink] < 0:
            return total
        it = [0] * n_nodes
        while True:  # one blocking flow, augmenting along level-increasing paths (iterative DFS)
            path: list[int] = []
            u = source
            while u != sink:
                edges = adj[u]
                while it[u] < len(edges):
                    e = edges[it[u]]
                    if cap[e] > tol and level[head[e]] == level[u] + 1:
                        break
                    it[u] += 1
                if it[u] < len(edges):
                    e = edges[it[u]]
                    path.append(e)
                    u = head[e]
                    continue
                if u == source:
                    break
                level[u] = -1  # dead end in this phase
                e = path.pop()
                u = head[e ^ 1]
                it[u] += 1
            if u != sink:
                break
            pushed = min(cap[e] for e in path)
            for e in path:
                cap[e] -= pushed
                cap[e ^ 1] += pushed
            total += pushed


def scipy_max_flow(
    n_nodes: int, tails: list[int], heads: list[int], caps: list[int], source: int, sink: int
) -> int:
    """Value of a maximum flow with integer capacities, by ``scipy.sparse.csgraph.maximum_flow``."""
    if not tails:
        return 0
    graph = csr_matrix(
        (np.asarray(caps, dtype=np.int32), (np.asarray(tails), np.asarray(heads))), shape=(n_nodes, n_nodes)
    )
    return int(maximum_flow(graph, source, sink).flow_value)
