"""Surrogates and label-free proxies built from model probabilities (the paper's Remarks 1 and 2).

Inputs are predictive distributions over C classes, arrays of shape (N, C) whose rows sum to 1:
``target`` is the model being evaluated (f), ``helper`` a cheaper second model (g, e.g. a smaller
LLM). Each strategy returns ``(surrogate, proxy)``: the surrogate enters Celeus's signal, the proxy
only its sampling rule (q proportional to |proxy - surrogate|).

0-1 loss (accuracy), strategies S1-S5; S4 is the one the paper deploys:

====  ==========================  ==========================
name  proxy                       surrogate
====  ==========================  ==========================
S1    Gini uncertainty of f       Gini uncertainty of g
S2    Gini uncertainty of f       soft pseudo-label loss
S3    soft pseudo-label loss      Gini uncertainty of f
S4    hard disagreement f vs g    Gini uncertainty of f
S5    hard disagreement f vs g    soft pseudo-label loss
====  ==========================  ==========================

Cross-entropy, strategies S1-S3; S2 is the one stated as deployed:
S1 proxy H(f), surrogate H(g); S2 proxy -log max f, surrogate H(f); S3 is S2 with the roles swapped.
"""

from __future__ import annotations

import numpy as np

from papershelf.errors import InputError, check_choice, check_number

ZERO_ONE_STRATEGIES = ("S1", "S2", "S3", "S4", "S5")
CROSS_ENTROPY_STRATEGIES = ("S1", "S2", "S3")
LOSSES = ("zero_one", "cross_entropy")


def check_probabilities(name: str, probs: object, n_classes: int | None = None) -> np.ndarray:
    """An (N, C) array of finite, non-negative rows summing to 1 (to 1e-6), as float64."""
    try:
        p = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a numeric (N, C) array of probabilities") from None
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] < 2:
        raise InputError(f"{name} must have shape (N, C) with N >= 1 and C >= 2, got {p.shape}")
    if n_classes is not None and p.shape[1] != n_classes:
        raise InputError(f"{name} has {p.shape[1]} classes, expected {n_classes}")
    if not np.isfinite(p).all() or (p < 0).any():
        raise InputError(f"{name} must hold finite, non-negative probabilities")
    sums = p.sum(axis=1)
    if not np.allclose(sums, 1.0, atol=1e-6):
        row = int(np.argmax(np.abs(sums - 1.0)))
        raise InputError(f"{name}: row {row} sums to {sums[row]:.6g}, not 1")
    return p


def gini_uncertainty(probs: np.ndarray) -> np.ndarray:
    """1 - sum_y p(y)^2: the chance two independent draws from p disagree, in [0, 1 - 1/C]."""
    return 1.0 - np.sum(probs * probs, axis=1)


def entropy(probs: np.ndarray) -> np.ndarray:
    """Predictive entropy in nats."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(probs > 0, -probs * np.log(probs), 0.0)
    return terms.sum(axis=1)


def mode_loss(probs: np.ndarray) -> np.ndarray:
    """-log max_y p(y): the cross-entropy the model would pay if its own top guess were right."""
    return -np.log(np.clip(probs.max(axis=1), 1e-300, None))


def hard_disagreement(target: np.ndarray, helper: np.ndarray) -> np.ndarray:
    """1 where the two models' top classes differ, else 0."""
    return (target.argmax(axis=1) != helper.argmax(axis=1)).astype(np.float64)


def soft_pseudo_loss(target: np.ndarray, helper: np.ndarray) -> np.ndarray:
    """1 - p_f(argmax g): the target's expected 0-1 loss if the helper's top class were the truth."""
    return 1.0 - target[np.arange(target.shape[0]), helper.argmax(axis=1)]


def true_losses(
    target: np.ndarray, labels: np.ndarray, *, loss: str = "zero_one", ce_cap: float = 3.0
) -> np.ndarray:
    """The target model's per-item loss against the true labels (0-1, or cross-entropy capped at ce_cap)."""
    loss = check_choice("loss", loss, LOSSES)
    target = check_probabilities("target", target)
    labels = np.asarray(labels)
    if labels.shape != (target.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise InputError(f"labels must be {target.shape[0]} integer class ids, got shape {labels.shape}")
    if labels.min() < 0 or labels.max() >= target.shape[1]:
        raise InputError(f"labels must lie in [0, {target.shape[1] - 1}]")
    if loss == "zero_one":
        return (target.argmax(axis=1) != labels).astype(np.float64)
    nll = -np.log(np.clip(target[np.arange(labels.size), labels], 1e-300, None))
    return np.minimum(nll, check_number("ce_cap", ce_cap, low=0, low_open=True))


def surrogate_and_proxy(
    target: object,
    helper: object,
    *,
    loss: str = "zero_one",
    strategy: str | None = None,
    ce_cap: float = 3.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(surrogate, proxy) for a strategy; default S4 for 0-1 loss and S2 for cross-entropy.

    Cross-entropy values are clipped to [0, ce_cap] so they share the loss range (0, ce_cap).
    """
    loss = check_choice("loss", loss, LOSSES)
    f = check_probabilities("target", target)
    g = check_probabilities("helper", helper, n_classes=f.shape[1])
    if g.shape[0] != f.shape[0]:
        raise InputError(f"target has {f.shape[0]} items but helper has {g.shape[0]}")
    if loss == "zero_one":
        strategy = check_choice("strategy", strategy or "S4", ZERO_ONE_STRATEGIES)
        unc_f, unc_g = gini_uncertainty(f), gini_uncertainty(g)
        pairs = {
            "S1": (unc_g, unc_f),
            "S2": (soft_pseudo_loss(f, g), unc_f),
            "S3": (unc_f, soft_pseudo_loss(f, g)),
            "S4": (unc_f, hard_disagreement(f, g)),
            "S5": (soft_pseudo_loss(f, g), hard_disagreement(f, g)),
        }
        surrogate, proxy = pairs[strategy]
        return np.clip(surrogate, 0.0, 1.0), np.clip(proxy, 0.0, 1.0)
    strategy = check_choice("strategy", strategy or "S2", CROSS_ENTROPY_STRATEGIES)
    cap = check_number("ce_cap", ce_cap, low=0, low_open=True)
    pairs = {
        "S1": (entropy(g), entropy(f)),
        "S2": (entropy(f), mode_loss(f)),
        "S3": (mode_loss(f), entropy(f)),
    }
    surrogate, proxy = pairs[strategy]
    return np.clip(surrogate, 0.0, cap), np.clip(proxy, 0.0, cap)
