"""celeus-eval — Celeus: certifiable, label-efficient evaluation with anytime-valid confidence sequences.

Estimate a model's mean loss (error rate, cross-entropy, …) over a pool of N items while labelling as
few items as possible, with an interval that stays valid however often you look at it and whenever
you decide to stop.

>>> import numpy as np
>>> from celeus_eval import evaluate
>>> rng = np.random.default_rng(0)
>>> p = rng.beta(1, 4, size=2000)                      # a judge's predicted error probability
>>> losses = (rng.random(2000) < p).astype(float)      # the true 0-1 losses (known here)
>>> res = evaluate(losses, p, alpha=0.05, target_width=0.1, seed=0)
>>> bool(res.n_labels < 2000 and res.lower <= losses.mean() <= res.upper)
True

Main entry points: :func:`evaluate` (one call), :class:`Celeus` (step by step: ``propose`` /
``observe``), :class:`BettingCS` (the confidence sequence on its own), :mod:`celeus_eval.strategies`
(surrogates and proxies from model probabilities), :mod:`celeus_eval.baselines`.
"""

from celeus_eval.celeus import Celeus, EvalResult, evaluate
from celeus_eval.cs import BettingCS

__version__ = "0.1.0"

__all__ = ["BettingCS", "Celeus", "EvalResult", "__version__", "evaluate"]
