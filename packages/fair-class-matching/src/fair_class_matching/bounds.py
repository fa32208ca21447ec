"""The paper's guarantees and its impossibility frontier, as functions (scalars or arrays).

* :func:`alg_cef` — the divisible γ-threshold algorithm is (1 − e^{−γ})-CEF;
* :func:`alg_usw` — … and (1 − e^{γ−1}/(γ+1))-USW (the indivisible version has the same USW);
* :func:`indivisible_cef` — the indivisible version is γ/2-CEF;
* :func:`upper_usw` — no non-wasteful α-CEF algorithm beats (1 + α − e^{α−1})/(1 + α)-USW;
* :func:`prior_upper_usw` — the inverse-proportional prior bound 1/(1 + α) [inferred form], which is
  vacuous (≥ 1 − 1/e, the fairness-free online optimum) for α ≤ e/(e − 1) − 1 ≈ 0.582.

Algebra worth knowing: ``upper_usw(g) == alg_usw(g)`` for every g; the gap between the algorithm and
the frontier is only in fairness, 1 − e^{−γ} versus γ.
"""

from __future__ import annotations

import math

import numpy as np

from papershelf.errors import InputError

ONE_MINUS_INV_E = 1.0 - 1.0 / math.e
PRIOR_VACUOUS_BELOW = 1.0 / ONE_MINUS_INV_E - 1.0  # ≈ 0.582


def _unit(name: str, value: float | np.ndarray) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number in [0, 1]") from None
    if not np.all(np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise InputError(f"{name} must be in [0, 1], got {value!r}")
    return arr


def _out(arr: np.ndarray) -> float | np.ndarray:
    return float(arr) if arr.ndim == 0 else arr


def alg_cef(gamma: float | np.ndarray) -> float | np.ndarray:
    """CEF guarantee of the divisible γ-threshold algorithm: 1 − e^{−γ}."""
    g = _unit("gamma", gamma)
    return _out(1.0 - np.exp(-g))


def alg_usw(gamma: float | np.ndarray) -> float | np.ndarray:
    """USW guarantee of the γ-threshold algorithms: 1 − e^{γ−1} / (γ + 1)."""
    g = _unit("gamma", gamma)
    return _out(1.0 - np.exp(g - 1.0) / (g + 1.0))


def indivisible_cef(gamma: float | np.ndarray) -> float | np.ndarray:
    """CEF guarantee (ex ante) of the randomized indivisible γ-threshold algorithm: γ/2."""
    g = _unit("gamma", gamma)
    return _out(g / 2.0)


def upper_usw(alpha: float | np.ndarray) -> float | np.ndarray:
    """The paper's frontier: no non-wasteful α-CEF algorithm has USW ratio above (1+α−e^{α−1})/(1+α)."""
    a = _unit("alpha", alpha)
    return _out((1.0 + a - np.exp(a - 1.0)) / (1.0 + a))


def prior_upper_usw(alpha: float | np.ndarray) -> float | np.ndarray:
    """The prior inverse-proportional bound 1/(1 + α) (form inferred from the abstract's remark)."""
    a = _unit("alpha", alpha)
    return _out(1.0 / (1.0 + a))


def guarantee_table(gammas: list[float] | np.ndarray) -> list[dict[str, float]]:
    """One row per γ: the algorithm's CEF and USW guarantees and the frontier at α = CEF(γ)."""
    rows = []
    for g in np.asarray(gammas, dtype=float).tolist():
        c = alg_cef(g)
        rows.append(
            {
                "gamma": g,
                "cef": c,
                "usw": alg_usw(g),
                "indivisible_cef": indivisible_cef(g),
                "upper_usw_at_cef": upper_usw(c),
                "prior_upper_usw_at_cef": prior_upper_usw(c),
            }
        )
    return rows
