"""Long-context tasks with exact scorers: passkey, multi-key needle-in-a-haystack, multi-query associative
recall (MQAR) and variable tracking.

Every generator takes a length (in tokens = bytes, special tokens included) and a seed and returns a
:class:`Sample`: the token ids, and for each answer token the index of the question it answers. A
question counts as solved when every one of its answer tokens is the model's greedy prediction given
the tokens before it — exactly the condition for greedy decoding to produce the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from papershelf.errors import InputError, check_choice, check_int
from papershelf_lm.corpus import corpus_bytes
from papershelf_lm.tokenizer import BOS, KEY, QUERY, SEP, VAL, encode_text

TASKS = ("passkey", "niah", "mqar", "vartrack")
NAMES = (
    "apple", "river", "stone", "cloud", "tiger", "maple", "ember", "harbor",
    "violet", "falcon", "copper", "meadow", "thunder", "silver", "orchid", "canyon",
)  # fmt: skip


@dataclass(frozen=True)
class Sample:
    """``ids`` (int64, T) and ``question`` (int64, T): the question an answer token belongs to, or -1."""

    task: str
    ids: np.ndarray
    question: np.ndarray
    answers: tuple[str, ...]

    @property
    def n_questions(self) -> int:
        return int(self.question.max()) + 1

    @property
    def answer_mask(self) -> np.ndarray:
        return self.question >= 0

    @property
    def prompt_length(self) -> int:
        """Tokens before the first answer token (what a generation run is fed)."""
        return int(np.argmax(self.answer_mask))


def score(sample: Sample, predictions: np.ndarray) -> float:
    """Fraction of questions solved; ``predictions[t]`` is the greedy prediction of token t (from < t)."""
    predictions = np.asarray(predictions)
    if predictions.shape != sample.ids.shape:
        raise InputError(f"predictions must have shape {sample.ids.shape}, got {predictions.shape}")
    right = predictions == sample.ids
    solved = [bool(right[sample.question == q].all()) for q in range(sample.n_questions)]
    return float(np.mean(solved))


def _filler(rng: np.random.Generator, n: int, split: str) -> list[int]:
    """``n`` bytes of corpus text from a random offset (whole lines, padded with spaces)."""
    text = corpus_bytes(split)
    if n <= 0:
        return []
    start = int(rng.integers(0, max(1, len(text) - n - 1)))
    start = text.rfind(b"\n", 0, start) + 1  # begin at a line start
    chunk = text[start : start + n]
    return list(chunk.ljust(n, b" "))


def _digits(rng: np.random.Generator, n: int) -> str:
    return "".join(str(d) for d in rng.integers(0, 10, size=n))


def _assemble(task: str, parts: list[tuple[list[int], int]], answers: tuple[str, ...]) -> Sample:
    """Concatenate (tokens, question id or -1) parts."""
    ids = np.concatenate([np.asarray(p, dtype=np.int64) for p, _ in parts])
    question = np.concatenate([np.full(len(p), q, dtype=np.int64) for p, q in parts])
    return Sample(task, ids, question, answers)


def _haystack(rng, length, needles: list[list[int]], tail: list[int], split: str) -> list[int]:
    """Filler of the right size with the needles at random depths, followed by ``tail``."""
    budget = length - 1 - len(tail) - sum(len(n) for n in needles)
    if budget < 0:
        raise InputError(f"length {length} is too short for this task's needles and question")
    cuts = np.sort(rng.integers(0, budget + 1, size=len(needles)))
    filler = _filler(rng, budget, split)
    out, prev = [BOS], 0
    for cut, needle in zip(cuts, needles):
        out += filler[prev:cut] + needle
        prev = cut
    return out + filler[prev:] + tail


def passkey(length: int, seed: int, *, digits: int = 5, split: str = "train") -> Sample:
    """A pass key hidden at a random depth in corpus text; the question at the end asks for it."""
    rng = np.random.default_rng(seed)
    key = _digits(rng, digits)
    needle = encode_text(f"\nThe pass key is {key}. Remember it. {key} is the pass key.\n")
    question = encode_text("\nWhat is the pass key? The pass key is ")
    ids = _haystack(rng, length - digits, [needle], question, split)
    return _assemble("passkey", [(ids, -1), (encode_text(key), 0)], (key,))


def niah(length: int, seed: int, *, keys: int = 4, digits: int = 6, split: str = "train") -> Sample:
    """Several "magic number" needles with different names; one of them is queried.

    Short lengths get fewer needles (at least one), so the haystack still fits.
    """
    rng = np.random.default_rng(seed)
    keys = max(1, min(keys, (length - 60 - digits) // (45 + digits)))
    names = rng.choice(NAMES, size=keys, replace=False)
    values = [_digits(rng, digits) for _ in names]
    needles = [encode_text(f"\nThe special magic number for {n} is {v}.\n") for n, v in zip(names, values)]
    target = int(rng.integers(keys))
    question = encode_text(f"\nThe special magic number for {names[target]} is ")
    ids = _haystack(rng, length - digits, needles, question, split)
    return _assemble("niah", [(ids, -1), (encode_text(values[target]), 0)], (values[target],))


# Single-token keys and values, as in MQAR: letters for keys, digits and punctuation for values.
_MQAR_KEYS = list(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_MQAR_VALUES = list(b"0123456789!#$%&*+=?@")


def mqar(length: int, seed: int, *, pairs: int | None = None, queries: int | None = None) -> Sample:
    """Key-value pairs ``<key> k <val> v`` then queries ``<query> k <val> ?`` answered by v.

    Defaults fill ``length``: as many pairs as fit with a quarter of the tokens left for queries.
    """
    rng = np.random.default_rng(seed)
    if pairs is None:
        pairs = min(len(_MQAR_KEYS), max(1, (length - 2) * 3 // 16))
    if queries is None:
        queries = max(1, (length - 2 - 4 * pairs) // 4)
    pairs = check_int("pairs", pairs, low=1, high=len(_MQAR_KEYS))
    queries = check_int("queries", queries, low=1)
    if 2 + 4 * pairs + 4 * queries > length:
        raise InputError(f"length {length} is too short for {pairs} pairs and {queries} queries")
    keys = rng.choice(_MQAR_KEYS, size=pairs, replace=False)
    values = rng.choice(_MQAR_VALUES, size=pairs)
    parts: list[tuple[list[int], int]] = [([BOS], -1)]
    for k, v in zip(keys, values):
        parts.append(([KEY, int(k), VAL, int(v)], -1))
    parts.append(([SEP], -1))
    asked = rng.integers(0, pairs, size=queries)
    answers = []
    for q, i in enumerate(asked):
        parts += [([QUERY, int(keys[i]), VAL], -1), ([int(values[i])], q)]
        answers.append(chr(values[i]))
    pad = length - sum(len(p) for p, _ in parts)
    parts.insert(1, (_filler(rng, pad, "train") if pad > 0 else [], -1))
    return _assemble("mqar", parts, tuple(answers))


def vartrack(length: int, seed: int, *, hops: int = 4, digits: int = 5, split: str = "train") -> Sample:
    """A value assigned to a variable, then passed along a chain; list every variable holding it."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    names = ["".join(rng.choice(letters, size=3)) for _ in range(hops + 1)]
    while len(set(names)) < len(names):
        names = ["".join(rng.choice(letters, size=3)) for _ in range(hops + 1)]
    value = _digits(rng, digits)
    statements = [f"\nVAR {names[0]} = {value}.\n"] + [
        f"\nVAR {names[i + 1]} = VAR {names[i]}.\n" for i in range(hops)
    ]
    answer = " ".join(names)
    question = encode_text(f"\nVariables that hold {value}: ")
    ids = _haystack(rng, length - len(answer), [encode_text(s) for s in statements], question, split)
    return _assemble("vartrack", [(ids, -1), (encode_text(answer), 0)], (answer,))


GENERATORS = {"passkey": passkey, "niah": niah, "mqar": mqar, "vartrack": vartrack}


def generate(task: str, length: int, seed: int, **kwargs) -> Sample:
    """One sample of ``task`` with exactly ``length`` tokens."""
    task = check_choice("task", task, TASKS)
    length = check_int("length", length, low=16)
    sample = GENERATORS[task](length, seed, **kwargs)
    assert sample.ids.size == length, (task, sample.ids.size, length)
    return sample
