"""The anchors item selection is measured against: random subsets and IRT Fisher-information selection.

* Random subsampling at the same budget — the paper's own baseline.
* IRT Fisher information — the standard psychometric way to build a short test (and the idea behind
  IRT-based benchmark compression such as tinyBenchmarks / metabench): fit a 2PL model
  (:func:`rank_reliability.irt.fit_2pl`), then keep the items with the largest information
  Σₘ aᵢ² Pᵢ(θ̂ₘ)(1 − Pᵢ(θ̂ₘ)) at the evaluated models' abilities.
"""

from __future__ import annotations

import numpy as np

from papershelf.errors import InputError

from .irt import TwoPL, fit_2pl


def random_selection(n_items: int, budget: int, *, seed: int | np.random.Generator = 0) -> np.ndarray:
    """``budget`` distinct item indices drawn uniformly from ``range(n_items)``."""
    if budget > n_items:
        raise InputError(f"budget {budget} is larger than the number of items ({n_items})")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return rng.choice(n_items, size=budget, replace=False)


def irt_information_selection(arr: np.ndarray, budget: int, *, model: TwoPL | None = None) -> np.ndarray:
    """The ``budget`` items of largest 2PL test information at the models' abilities, best first."""
    fitted = model if model is not None else fit_2pl(arr)
    info = fitted.information(fitted.theta).sum(axis=0)
    return np.argsort(-info, kind="stable")[:budget]
