"""slg-search — predict best-of-N scaling from a reward tail, and search with it (Scaling-Law Guided search).

Fit the upper tail of a few sampled rewards, predict what best-of-N would reach for any N, and spend a
sampling budget where the predicted best-of-N value is highest.

>>> import numpy as np
>>> from slg_search import predict_bon, slg_search, best_of_n, GaussianTwoStage
>>> rewards = np.random.default_rng(1).normal(size=200)     # 200 sampled rewards of a N(0, 1)
>>> predict_bon(rewards, [10, 1000]).round(2)                # exact: E[max of 10] = 1.54, of 1000 = 3.24
array([1.31, 3.24])
>>> env = GaussianTwoStage(means=[0.0, -0.5, 0.3], sds=[0.5, 1.5, 0.3])
>>> slg_search(env, env.root, budget=600, width=3, m=50, seed=1).chosen   # the wide child wins at N = 600
1

Main entry points: :func:`tail_fit`, :func:`predict_bon`, :func:`predict_curve` (prediction);
:func:`slg_search`, :func:`slg_tree_search`, :func:`best_of_n`, :func:`oracle_search` (search over any
:class:`Environment`); :mod:`slg_search.envs` (Gaussian two-stage, Countdown, your own callables).
"""

__version__ = "0.1.0"

from slg_search.envs import Countdown, FunctionEnvironment, GaussianTwoStage
from slg_search.search import (
    Environment,
    SearchResult,
    best_of_n,
    oracle_search,
    slg_search,
    slg_tree_search,
)
from slg_search.tail import (
    TailFit,
    empirical_bon,
    expected_max_normal,
    predict_bon,
    predict_curve,
    tail_fit,
)

__all__ = [
    "Countdown",
    "Environment",
    "FunctionEnvironment",
    "GaussianTwoStage",
    "SearchResult",
    "TailFit",
    "__version__",
    "best_of_n",
    "empirical_bon",
    "expected_max_normal",
    "oracle_search",
    "predict_bon",
    "predict_curve",
    "slg_search",
    "slg_tree_search",
    "tail_fit",
]
