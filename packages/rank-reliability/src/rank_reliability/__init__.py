"""rank-reliability — benchmark reliability as signal-to-noise, λ★6 item selection, and rank stability.

Input everywhere: a models × items score matrix ``X`` (numpy array, float; rows = evaluated models,
columns = benchmark items; 0/1 or continuous scores; ``NaN`` marks a missing cell).

>>> from rank_reliability import variance_components, lambda6_star, select_items
>>> from rank_reliability.data import simulate_2pl
>>> X = simulate_2pl(50, 400, seed=0, drop_constant=True).X   # 50 models × ~400 items, right/wrong
>>> vc = variance_components(X)
>>> rho = vc.g_coefficient()                           # reliability of the 400-item leaderboard
>>> round(vc.expected_kendall(200), 2)                 # E[τ] between two 200-item halves
0.84
>>> bool(0 < lambda6_star(X) < 1)
True
>>> select_items(X, 50).shape                          # greedy λ★6 pool bound, budget 50 items
(50,)

Main entry points:

* :func:`variance_components` → :class:`VarianceComponents` (σ²_M, σ²_I, σ²_E; ``snr(n)``,
  ``g_coefficient(n)``, ``expected_kendall(n_a, n_b)``, ``expected_spearman``, ``items_for(ρ)``);
* :func:`split_half`, :func:`subset_concordance`, :func:`kendall_tau` — observed concordance;
* :func:`cronbach_alpha`, :func:`kr20`, :func:`guttman_lambda6`, :func:`lambda6_star` (reconstructed);
* :func:`select_items` (``lambda6_star_pool`` (default) | ``lambda6_star`` | ``lambda6_star_strat`` |
  ``item_rest`` | ``random`` | ``stratified`` | ``irt_info``; the λ★6 rules are reconstructions),
  :func:`selection_stability`, :func:`fit_2pl`;
* :func:`analyze` (everything at once), :func:`cohort_reliability` (lower vs higher cohorts).
"""

from rank_reliability.analysis import Report, analyze, cohort_reliability
from rank_reliability.classical import cronbach_alpha, guttman_lambda6, kr20, lambda6_star
from rank_reliability.components import (
    VarianceComponents,
    expected_kendall,
    kendall_from_correlation,
    spearman_from_correlation,
    variance_components,
)
from rank_reliability.concordance import kendall_tau, spearman, split_half, subset_concordance
from rank_reliability.irt import TwoPL, fit_2pl
from rank_reliability.matrix import check_matrix, read_matrix
from rank_reliability.selection import select_items, selection_stability

__version__ = "0.1.0"

__all__ = [
    "Report",
    "TwoPL",
    "VarianceComponents",
    "__version__",
    "analyze",
    "check_matrix",
    "cohort_reliability",
    "cronbach_alpha",
    "expected_kendall",
    "fit_2pl",
    "guttman_lambda6",
    "kendall_from_correlation",
    "kendall_tau",
    "kr20",
    "lambda6_star",
    "read_matrix",
    "select_items",
    "selection_stability",
    "spearman",
    "spearman_from_correlation",
    "split_half",
    "subset_concordance",
    "variance_components",
]
