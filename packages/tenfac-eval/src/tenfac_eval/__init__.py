"""tenfac-eval — fine-grained generative-model evaluation by tensor factorisation of autorater and
human ratings (Maia Polo et al., "Rich Insights from Cheap Signals", arXiv:2603.02029).

Stage 1 pretrains prompt and model factors of an ordinal CP model on cheap autorater ratings; stage 2
aligns them to human judgement with a small calibration set; then predict per-prompt human ratings,
build leaderboards by prompt group with confidence intervals, and fold in new prompts or models.

>>> from tenfac_eval import TenFac, simulate, split_human
>>> sim = simulate(200, 5, 3, rank=1, seed=0)        # 200 prompts x 5 models x 3 autoraters, 1..5
>>> cal, held = split_human(sim.human_all, 0.2, seed=0)
>>> model = TenFac(rank=1).fit(sim.autorater, cal)
>>> model.predict_proba(["p00000"], ["m00"]).shape    # P(human rating = 1..5)
(1, 5)
>>> board = model.leaderboard()                      # models ranked by mean human score, 95% CI
>>> sorted(board[0]) == ['estimate', 'group', 'lower', 'model', 'n_prompts', 'rank', 'se', 'upper']
True

Shapes and dtypes: every array is float64; ``predict_proba`` returns (n, L) over the human scale's
levels; ``Ratings.level`` is int64 (n,), the index of each rating on its declared scale.
"""

from tenfac_eval.baselines import HumanOnly, MaskedCP, ppi_plus_plus, raw_autorater
from tenfac_eval.data import Ratings, parse_scale, read_groups, read_ratings
from tenfac_eval.model import TenFac, min_calibration_size
from tenfac_eval.simulate import digits_proxy, simulate, split_human

__version__ = "0.1.0"

__all__ = [
    "HumanOnly",
    "MaskedCP",
    "Ratings",
    "TenFac",
    "__version__",
    "digits_proxy",
    "min_calibration_size",
    "parse_scale",
    "ppi_plus_plus",
    "raw_autorater",
    "read_groups",
    "read_ratings",
    "simulate",
    "split_human",
]
