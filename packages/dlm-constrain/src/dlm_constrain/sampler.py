"""The decoding loop for masked diffusion LMs, with exact constrained proposals and pluggable baselines.

At every denoising step the model gives per-position distributions; decoded positions are one-hot.  The
proposal draws a *whole* sequence ``x̂`` from the constrained mean-field posterior ``q_A`` (or its MAP
string when greedy), then the remasking schedule keeps ``k`` of the still-masked positions of the
current block (highest confidence, or random) and leaves the others masked.  Because ``x̂`` is a complete
accepted string that agrees with everything already decoded, every partially decoded sequence keeps a
valid completion: constraint satisfaction holds by construction, with no dead ends.

>>> import torch
>>> from dlm_constrain import TokenDFA, ConstrainedSampler
>>> vocab = ["0", "1", "<eos>"]
>>> dfa = TokenDFA.from_regex("(01)+", vocab, eos_id=2)
>>> flat = lambda x: torch.zeros(len(x), 3)              # a "model" with uniform logits
>>> sampler = ConstrainedSampler(flat, dfa, steps=3, remasking="random")
>>> out = sampler.generate(6, generator=torch.Generator().manual_seed(0))
>>> dfa.accepts(out.tolist())
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from dlm_constrain import inference
from dlm_constrain.automaton import TokenDFA
from papershelf.errors import InputError, check_choice, check_int, check_number

REMASKING = ("confidence", "random")
STRATEGIES = ("exact", "unconstrained", "local", "dingo")
CONFIDENCE = ("model", "marginal")


@dataclass
class GenerationTrace:
    """Per step: the positions committed, and the token array after the step (``-1`` = still masked)."""

    committed: list[list[int]] = field(default_factory=list)
    states: list[list[int]] = field(default_factory=list)


class ConstrainedSampler:
    """Masked-diffusion decoding under a token automaton.

    ``model_fn(x) -> logits``: ``x`` is a LongTensor ``[n]`` holding token ids, with ``mask_id`` at
    still-masked positions; ``logits`` is ``[n, V]`` with ``V = automaton.vocab_size`` (any callable: a
    real DLM wrapped to return the logits of the generated window).  ``steps``: denoising steps in total
    (split evenly over blocks); ``remasking``: ``"confidence"`` (commit the ``k`` most confident positions)
    or ``"random"``; ``block_size``: semi-autoregressive blocks (``None`` = one block, fully parallel).
    ``strategy``: ``"exact"`` (ours), or the baselines ``"unconstrained"``, ``"local"`` (left-to-right
    next-token masking) and ``"dingo"`` (argmax-only prefix-valid DP per block).  ``greedy``: argmax /
    MAP proposals instead of sampling; ``temperature`` divides the logits; ``method`` picks the exact
    sampler (``sequential``, ``scan``, ``bisect``); ``confidence``: score of a proposed token by the model
    probability or by its constrained marginal.
    """

    def __init__(
        self,
        model_fn: Callable[[torch.Tensor], torch.Tensor],
        automaton: TokenDFA,
        steps: int,
        remasking: str = "confidence",
        block_size: int | None = None,
        *,
        strategy: str = "exact",
        greedy: bool = False,
        temperature: float = 1.0,
        method: str = "sequential",
        confidence: str = "model",
        mask_id: int | None = None,
    ) -> None:
        if not callable(model_fn):
            raise InputError("model_fn must be callable: model_fn(tokens [n]) -> logits [n, V]")
        if not isinstance(automaton, TokenDFA):
            raise InputError(f"automaton must be a TokenDFA, got {type(automaton).__name__}")
        self.model_fn = model_fn
        self.automaton = automaton
        self.steps = check_int("steps", steps, low=1)
        self.remasking = check_choice("remasking", remasking, REMASKING)
        self.block_size = None if block_size is None else check_int("block_size", block_size, low=1)
        self.strategy = check_choice("strategy", strategy, STRATEGIES)
        self.greedy = bool(greedy)
        self.temperature = check_number("temperature", temperature, low=0, low_open=True)
        self.method = check_choice("method", method, inference.METHODS)
        self.confidence = check_choice("confidence", confidence, CONFIDENCE)
        self.mask_id = automaton.vocab_size if mask_id is None else check_int("mask_id", mask_id, low=0)
        self._float64_buffer: torch.Tensor | None = None

    # ------------------------------------------------------------------------------------ the loop
    def generate(
        self, length: int, *, generator: torch.Generator | None = None, trace: GenerationTrace | None = None
    ) -> torch.Tensor:
        """Decode ``length`` positions: LongTensor ``[length]`` (accepted when ``strategy="exact"``)."""
        n = check_int("length", length, low=1)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise InputError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        dfa = self.automaton
        if self.strategy == "exact":
            dfa.check_length(n)
        B = n if self.block_size is None else min(self.block_size, n)
        blocks = [(a, min(n, a + B)) for a in range(0, n, B)]
        per_block = [
            self.steps // len(blocks) + (1 if j < self.steps % len(blocks) else 0) for j in range(len(blocks))
        ]
        per_block = [max(1, s) for s in per_block]
        x = torch.full((n,), self.mask_id, dtype=torch.long)
        decoded = torch.zeros(n, dtype=torch.bool)
        for (a, b), n_steps in zip(blocks, per_block):
            for step in range(n_steps):
                remaining = int((~decoded[a:b]).sum())
                if remaining == 0:
                    break
                k = math.ceil(remaining / (n_steps - step))
                logits = self.model_fn(x.clone())
                chosen, tokens = self.step(logits, x, decoded, (a, b), k, generator=generator)
                x[chosen] = tokens
                decoded[chosen] = True
                if trace is not None:
                    trace.committed.append(sorted(chosen.tolist()))
                    trace.states.append(torch.where(decoded, x, -1).tolist())
        return x

    def step(
        self,
        logits,
        x: torch.Tensor,
        decoded: torch.Tensor,
        block: tuple[int, int],
        k: int,
        *,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One denoising step after the model call: the positions to commit and their tokens.

        ``logits [n, V]`` from the model; ``x``/``decoded``: the current tokens and which are final;
        ``block = (a, b)``: the window the schedule may unmask; ``k``: how many to unmask.  This is all
        the work a decode step adds to the model forward (softmax, the constrained proposal, confidence
        and remasking), and what ``bench`` times against the forward.
        """
        n = x.shape[0]
        a, b = block
        p = self._probs(logits, n, self.automaton.vocab_size, x, decoded)
        proposal, conf = self._propose(p, x, decoded, block, generator)
        candidates = torch.nonzero(~decoded[a:b]).flatten() + a
        if self.remasking == "confidence":
            order = torch.argsort(conf[candidates], descending=True, stable=True)
        else:
            order = torch.randperm(len(candidates), generator=generator)
        chosen = candidates[order[:k]]
        return chosen, proposal[chosen]

    def _probs(self, logits, n: int, V: int, x: torch.Tensor, decoded: torch.Tensor) -> torch.Tensor:
        if not isinstance(logits, torch.Tensor):
            try:
                arr = np.asarray(logits)
                if arr.dtype == object or arr.dtype.kind not in "iuf":
                    raise TypeError
                logits = torch.as_tensor(arr)
            except (TypeError, ValueError):
                raise InputError(
                    f"model_fn must return a real array of logits [{n}, {V}], got {type(logits).__name__}"
                ) from None
        if logits.is_complex() or logits.dtype == torch.bool:
            raise InputError(f"model_fn must return real-valued logits, got dtype {logits.dtype}")
        if logits.ndim != 2 or logits.shape[0] != n:
            raise InputError(f"model_fn must return logits of shape [{n}, {V}], got {tuple(logits.shape)}")
        if logits.shape[1] != V:
            raise InputError(
                f"vocabulary mismatch: model_fn returned {logits.shape[1]} logits per position "
                f"but {self.automaton.name} has a vocabulary of {V}"
            )
        logits = logits.detach().to("cpu")
        if not logits.is_floating_point():
            logits = logits.to(torch.float64)
        elif logits.dtype not in (torch.float32, torch.float64):
            logits = logits.float()  # bfloat16/float16 (a real DLM's output): the numpy paths need float32
        # softmax in the model's own precision (float32 for a float32 model); the exact proposal sums it
        # into token classes in float64, the baselines and the marginals get a float64 copy
        p = torch.softmax(logits if self.temperature == 1 else logits / self.temperature, dim=-1)
        if not bool(torch.isfinite(p.sum(1)).all()):  # NaN anywhere in a row, or a row of only -inf
            if bool(torch.isnan(logits).any()):
                raise InputError("model_fn returned NaN logits")
            raise InputError("model_fn returned a row of logits with +inf or with no finite entry")
        rows = decoded.nonzero().view(-1)
        p.index_fill_(0, rows, 0.0).index_put_((rows, x.index_select(0, rows)), p.new_ones(()))
        return p

    def _float64(self, p: torch.Tensor) -> torch.Tensor:
        """``p`` in float64, in a buffer kept across steps (``p`` never outlives its step).

        At V = 128K a fresh ``[n, V]`` float64 tensor per step costs more than the softmax itself (the
        allocation's page faults).  Values equal ``p.to(torch.float64)``.
        """
        if p.dtype == torch.float64:
            return p
        if self._float64_buffer is None or self._float64_buffer.shape != p.shape:
            self._float64_buffer = torch.empty(p.shape, dtype=torch.float64)
        return self._float64_buffer.copy_(p)

    def _propose(self, p, x, decoded, block, gen) -> tuple[torch.Tensor, torch.Tensor]:
        """A full proposed sequence and a confidence per position."""
        dfa = self.automaton
        if self.strategy == "exact":
            # p is a softmax with decoded rows one-hot: already checked and normalised
            prop = inference._sample(p, dfa, 1, self.method, self.greedy, gen)[0]
            if self.confidence == "marginal":
                conf = inference._marginals(self._float64(p), dfa).gather(1, prop[:, None])[:, 0]
                return prop, conf
        else:
            from dlm_constrain import baselines

            p = self._float64(p)
            prop = baselines.PROPOSERS[self.strategy](p, dfa, x, decoded, block, self.greedy, gen)
        # the model probability of each proposed token (float32 values order exactly as in float64)
        return prop, p.gather(1, prop[:, None])[:, 0].double()
