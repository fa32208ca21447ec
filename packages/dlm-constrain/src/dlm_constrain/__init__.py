"""dlm-constrain — exact constrained sampling from diffusion-LM mean-field posteriors under finite automata.

A masked diffusion LM gives, at each denoising step, independent per-position distributions ``p_i``.
Given any constraint that a finite automaton expresses (a regex, a JSON schema, Sudoku row rules), this
package samples exactly from ``q_A(x) ∝ prod_i p_i(x_i) 1[x accepted]`` — or finds its MAP string — by
treating the automaton as a chain graphical model, with sequential or log-depth (scan, bisection)
samplers, and decodes with any remasking schedule so that every partial sequence stays completable.

>>> import torch
>>> from dlm_constrain import TokenDFA, sample, log_partition, map_decode
>>> vocab = ["a", "b", "ab", "<eos>"]
>>> dfa = TokenDFA.from_regex("(ab)+", vocab, eos_id=3)
>>> probs = torch.tensor([[0.6, 0.1, 0.2, 0.1]] * 4)     # 4 positions, the model loves "a"
>>> dfa.decode(map_decode(probs, dfa).tolist())          # the most probable accepted string
'abab'
>>> round(log_partition(probs, dfa), 4)
-4.0864
>>> x = sample(probs, dfa, 1000, generator=torch.Generator().manual_seed(0), method="bisect")
>>> all(dfa.accepts(row) for row in x.tolist())
True

Main entry points: :class:`TokenDFA` (``from_regex``, ``from_json_schema``), :func:`transfer_matrices`,
:func:`log_partition`, :func:`constrained_marginals`, :func:`sample`, :func:`map_decode`,
:class:`ConstrainedSampler`; :mod:`dlm_constrain.reference` (brute force), :mod:`dlm_constrain.baselines`,
:mod:`dlm_constrain.tasks` and :mod:`dlm_constrain.model` (the tiny masked-diffusion LM).
"""

__version__ = "0.1.0"

from dlm_constrain.automaton import TokenDFA
from dlm_constrain.inference import (
    METHODS,
    check_feasible,
    check_probs,
    constrained_marginals,
    log_partition,
    map_decode,
    sample,
    transfer_matrices,
)
from dlm_constrain.json_schema import schema_to_regex
from dlm_constrain.regex import CharDFA, compile_regex
from dlm_constrain.sampler import ConstrainedSampler, GenerationTrace

__all__ = [
    "METHODS",
    "CharDFA",
    "ConstrainedSampler",
    "GenerationTrace",
    "TokenDFA",
    "__version__",
    "check_feasible",
    "check_probs",
    "compile_regex",
    "constrained_marginals",
    "log_partition",
    "map_decode",
    "sample",
    "schema_to_regex",
    "transfer_matrices",
]
