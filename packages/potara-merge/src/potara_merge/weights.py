"""Potara's closed-form mixing weight, the variance-trace bound, and the traces a, b, c from Fisher.

The personalised model of client i is ``θ_i = θ₀ + λ_i Δ_F + (1 − λ_i) Δ_{L,i}``: ``λ = 1`` is the
federated model, ``λ = 0`` the client's local model. With ``a = tr Σ_F``, ``b = tr Σ_L`` and
``c = tr Σ_FL`` (cross-covariance), the variance-trace part of the expected-loss bound is

    V(λ) = λ² a + (1 − λ)² b + 2 λ (1 − λ) c,

minimised at ``λ* = (b − c) / (a + b − 2c)`` where ``V(λ*) = (a b − c²) / (a + b − 2c) ≤ min(a, b)``.

Covariances are approximated per coordinate from the inverse diagonal Fisher,
``v_j = 1 / (n (F_j + δ))``, and the cross term from a clipped gradient correlation,
``c_j = clip(ρ_j, 0, 1) √(v_{F,j} v_{L,j})``, summed per module (or over all parameters), with
``c ≤ min(a, b)`` enforced so that λ* ∈ [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import torch

from papershelf.errors import InputError, check_number


def _check_traces(a, b, c):
    a = check_number("a (tr Σ_F)", a, low=0)
    b = check_number("b (tr Σ_L)", b, low=0)
    c = check_number("c (tr Σ_FL)", c)
    return a, b, c


def variance_bound(lam, a: float, b: float, c: float = 0.0):
    """``V(λ) = λ² a + (1 − λ)² b + 2 λ (1 − λ) c`` (λ a float or an array/tensor of them)."""
    a, b, c = _check_traces(a, b, c)
    return lam * lam * a + (1 - lam) * (1 - lam) * b + 2 * lam * (1 - lam) * c


def optimal_weight(a: float, b: float, c: float = 0.0, *, tol: float = 1e-12) -> float:
    """The closed-form weight ``λ* = (b − c) / (a + b − 2c)`` on the federated model, clipped to [0, 1].

    ``c`` is clipped to ``[0, min(a, b)]`` first (the bound's condition: a PSD cross-covariance no larger
    than either marginal). When ``a + b − 2c ≤ tol·(a + b)`` (the two estimates are perfectly correlated
    with equal variance, or both traces vanish) every λ gives the same bound and 0.5 is returned.

    >>> optimal_weight(1.0, 3.0)
    0.75
    >>> optimal_weight(1.0, 3.0, 0.5)
    0.8333333333333334
    """
    a, b, c = _check_traces(a, b, c)
    c = min(max(c, 0.0), a, b)
    den = a + b - 2.0 * c
    if den <= tol * max(a + b, 1e-300):
        return 0.5
    return float(min(max((b - c) / den, 0.0), 1.0))


def bound_at_optimum(a: float, b: float, c: float = 0.0) -> float:
    """``V(λ*)``: ``(a b − c²) / (a + b − 2c)`` (with the same clipping as :func:`optimal_weight`)."""
    a, b, c = _check_traces(a, b, c)
    c = min(max(c, 0.0), a, b)
    return float(variance_bound(optimal_weight(a, b, c), a, b, c))


@dataclass(frozen=True)
class Traces:
    """Traces of one module (or of all parameters): a = tr Σ_F, b = tr Σ_L, c = tr Σ_FL (clipped)."""

    a: float
    b: float
    c: float

    @property
    def weight(self) -> float:
        return optimal_weight(self.a, self.b, self.c)

    @property
    def bound(self) -> float:
        return bound_at_optimum(self.a, self.b, self.c)

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "weight": self.weight, "bound": self.bound}


def check_fisher(name: str, key: str, t: torch.Tensor) -> None:
    """A diagonal Fisher must be finite and >= 0 (an integer or bool tensor from a user's file is cast)."""
    t = t.double()
    if not torch.isfinite(t).all():
        raise InputError(f"{name} for {key!r} contains NaN or inf", hint="check the Fisher samples and model")
    if (t < 0).any():
        raise InputError(f"{name} for {key!r} has negative entries; a diagonal Fisher is >= 0")


CORR_SLACK = 1e-5  # float rounding: a correlation computed as num / den can exceed 1 by a few ulps


def check_correlation(name: str, key: str, t: torch.Tensor) -> None:
    """A per-coordinate correlation must be finite and in [-1, 1] (up to :data:`CORR_SLACK`)."""
    t = t.double()  # also an integer or bool tensor from a user's file
    if not torch.isfinite(t).all():
        raise InputError(f"{name} for {key!r} contains NaN or inf")
    if t.numel() and float(t.abs().max()) > 1 + CORR_SLACK:
        lo, hi = float(t.min()), float(t.max())
        raise InputError(
            f"{name} for {key!r} must be in [-1, 1] (a correlation), got values in [{lo:g}, {hi:g}]"
        )


def module_traces(
    fisher_fed: Mapping[str, torch.Tensor],
    fisher_loc: Mapping[str, torch.Tensor],
    groups: Mapping[str, list[str]],
    *,
    corr: Mapping[str, torch.Tensor] | None = None,
    n_fed: float = 1.0,
    n_loc: float = 1.0,
    damping: float = 1e-3,
    same: Mapping[str, torch.Tensor] | None = None,
) -> dict[str, Traces]:
    """Per-group traces from diagonal Fisher estimates of the two models.

    ``groups`` maps a module name to the parameter names it owns (e.g. a LoRA layer's A and B); pass
    ``{"all": [every name]}`` for one global weight. ``v_j = 1 / (n (F_j + δ))`` with the damping
    ``δ = damping · mean(F)`` over both models' entries (a shared prior, so it favours neither side).
    ``corr`` holds per-coordinate gradient correlations ρ_j in [-1, 1] (clipped to [0, 1] here); without
    it ``c = 0`` (the first-pass, independent-errors special case).

    ``same`` (bool masks) marks coordinates where the two adapters hold *identical* values (e.g. LoRA
    A-columns of inputs that are always zero, which neither model ever updates). Their errors are the
    same random variable, so they add the constant ``v_j`` to ``V(λ)`` for every λ and must not move λ*;
    they are left out of a, b and c. (Counted as independent with ρ_j = 0 — their gradients vanish, so
    no correlation can be measured — they pulled λ* toward 0.5.)
    """
    check_number("damping", damping, low=0)
    check_number("n_fed", n_fed, low=0, low_open=True)
    check_number("n_loc", n_loc, low=0, low_open=True)
    names = [n for g in groups.values() for n in g]
    if not names:
        raise InputError("groups is empty: there are no parameters to merge")
    for n in names:
        for label, src in (("fisher_fed", fisher_fed), ("fisher_loc", fisher_loc)):
            if n not in src:
                raise InputError(f"{label} has no entry for parameter {n!r}")
        if fisher_fed[n].shape != fisher_loc[n].shape:
            raise InputError(
                f"Fisher shapes differ for {n!r}: "
                f"{tuple(fisher_fed[n].shape)} vs {tuple(fisher_loc[n].shape)}"
            )
        check_fisher("fisher_fed", n, fisher_fed[n])
        check_fisher("fisher_loc", n, fisher_loc[n])
        if corr is not None:
            if n not in corr:
                raise InputError(f"corr has no entry for parameter {n!r}")
            check_correlation("gradient correlation", n, corr[n])
        if same is not None and n in same and same[n].shape != fisher_fed[n].shape:
            raise InputError(f"same-mask shape differs from the Fisher's for {n!r}")

    def _keep(n):  # coordinates that can inform λ (all, unless marked identical in both adapters)
        return (~same[n].bool()).double() if same is not None and n in same else 1.0

    total = sum(float(((fisher_fed[n].double() + fisher_loc[n].double()) * _keep(n)).sum()) for n in names)
    count = sum(
        2 * float((torch.ones_like(fisher_fed[n], dtype=torch.float64) * _keep(n)).sum()) for n in names
    )
    delta = damping * total / count if count > 0 else 0.0
    if delta <= 0:
        delta = 1e-12  # both Fishers identically zero: all directions equally (un)informative
    out = {}
    for group, members in groups.items():
        a = b = c = 0.0
        for n in members:
            keep = _keep(n)
            vf = keep / (n_fed * (fisher_fed[n].double() + delta))
            vl = keep / (n_loc * (fisher_loc[n].double() + delta))
            a += float(vf.sum())
            b += float(vl.sum())
            if corr is not None:
                c += float((corr[n].double().clamp(0, 1) * torch.sqrt(vf * vl)).sum())
        if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
            raise InputError(f"variance traces of module {group!r} are not finite")
        out[group] = Traces(a, b, min(max(c, 0.0), a, b))
    return out


def module_weights(traces: Mapping[str, Traces]) -> dict[str, float]:
    """λ* for every module."""
    return {k: t.weight for k, t in traces.items()}


def global_traces(traces: Mapping[str, Traces]) -> Traces:
    """One set of traces summed over every module (a single λ per client)."""
    a = sum(t.a for t in traces.values())
    b = sum(t.b for t in traces.values())
    c = sum(t.c for t in traces.values())
    return Traces(a, b, min(c, a, b))
