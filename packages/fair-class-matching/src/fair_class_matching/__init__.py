"""fair-class-matching — γ-threshold algorithms for fair and efficient online class matching.

Offline agents belong to classes (regions, demographic groups); items arrive one at a time and are
matched irrevocably. The γ-threshold algorithm equalises the classes' allocations while agents are
below fill level γ, then water-fills for efficiency: (1 − e^{−γ})-class-envy-free and
(1 − e^{γ−1}/(γ+1))-efficient for divisible items (Borst & Springer, NeurIPS 2026).

>>> from fair_class_matching import upper_triangular, threshold_divisible, metrics, bounds
>>> inst = upper_triangular(60, 2)                   # item t has edges to agents t..59; OPT = 60
>>> alloc = threshold_divisible(inst, gamma=0.5, audit=True)
>>> alloc.audit.ok                                    # loads <= 1, non-wasteful after every arrival
True
>>> bool(metrics.cef(alloc) >= bounds.alg_cef(0.5) and metrics.usw_ratio(alloc) >= bounds.alg_usw(0.5))
True

An online matcher takes one item at a time:

>>> from fair_class_matching import ThresholdMatcher
>>> m = ThresholdMatcher([0, 0, 1], gamma=0.5)          # three agents, classes 0, 0, 1
>>> a = m.arrive([0, 2])                                # an item with edges to agents 0 and 2
>>> a.agents.tolist(), a.amounts.tolist()
([0, 2], [0.5, 0.5])

Main entry points: :class:`Instance` (and :func:`load`), :class:`ThresholdMatcher`,
:class:`ThresholdRanking`, :func:`threshold_divisible`, :func:`threshold_indivisible`,
:func:`run_online`, :mod:`fair_class_matching.metrics`, :mod:`fair_class_matching.bounds`,
:mod:`fair_class_matching.baselines`, :mod:`fair_class_matching.data`.
"""

from fair_class_matching import bounds, metrics
from fair_class_matching.data import block_classes, random_gnp, ride_sharing, upper_triangular
from fair_class_matching.instance import Instance, load
from fair_class_matching.matching import (
    Allocation,
    Assignment,
    OnlineMatcher,
    ThresholdMatcher,
    ThresholdRanking,
    run_online,
    threshold_divisible,
    threshold_indivisible,
)

__version__ = "0.1.0"

__all__ = [
    "Allocation",
    "Assignment",
    "Instance",
    "OnlineMatcher",
    "ThresholdMatcher",
    "ThresholdRanking",
    "__version__",
    "block_classes",
    "bounds",
    "load",
    "metrics",
    "random_gnp",
    "ride_sharing",
    "run_online",
    "threshold_divisible",
    "threshold_indivisible",
    "upper_triangular",
]
