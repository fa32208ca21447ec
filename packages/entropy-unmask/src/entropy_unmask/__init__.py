"""entropy-unmask: entropy-sum confidence-based decoding for masked diffusion language models.

The paper's rule (Cai & Li, arXiv 2603.22248): at each iteration reveal masked positions until their
cumulative predictive entropy reaches a threshold ``eta`` (nats), and sample them independently from
their marginals. The order in which positions are added is not stated in the abstract; the default here
is ascending entropy (an inference, see the README's Fidelity section), ``order="random"`` the
alternative. Baselines share the interface: fixed-k, top-k
confidence, max-entropy thresholding and EB-sampler-style error-bounded unmasking.

Exact analysis for small problems: :class:`ExactOracle` (the optimal predictor of an explicit joint),
:func:`exact_analysis` (the sampler's exact law on the target's support, KL(p || q), expected
iterations, E_p of the revealed-entropy sum and of the total correlations) and
:func:`exact_output_distribution` (the full law over V^L).

>>> from entropy_unmask import EntropySum, FixedK, exact_analysis, markov
>>> target = markov(L=6, V=3, seed=0)
>>> res = exact_analysis(target.oracle(), EntropySum(0.05), target)
>>> res.kl < 0.05 and res.expected_iterations < 6
True
"""

from entropy_unmask.analysis import PolicySchedule, best_deterministic_frontier, sampler_bound
from entropy_unmask.baselines import (
    SCHEDULES,
    EBSampler,
    FixedK,
    MaxEntropyThreshold,
    TopKConfidence,
    make_schedule,
)
from entropy_unmask.data import (
    FAMILIES,
    Joint,
    copy,
    hmm,
    joint_from_table,
    make_family,
    markov,
    mixture,
    point_mass,
    product,
    random_code,
    template,
)
from entropy_unmask.exact import (
    ExactResult,
    exact_analysis,
    exact_output_distribution,
    iteration_bound,
    kl_divergence,
)
from entropy_unmask.predictors import MASK, ExactOracle, LogitsPredictor, token_entropy
from entropy_unmask.sampling import chi_square_test, sample
from entropy_unmask.schedules import EntropySum, Schedule

__version__ = "0.1.0"

__all__ = [
    "FAMILIES",
    "MASK",
    "SCHEDULES",
    "EBSampler",
    "EntropySum",
    "ExactOracle",
    "ExactResult",
    "FixedK",
    "Joint",
    "LogitsPredictor",
    "MaxEntropyThreshold",
    "PolicySchedule",
    "Schedule",
    "TopKConfidence",
    "__version__",
    "best_deterministic_frontier",
    "chi_square_test",
    "copy",
    "exact_analysis",
    "exact_output_distribution",
    "hmm",
    "iteration_bound",
    "joint_from_table",
    "kl_divergence",
    "make_family",
    "make_schedule",
    "markov",
    "mixture",
    "point_mass",
    "product",
    "random_code",
    "sample",
    "sampler_bound",
    "template",
    "token_entropy",
]
