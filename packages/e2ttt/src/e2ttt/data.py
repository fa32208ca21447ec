"""Training and evaluation data from the LM testbed's synthetic tasks (passkey, MQAR) and corpus text.

The testbed (``papershelf-lm``, the ``[bench]`` extra) generates every sample locally with its ground
truth; nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import torch

from papershelf.errors import InputError, MissingDependencyError

TASKS = ("passkey", "mqar")


def testbed():
    try:
        import papershelf_lm.tasks as tasks
    except ImportError:
        raise MissingDependencyError("papershelf_lm", package="e2ttt", extra="bench") from None
    return tasks


def vocab_size() -> int:
    testbed()
    from papershelf_lm.tokenizer import VOCAB_SIZE

    return int(VOCAB_SIZE)


MQAR_PAIRS = 8  # fixed key-value pairs at every length: queries fill the rest, so at 8x they reach far back


def _kwargs(task: str, split: str) -> dict:
    return {"split": split} if task == "passkey" else {"pairs": MQAR_PAIRS}


def task_batch(tasks: tuple[str, ...], length: int, batch: int, seed: int, *, split: str = "train"):
    """(ids (B, T), weights (B, T)): ``weights[b, t]`` = 1 where token t is an answer token (its loss is
    on predicting it from < t). Rows cycle through ``tasks``. MQAR uses ``MQAR_PAIRS`` pairs."""
    tb = testbed()
    for t in tasks:
        if t not in TASKS:
            raise InputError(f"task must be one of {TASKS}, got {t!r}")
    ids, w = [], []
    for i in range(batch):
        task = tasks[i % len(tasks)]
        s = tb.generate(task, length, seed * 100_003 + i, **_kwargs(task, split))
        ids.append(s.ids)
        w.append(s.answer_mask.astype(np.float32))
    return torch.from_numpy(np.stack(ids)), torch.from_numpy(np.stack(w))


def samples(task: str, length: int, n: int, seed: int):
    tb = testbed()
    return [tb.generate(task, length, seed + i, **_kwargs(task, "validation")) for i in range(n)]


def score(sample, predictions: np.ndarray) -> float:
    return testbed().score(sample, predictions)
