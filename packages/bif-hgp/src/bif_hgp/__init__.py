"""bif-hgp — Bidirectional Information Flow (BIF) hierarchical Gaussian-process Bayesian optimisation.

A composite objective f(x_1, …, x_K) whose input splits into sub-inputs owned by *children* is
optimised with a hierarchy of GPyTorch GPs on a grid:

- **one scale**: the parent standardises its observations, t = (y − ȳ)/s, and the children hold their
  data in the same units, so what they hand up is in the parent's units;
- **bottom-up**: the parent GP (over the joint input) takes as its mean the children's posterior means
  summed, Σ_i μ_i(x_i) (or the authors' acquisition-map prior (1/K)·Σ_i a_i(x_i) / |max|, calibrated
  onto the targets' scale: ``prior="acquisition"``), and as its additive kernel the children's
  lengthscales and outputscales;
- **top-down**: each parent observation is split into sub-responses that sum to it, appended to the
  children's data: each child's current belief μ_i(x_i) plus its share w_i of what the children leave
  unexplained (default), or the authors' ỹ_i = y·w_i (``decomposition="softmax"``), with
  w = softmax(ĉ), ĉ_i = a_i(x_i)/max a_i.

>>> from bif_hgp import decompose
>>> [round(float(v), 6) for v in decompose(2.0, [1.0, 0.0], [1.0, 1.0])]  # child 1 at its maximum
[1.462117, 0.537883]

Main entry points: :class:`BIF` (``BIF(composition, bounds).run(objective, budget)`` → :class:`BOResult`),
:class:`ChildGP` (reusable across tasks: ``run(..., pretrained={name: child})``), the baselines
:class:`VanillaGPUCB` (BoTorch), :class:`SingleGPUCB`, :class:`RandomSearch`, :func:`bottom_up`, and the
problems :func:`make_problem` (``additive2d``, ``additive3d``, ``multiplicative2d``, ``nonadditive3d``,
``transfer2d``, ``hpo``).

Shapes and dtypes: ``bounds`` is (D, 2); the objective takes a (D,) float64 array in the bounds'
units and returns a float; internally every GP runs in float64 on the unit cube.
"""

from __future__ import annotations

import importlib
from typing import Any

# Attributes load lazily (PEP 562): ``bif-hgp --version`` and the CLI's argument errors need neither
# torch nor GPyTorch, which take seconds to import.
_EXPORTS = {
    "RandomSearch": "baselines",
    "SingleGPUCB": "baselines",
    "VanillaGPUCB": "baselines",
    "bottom_up": "baselines",
    "PROBLEMS": "data",
    "Problem": "data",
    "make_problem": "data",
    "composite_auc": "metrics",
    "exploration_score": "metrics",
    "r2": "metrics",
    "r2_scale_free": "metrics",
    "regret_auc": "metrics",
    "BIF": "model",
    "BOResult": "model",
    "ChildGP": "model",
    "decompose": "model",
    "normalize_groups": "model",
    "prior_map": "model",
    "shared_targets": "model",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"bif_hgp.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bif_hgp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__version__ = "0.1.0"

__all__ = [
    "BIF",
    "PROBLEMS",
    "BOResult",
    "ChildGP",
    "Problem",
    "RandomSearch",
    "SingleGPUCB",
    "VanillaGPUCB",
    "__version__",
    "bottom_up",
    "composite_auc",
    "decompose",
    "exploration_score",
    "make_problem",
    "normalize_groups",
    "prior_map",
    "r2",
    "r2_scale_free",
    "regret_auc",
    "shared_targets",
]
