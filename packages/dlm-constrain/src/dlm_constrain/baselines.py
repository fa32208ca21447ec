"""Baselines run through the same decoding loop (:class:`~dlm_constrain.sampler.ConstrainedSampler`).

* ``unconstrained``: every masked position drawn independently from the model (or its argmax).
* ``local``: autoregressive-style masking applied to a DLM — only the leftmost masked position (whose
  prefix is fully decoded) is restricted to tokens that keep the automaton alive; everything to its right
  is unconstrained.  Valid next-token masks do not see the other positions decoded in the same step.
* ``dingo``: a DINGO-style argmax-only dynamic program over the current block: the most probable block
  string that keeps the decoded prefix a valid *prefix* of the language (its end state can still reach
  acceptance in some number of steps), ignoring the rest of the window and its length.  Always argmax.
"""

from __future__ import annotations

import numpy as np
import torch

from dlm_constrain import inference
from dlm_constrain.automaton import TokenDFA


def _categorical(p: torch.Tensor, greedy: bool, gen) -> torch.Tensor:
    if greedy:
        return p.argmax(-1)
    return inference._categorical(p, gen)


def propose_unconstrained(p, dfa, x, decoded, block, greedy, gen) -> torch.Tensor:
    return _categorical(p, greedy, gen)


def propose_local(p, dfa: TokenDFA, x, decoded, block, greedy, gen) -> torch.Tensor:
    prop = _categorical(p, greedy, gen)
    masked = torch.nonzero(~decoded).flatten()
    if len(masked) == 0:
        return prop
    j = int(masked[0])
    q = dfa.run(x[:j].tolist())
    if q == dfa.dead:
        return prop
    allowed = torch.from_numpy(_alive(dfa)[dfa.table[q]])
    w = p[j] * allowed
    if w.sum() > 0:
        prop[j] = _categorical(w[None], greedy, gen)[0]
    return prop


def _alive(dfa: TokenDFA) -> np.ndarray:
    """bool [Q]: the state can still reach acceptance (prefix validity, any length)."""
    if "alive" not in dfa._cache:
        dfa._cache["alive"] = dfa.completable(dfa.num_states).any(axis=0)
    return dfa._cache["alive"]


def propose_dingo(p, dfa: TokenDFA, x, decoded, block, greedy, gen) -> torch.Tensor:
    a, b = block
    prop = p.argmax(-1)
    # the prefix before the block is fully decoded in block-wise decoding
    q = dfa.run(x[:a].tolist()) if bool(decoded[:a].all()) else dfa.dead
    if q == dfa.dead:
        return prop
    shared = {k: v for k, v in dfa._cache.items() if k == "plan"}  # accept-independent
    prefix_dfa = TokenDFA(dfa.table, _alive(dfa), q, dfa.dead, dfa.vocab, dfa.eos_id, dfa.name, shared)
    try:
        best = inference.map_decode(p[a:b], prefix_dfa)
    except ValueError:  # no prefix-valid block: DINGO has no answer, fall back to the argmax
        return prop
    prop[a:b] = best
    return prop


PROPOSERS = {"unconstrained": propose_unconstrained, "local": propose_local, "dingo": propose_dingo}

__all__ = ["PROPOSERS", "propose_dingo", "propose_local", "propose_unconstrained"]
