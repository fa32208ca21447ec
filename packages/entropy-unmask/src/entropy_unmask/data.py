"""Target distributions with known joints: random codes, templates, sparse Markov chains, HMMs, copy,
mixtures and products. Each is a :class:`Joint`: the distinct sequences of positive probability
(``support``, (n, L) int64) and their probabilities (``probs``, (n,) float64).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from papershelf.errors import InputError, check_int, check_number

MAX_TABLE = 2**22  # dense joint tables with more cells than this are refused
# sequences are indexed by mixed-radix int64 codes (sum of x_i V^i < V^L) in the oracle and the exact
# engines; above this many sequences the codes would wrap around and merge different contexts
MAX_SEQUENCES = 2**62


def check_space(L: int, V: int) -> None:
    """Refuse a sequence space V^L too large for the int64 codes of the oracle and the exact engines."""
    if V**L > MAX_SEQUENCES:
        raise InputError(
            f"V^L = {V}^{L} = {V**L:,} sequences is more than 2^62 = {MAX_SEQUENCES:,}: "
            "the int64 sequence codes of the oracle and the exact engines would overflow",
            hint="use a smaller V or L",
        )


def check_joint(support: Any, probs: Any, V: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate a support list and its probabilities; returns (int64 (n, L), float64 (n,))."""
    V = check_int("V", V, low=1)
    s = np.asarray(support)
    if s.ndim != 2 or s.shape[0] == 0 or s.shape[1] == 0:
        raise InputError(f"support must be a non-empty (n, L) array, got shape {s.shape}")
    if not np.issubdtype(s.dtype, np.integer):
        raise InputError(f"support must hold integer token ids, got dtype {s.dtype}")
    s = s.astype(np.int64)
    if s.min() < 0 or s.max() >= V:
        raise InputError(f"support tokens must lie in [0, {V}), got [{s.min()}, {s.max()}]")
    check_space(s.shape[1], V)
    p = np.asarray(probs, dtype=np.float64)
    if p.shape != (s.shape[0],):
        raise InputError(f"probs must have shape ({s.shape[0]},), got {p.shape}")
    if not np.isfinite(p).all() or p.min() < 0:
        raise InputError("probs must be finite and non-negative")
    if abs(p.sum() - 1.0) > 1e-9:
        raise InputError(f"probs must sum to 1, got {p.sum():.12g}")
    if np.unique(s, axis=0).shape[0] != s.shape[0]:
        raise InputError("support rows must be distinct")
    keep = p > 0
    return s[keep], p[keep] / p[keep].sum()


@dataclass
class Joint:
    """An explicit distribution over V^L given by its support and probabilities."""

    support: np.ndarray
    probs: np.ndarray
    V: int
    name: str = "joint"
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.support, self.probs = check_joint(self.support, self.probs, self.V)

    @property
    def L(self) -> int:
        return int(self.support.shape[1])

    @property
    def n(self) -> int:
        return int(self.support.shape[0])

    @property
    def entropy(self) -> float:
        """H(X_0) in nats."""
        return float(-(self.probs * np.log(self.probs)).sum())

    @property
    def entropy_fraction(self) -> float:
        """H(X_0) / (L log V), the fraction of the maximal entropy."""
        return self.entropy / (self.L * np.log(self.V)) if self.V > 1 else 0.0

    def oracle(self, fallback: str = "uniform"):
        from entropy_unmask.predictors import ExactOracle

        return ExactOracle(self.support, self.probs, self.V, fallback=fallback)

    def table(self) -> np.ndarray:
        """The dense joint table of shape (V,)*L (refused above 2^22 cells)."""
        size = self.V**self.L
        if size > MAX_TABLE:
            raise InputError(f"the dense table would have V^L = {size:,} cells (limit {MAX_TABLE:,})")
        t = np.zeros(size)
        t[self.support @ (self.V ** np.arange(self.L)[::-1])] = self.probs
        return t.reshape((self.V,) * self.L)

    def sample(self, n: int, rng: Any = None) -> np.ndarray:
        rng = np.random.default_rng(rng)
        return self.support[rng.choice(self.n, size=int(n), p=self.probs)]

    def describe(self) -> str:
        return f"{self.name} (L={self.L}, V={self.V}, support {self.n}, H={self.entropy:.3f} nats)"


def joint_from_table(table: Any, name: str = "table") -> Joint:
    """A :class:`Joint` from a dense table of shape (V,)*L that sums to 1 (refused above 2^22 cells)."""
    raw = np.asarray(table)
    if raw.dtype.kind not in "biuf":  # complex, strings and objects are not probabilities
        raise InputError(f"joint table must hold real numbers, got dtype {raw.dtype}")
    t = raw.astype(np.float64)
    if t.ndim < 1 or len(set(t.shape)) != 1 or t.shape[0] < 1:
        raise InputError(f"joint table must have shape (V,)*L, got {t.shape}")
    if t.size > MAX_TABLE:
        raise InputError(
            f"joint table has {t.size:,} cells, more than the {MAX_TABLE:,} that can be enumerated"
        )
    V, L = t.shape[0], t.ndim
    flat = t.reshape(-1)
    idx = np.nonzero(flat)[0]
    support = np.stack(np.unravel_index(idx, t.shape), axis=1) if L > 1 else idx[:, None]
    if not np.isfinite(flat).all() or flat.min() < 0:
        raise InputError("joint table must be finite and non-negative")
    return Joint(support, flat[idx], V, name)


def _check_size(L: int, V: int) -> tuple[int, int]:
    L = check_int("L", L, low=1, high=16)
    V = check_int("V", V, low=2, high=64)
    check_space(L, V)
    return L, V


def _from_dict(d: dict[tuple[int, ...], float], V: int, name: str, params: dict) -> Joint:
    keys = list(d)
    s = np.array(keys, dtype=np.int64)
    p = np.array([d[k] for k in keys])
    return Joint(s, p / p.sum(), V, name, params)


def random_code(L: int = 10, V: int = 4, size: int = 16, seed: int = 0) -> Joint:
    """Uniform over ``size`` distinct random sequences: H = log(size)."""
    L, V = _check_size(L, V)
    size = check_int("size", size, low=1, high=V**L)
    rng = np.random.default_rng(seed)
    codes = rng.choice(V**L, size=size, replace=False)  # V^L <= 2^62 (checked above)
    s = np.stack(np.unravel_index(codes, (V,) * L), axis=1)
    return Joint(s, np.full(size, 1.0 / size), V, "code", {"L": L, "V": V, "size": size, "seed": seed})


def template(L: int = 10, V: int = 4, slots: int = 3, fills: int = 8, seed: int = 0) -> Joint:
    """A code-like template: a fixed random sequence with ``slots`` positions that vary jointly among
    ``fills`` random fillings (uniform). Most positions carry zero entropy; H = log(#distinct fills)."""
    L, V = _check_size(L, V)
    slots = check_int("slots", slots, low=1, high=L)
    fills = check_int("fills", fills, low=1, high=V**slots)
    rng = np.random.default_rng(seed)
    base = rng.integers(0, V, size=L)
    where = np.sort(rng.choice(L, size=slots, replace=False))
    codes = rng.choice(V**slots, size=fills, replace=False)
    vals = np.stack(np.unravel_index(codes, (V,) * slots), axis=1)
    s = np.repeat(base[None, :], fills, axis=0)
    s[:, where] = vals
    return Joint(
        s,
        np.full(fills, 1.0 / fills),
        V,
        "template",
        {"L": L, "V": V, "slots": slots, "fills": fills, "seed": seed},
    )


def _sparse_stochastic(rng: np.random.Generator, V: int, branching: int, concentration: float) -> np.ndarray:
    P = np.zeros((V, V))
    for a in range(V):
        nxt = rng.choice(V, size=branching, replace=False)
        P[a, nxt] = rng.dirichlet(np.full(branching, concentration))
    return P


def markov(L: int = 10, V: int = 4, branching: int = 2, concentration: float = 0.5, seed: int = 0) -> Joint:
    """A Markov chain: uniform start, each state moves to ``branching`` successors with Dirichlet
    weights. Support V * branching^(L-1)."""
    L, V = _check_size(L, V)
    branching = check_int("branching", branching, low=1, high=V)
    concentration = check_number("concentration", concentration, low=0, low_open=True)
    rng = np.random.default_rng(seed)
    P = _sparse_stochastic(rng, V, branching, concentration)
    seqs = np.arange(V)[:, None]
    pr = np.full(V, 1.0 / V)
    for _ in range(L - 1):
        last = seqs[:, -1]
        nxt = P[last]  # (n, V)
        r, c = np.nonzero(nxt > 0)
        seqs = np.concatenate([seqs[r], c[:, None]], axis=1)
        pr = pr[r] * nxt[r, c]
    return Joint(
        seqs,
        pr / pr.sum(),
        V,
        "markov",
        {"L": L, "V": V, "branching": branching, "concentration": concentration, "seed": seed},
    )


def hmm_matrices(rng: np.random.Generator, V: int, hidden: int, emit: int) -> tuple[np.ndarray, np.ndarray]:
    """The HMM's transition matrix A (hidden, hidden) and emission matrix E (hidden, V); the start is
    uniform over the hidden states."""
    A = _sparse_stochastic(rng, hidden, min(2, hidden), 0.7)
    E = _sparse_stochastic(rng, V, emit, 1.0)[:hidden] if hidden <= V else None
    if E is None:
        E = np.zeros((hidden, V))
        for z in range(hidden):
            E[z, rng.choice(V, size=emit, replace=False)] = rng.dirichlet(np.ones(emit))
    return A, E


def hmm(L: int = 10, V: int = 4, hidden: int = 6, emit: int = 1, seed: int = 0) -> Joint:
    """A hidden Markov model: ``hidden`` states with sparse (2-successor) transitions, each emitting one
    of ``emit`` symbols (with ``emit=1`` and more hidden states than symbols the observations are a
    non-Markov function of the chain). The joint over observations is summed over hidden paths exactly."""
    L, V = _check_size(L, V)
    hidden = check_int("hidden", hidden, low=1, high=16)
    emit = check_int("emit", emit, low=1, high=V)
    A, E = hmm_matrices(np.random.default_rng(seed), V, hidden, emit)
    # forward over partial observation sequences, keeping only those of positive probability
    seqs = np.zeros((1, 0), dtype=np.int64)
    alpha = np.full((1, hidden), 1.0 / hidden)  # P(x_<t, z_t)
    for t in range(L):
        joint = alpha[:, :, None] * E[None, :, :]  # (n, hidden, V): P(x_<t, z_t, x_t)
        px = joint.sum(axis=1)
        r, c = np.nonzero(px > 0)
        seqs = np.concatenate([seqs[r], c[:, None]], axis=1)
        alpha = joint[r, :, c]
        if t < L - 1:
            alpha = alpha @ A
    pr = alpha.sum(axis=1)
    return Joint(
        seqs, pr / pr.sum(), V, "hmm", {"L": L, "V": V, "hidden": hidden, "emit": emit, "seed": seed}
    )


def copy(L: int = 10, V: int = 4, branching: int = 2, seed: int = 0) -> Joint:
    """The second half repeats the first; the first half is a sparse Markov chain."""
    L, V = _check_size(L, V)
    half = L // 2
    if half < 1:
        raise InputError(f"copy needs L >= 2, got {L}")
    first = markov(L - half, V, branching=branching, seed=seed)
    s = np.concatenate([first.support, first.support[:, :half]], axis=1)
    return Joint(s, first.probs, V, "copy", {"L": L, "V": V, "branching": branching, "seed": seed})


def product(L: int = 6, V: int = 3, concentration: float = 1.0, seed: int = 0) -> Joint:
    """Independent positions with Dirichlet marginals (full support V^L)."""
    L, V = _check_size(L, V)
    if V**L > MAX_TABLE:
        raise InputError(f"product support V^L = {V**L:,} is more than {MAX_TABLE:,}")
    rng = np.random.default_rng(seed)
    marg = rng.dirichlet(np.full(V, concentration), size=L)
    marg = np.clip(marg, 1e-3, None)
    marg /= marg.sum(axis=1, keepdims=True)
    s = np.array(list(itertools.product(range(V), repeat=L)), dtype=np.int64)
    p = np.prod(marg[np.arange(L)[None, :], s], axis=1)
    return Joint(s, p / p.sum(), V, "product", {"L": L, "V": V, "concentration": concentration, "seed": seed})


def mixture(joints: list[Joint], weights: Any = None, name: str = "mixture") -> Joint:
    """A mixture of joints over the same (L, V)."""
    if not joints:
        raise InputError("mixture needs at least one joint")
    L, V = joints[0].L, joints[0].V
    if any(j.L != L or j.V != V for j in joints):
        raise InputError("mixture components must share L and V")
    w = np.full(len(joints), 1.0 / len(joints)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(joints),) or not np.isfinite(w).all() or w.min() < 0 or w.sum() <= 0:
        raise InputError("mixture weights must be non-negative, one per component")
    w = w / w.sum()
    d: dict[tuple[int, ...], float] = {}
    for j, wj in zip(joints, w):
        for row, pr in zip(map(tuple, j.support.tolist()), j.probs):
            d[row] = d.get(row, 0.0) + wj * pr
    return _from_dict(d, V, name, {"components": [j.name for j in joints], "weights": w.tolist()})


def point_mass(L: int = 6, V: int = 3, seed: int = 0) -> Joint:
    """All mass on one random sequence: H = 0."""
    L, V = _check_size(L, V)
    rng = np.random.default_rng(seed)
    return Joint(rng.integers(0, V, size=(1, L)), np.ones(1), V, "point", {"L": L, "V": V, "seed": seed})


FAMILIES = {
    "code": random_code,
    "template": template,
    "markov": markov,
    "hmm": hmm,
    "copy": copy,
    "product": product,
    "point": point_mass,
    "mixture": lambda L=10, V=4, seed=0: mixture(
        [markov(L, V, seed=seed), template(L, V, seed=seed + 1)], [0.5, 0.5]
    ),
}


def make_family(name: str, L: int, V: int, seed: int = 0, **kwargs: Any) -> Joint:
    """A family by its CLI name."""
    if name not in FAMILIES:
        raise InputError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name](L=L, V=V, seed=seed, **kwargs)
