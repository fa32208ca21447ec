"""The slow, obviously-correct oracle: enumerate every string of length n (float64, pure Python loops).

Only for tiny sizes (``V ** n`` strings); every fast path in :mod:`dlm_constrain.inference` is tested
against these functions.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from dlm_constrain.automaton import TokenDFA
from papershelf.errors import InputError

_MAX_STRINGS = 2_000_000


def run_dfa(dfa: TokenDFA, tokens) -> bool:
    """Accept/reject by walking the transition table one token at a time."""
    q = dfa.start
    for v in tokens:
        q = int(dfa.table[q][int(v)])
    return bool(dfa.accept[q])


def brute_force_posterior(probs, dfa: TokenDFA) -> tuple[dict[tuple[int, ...], float], float]:
    """``({string: q_A(string)}, Z)`` over accepted strings with positive probability, by enumeration."""
    p = np.asarray(probs, dtype=np.float64)
    p = p / p.sum(axis=1, keepdims=True)
    n, V = p.shape
    if V**n > _MAX_STRINGS:
        raise InputError(f"brute force over {V}**{n} strings is too large")
    weights: dict[tuple[int, ...], float] = {}
    for x in itertools.product(range(V), repeat=n):
        if not run_dfa(dfa, x):
            continue
        w = 1.0
        for i, v in enumerate(x):
            w *= p[i, v]
        if w > 0:
            weights[x] = w
    Z = math.fsum(weights.values())
    if Z == 0:
        return {}, 0.0
    return {x: w / Z for x, w in weights.items()}, Z


def brute_force_marginals(probs, dfa: TokenDFA) -> np.ndarray:
    """``P(x_i = v)`` under the enumerated posterior: float64 ``[n, V]``."""
    post, _ = brute_force_posterior(probs, dfa)
    n, V = np.shape(probs)
    out = np.zeros((n, V))
    for x, w in post.items():
        for i, v in enumerate(x):
            out[i, v] += w
    return out


def brute_force_argmax(probs, dfa: TokenDFA) -> tuple[int, ...]:
    """The most probable accepted string (first in lexicographic order on exact ties)."""
    post, _ = brute_force_posterior(probs, dfa)
    if not post:
        raise InputError("no accepted string has positive probability")
    return max(post, key=lambda x: (post[x], tuple(-t for t in x)))


def reference_transfer(probs, dfa: TokenDFA) -> np.ndarray:
    """Transfer matrices by a triple loop (live states only, like the fast path)."""
    p = np.asarray(probs, dtype=np.float64)
    p = p / p.sum(axis=1, keepdims=True)
    n, V = p.shape
    Qe = dfa.dead
    M = np.zeros((n, Qe, Qe))
    for i in range(n):
        for q in range(Qe):
            for v in range(V):
                s = int(dfa.table[q, v])
                if s != dfa.dead:
                    M[i, q, s] += p[i, v]
    return M


def reference_chain(probs, dfa: TokenDFA) -> tuple[float, np.ndarray]:
    """``(log Z, marginals [n, V])`` by plain forward-backward over the triple-loop transfer matrices.

    float64 numpy, one position at a time, messages renormalised per step; no enumeration, so it checks
    the fast paths at lengths where brute force is impossible.
    """
    p = np.asarray(probs, dtype=np.float64)
    p = p / p.sum(axis=1, keepdims=True)
    n, V = p.shape
    M = reference_transfer(p, dfa)
    Qe = dfa.dead
    final = dfa.accept[:Qe].astype(np.float64)
    beta = np.zeros((n + 1, Qe))
    beta[n] = final
    logz = 0.0
    for i in range(n, 0, -1):
        b = M[i - 1] @ beta[i]
        m = b.max()
        if m == 0:
            return -math.inf, np.full((n, V), np.nan)
        beta[i - 1] = b / m
        logz += math.log(m)
    z = beta[0, dfa.start]
    if z == 0:
        return -math.inf, np.full((n, V), np.nan)
    alpha = np.zeros((n + 1, Qe))
    alpha[0, dfa.start] = 1.0
    for i in range(n):
        a = alpha[i] @ M[i]
        alpha[i + 1] = a / a.max()
    marg = np.zeros((n, V))
    for i in range(n):
        for q in range(Qe):
            for v in range(V):
                s = int(dfa.table[q, v])
                if s != dfa.dead:
                    marg[i, v] += alpha[i, q] * p[i, v] * beta[i + 1, s]
        marg[i] /= marg[i].sum()
    return logz + math.log(z), marg
