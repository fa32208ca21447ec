"""Training and evaluation data from the LM testbed's synthetic tasks (passkey, MQAR) and corpus text.

The testbed (``papershelf-lm``, the ``[bench]`` extra) generates every sample locally with its ground
truth; nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import torch

from papershelf.errors import InputError, MissingDependencyError

TASKS = ("passkey", "mqar", "passkey-mini")
PASSKEY_MINI_DIGITS = 1


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
    return {"split": split} if task.startswith("passkey") else {"pairs": MQAR_PAIRS}


def passkey_mini(length: int, seed: int, *, digits: int = PASSKEY_MINI_DIGITS, split: str = "train"):
    """The testbed's passkey task in compact form: ``<key> d1..dn`` hidden at a uniformly random depth in
    the testbed's corpus text, asked at the end by ``<query>``, answered by ``d1..dn``. The needle and the
    question are single marker tokens instead of English sentences (~100 bytes), so a ~100 k-parameter
    model learns the retrieval in a few hundred steps and the key can sit anywhere in a short context."""
    from papershelf_lm.corpus import corpus_bytes
    from papershelf_lm.tasks import Sample
    from papershelf_lm.tokenizer import BOS, KEY, QUERY

    rng = np.random.default_rng(seed)
    key = [int(c) for c in rng.integers(ord("0"), ord("9") + 1, size=digits)]
    budget = length - 3 - 2 * digits  # <bos>, <key>, <query> and the key twice
    if budget < 0:
        raise InputError(f"length {length} is too short for passkey-mini with {digits} digits")
    text = corpus_bytes(split)
    start = int(rng.integers(0, max(1, len(text) - budget - 1)))
    filler = list(text[start : start + budget].ljust(budget, b" "))
    cut = int(rng.integers(0, budget + 1))
    ids = [BOS, *filler[:cut], KEY, *key, *filler[cut:], QUERY, *key]
    question = [-1] * (len(ids) - digits) + [0] * digits
    return Sample(
        "passkey-mini",
        np.asarray(ids, dtype=np.int64),
        np.asarray(question, dtype=np.int64),
        ("".join(map(chr, key)),),
    )


def _generate(task: str, length: int, seed: int, split: str):
    if task == "passkey-mini":
        testbed()
        return passkey_mini(length, seed, split=split)
    return testbed().generate(task, length, seed, **_kwargs(task, split))


def task_batch(tasks: tuple[str, ...], length: int, batch: int, seed: int, *, split: str = "train"):
    """(ids (B, T), weights (B, T)): ``weights[b, t]`` = 1 where token t is an answer token (its loss is
    on predicting it from < t). Rows cycle through ``tasks``. MQAR uses ``MQAR_PAIRS`` pairs."""
    testbed()
    for t in tasks:
        if t not in TASKS:
            raise InputError(f"task must be one of {TASKS}, got {t!r}")
    ids, w = [], []
    for i in range(batch):
        task = tasks[i % len(tasks)]
        s = _generate(task, length, seed * 100_003 + i, split)
        ids.append(s.ids)
        w.append(s.answer_mask.astype(np.float32))
    return torch.from_numpy(np.stack(ids)), torch.from_numpy(np.stack(w))


def check_tasks(tasks: tuple[str, ...], lengths: tuple[int, ...]) -> None:
    """Generate one sample of every task at every length now, so a length a task cannot fill is refused
    before a training run rather than after it."""
    for task in tasks:
        if task not in TASKS:
            raise InputError(f"task must be one of {TASKS}, got {task!r}")
        for length in lengths:
            try:
                _generate(task, length, 0, "validation")
            except (InputError, ValueError) as exc:
                raise InputError(f"--tasks {task} at length {length}: {exc}") from None


def samples(task: str, length: int, n: int, seed: int):
    return [_generate(task, length, seed + i, "validation") for i in range(n)]


def score(sample, predictions: np.ndarray) -> float:
    return testbed().score(sample, predictions)
