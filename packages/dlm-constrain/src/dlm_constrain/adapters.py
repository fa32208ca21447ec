"""Adapters from a real masked diffusion LM to the ``model_fn`` that :class:`ConstrainedSampler` calls.

A diffusion LM (LLaDA, Dream, or this package's :class:`~dlm_constrain.model.TinyMDM`) reads the prompt
followed by the answer window, where masked positions hold its mask token, and returns logits for every
position.  :func:`prompted_model_fn` wraps such a model: it prepends the prompt, keeps the answer
window's logits, drops output columns beyond the automaton's vocabulary (models often pad their output
layer) and forbids the mask token, so the sampler sees distributions over real tokens only.

>>> import torch
>>> from dlm_constrain import ConstrainedSampler, TokenDFA
>>> from dlm_constrain.adapters import prompted_model_fn
>>> vocab = ["0", "1", "<eos>", "<mask>"]                 # the mask token is part of the vocabulary
>>> dfa = TokenDFA.from_regex("(01)+", vocab, eos_id=2, special_ids=[3])
>>> model = lambda ids: torch.zeros(1, ids.shape[1], 6)  # a stand-in: [1, L] ids -> [1, L, 6] logits
>>> fn = prompted_model_fn(model, prompt_ids=[1, 0, 1], mask_id=3, vocab_size=len(vocab))
>>> sampler = ConstrainedSampler(fn, dfa, steps=3, mask_id=3)
>>> dfa.accepts(sampler.generate(6, generator=torch.Generator().manual_seed(0)).tolist())
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from papershelf.errors import InputError, check_int


def prompted_model_fn(
    model: Callable,
    prompt_ids: Sequence[int] | torch.Tensor,
    *,
    mask_id: int,
    vocab_size: int,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``model_fn(tokens [n]) -> logits [n, vocab_size]`` for a model called as ``model(ids [1, L])``.

    ``model`` may return a tensor ``[1, L, V']`` or an object with ``.logits`` (Hugging Face style);
    ``V' >= vocab_size`` (extra columns, e.g. padding of the output layer, are dropped).  The model is
    called under ``torch.no_grad`` on its own device with the prompt prepended; ``mask_id`` is the
    model's mask token (give the same id to ``ConstrainedSampler(mask_id=...)``), whose logit is set to
    ``-inf``.
    """
    if not callable(model):
        raise InputError("model must be callable: model(ids [1, L]) -> logits [1, L, V]")
    vocab_size = check_int("vocab_size", vocab_size, low=1)
    mask_id = check_int("mask_id", mask_id, low=0)
    try:
        prompt = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1)
    except (TypeError, ValueError, RuntimeError):
        raise InputError("prompt_ids must be a sequence of token ids") from None
    if bool((prompt < 0).any()):
        raise InputError("prompt_ids must be non-negative token ids")
    device = _device_of(model)

    @torch.no_grad()
    def fn(tokens: torch.Tensor) -> torch.Tensor:
        ids = torch.cat([prompt, tokens.to(torch.long).cpu()])[None].to(device)
        out = model(ids)
        logits = getattr(out, "logits", out)
        if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or logits.shape[:2] != ids.shape:
            shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            raise InputError(f"model must return logits of shape [1, {ids.shape[1]}, V], got {shape}")
        if logits.shape[2] < vocab_size:
            raise InputError(
                f"vocabulary mismatch: the model returns {logits.shape[2]} logits per position, "
                f"the automaton's vocabulary has {vocab_size}"
            )
        window = logits[0, len(prompt) :, :vocab_size].float().cpu().clone()
        if mask_id < vocab_size:
            window[:, mask_id] = -torch.inf  # a diffusion LM never proposes its mask token
        return window

    return fn


def _device_of(model) -> torch.device:
    params = getattr(model, "parameters", None)
    if callable(params):
        for p in params():
            return p.device
    return torch.device("cpu")


__all__ = ["prompted_model_fn"]
