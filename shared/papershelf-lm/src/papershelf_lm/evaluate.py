"""Exact evaluation: task accuracy by length (greedy, teacher-forced over the answer) and bits per byte."""

from __future__ import annotations

import math

import numpy as np

from papershelf.errors import InputError
from papershelf_lm.corpus import corpus_bytes
from papershelf_lm.tasks import generate, score
from papershelf_lm.tokenizer import BOS


def _predictions(model, ids: np.ndarray) -> np.ndarray:
    """Greedy next-token predictions aligned with ``ids``: out[t] is predicted from ids[:t]."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids[None])).logits[0]
    pred = np.full(ids.shape, -1, dtype=np.int64)
    pred[1:] = logits[:-1].argmax(-1).numpy()
    return pred


def task_accuracy(model, task: str, length: int, *, n: int = 20, seed: int = 10_000, **kwargs) -> float:
    """Mean fraction of questions solved over ``n`` samples of ``task`` at ``length`` tokens.

    Greedy decoding produces an answer exactly when every answer token is the argmax given the
    correct prefix, so this teacher-forced check is the greedy-generation score, computed in one pass.
    """
    context = model.config.max_position_embeddings
    if length > 8 * context:
        raise InputError(f"length {length} is far beyond the model's context of {context} tokens")
    return float(np.mean([score(s, _predictions(model, s.ids)) for s in (
        generate(task, length, seed + i, split="validation", **kwargs) if task != "mqar"
        else generate(task, length, seed + i, **kwargs) for i in range(n))]))  # fmt: skip


def bits_per_byte(model, *, length: int = 512, n: int = 16, seed: int = 0) -> float:
    """Validation bits per byte on held-out standard-library files."""
    import torch
    import torch.nn.functional as F

    text = corpus_bytes("validation")
    rng = np.random.default_rng(seed)
    total, count = 0.0, 0
    for _ in range(n):
        start = int(rng.integers(0, len(text) - length))
        ids = torch.tensor([[BOS, *text[start : start + length - 1]]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        nll = F.cross_entropy(logits[0, :-1].float(), ids[0, 1:], reduction="sum")
        total += float(nll)
        count += length - 1
    return total / count / math.log(2)
