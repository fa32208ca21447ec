"""Offline memory benchmark: seeded multi-session synthetic dialogues whose facts fall outside the window.

A dialogue is a few people (seeded names) chatting over several sessions. In the first history session
every person states a personal fact, a number ("Maya: my number is 7."); with probability
``update_prob`` the queried person's fact changes later ("Maya: update, my number is 3.")
— a conflict the answer must resolve to the newest value. Chit-chat lines by the same speakers fill the
sessions. The history occupies ``n_history`` windows of exactly ``window`` tokens; the final window is
chit-chat followed by the question and the answer prefix:

    Q: What is the number of Maya?
    Maya: my number is 3

The answer prefix repeats the fact's own words, so a backbone that sees the fact can copy it (the
testbed models are trained on needle retrieval of numbers), and the answer is one token.

Only the final window fits the backbone's attention; the facts are 1 to ``n_history`` windows back.
Scoring is exact: a question counts as solved when every answer token is the greedy prediction.
Tokens are bytes (the testbed's byte tokenizer: id = byte, BOS = 256).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from papershelf.errors import InputError, check_choice, check_int, check_number

BOS = 256  # the testbed tokenizer's <bos>
FACT_POSITIONS = ("random", "end")
NAMES = (
    "Maya", "Omar", "Lena", "Ravi", "Ines", "Theo", "Yuki", "Nora",
    "Ezra", "Sana", "Hugo", "Alba", "Kofi", "Mila", "Joon", "Zara",
)  # fmt: skip
VALUES = tuple("0123456789")  # one token each: the answer is a single exact token
MAX_PEOPLE = len(VALUES) - 1  # distinct numbers per person, one digit left free for the update
CHAT = (
    "did you see the game last night?", "I had pasta for lunch.", "the weather is lovely today.",
    "my cat knocked over a plant.", "I am reading a long novel.", "work was busy this week.",
    "we should plan a trip soon.", "I started running again.", "the new cafe is good.",
    "I fixed my old bike.", "the train was late again.", "I baked bread on Sunday.",
    "my sister called me.", "I watched a documentary.", "the concert was loud.",
    "I need a new phone.", "we played chess for hours.", "I am learning to paint.",
    "the market had fresh figs.", "I lost my umbrella.",
)  # fmt: skip


@dataclass(frozen=True)
class Dialogue:
    """``history`` (n_history, window) and ``window`` (window,) int64 token ids; ``answer_mask`` marks the
    answer tokens of ``window``; ``messages`` are the history lines (for retrieval); ``question`` the text."""

    history: np.ndarray
    window: np.ndarray
    answer_mask: np.ndarray
    messages: tuple[str, ...]
    question: str
    answer: str
    stale: str | None
    person: str
    tail: int  # tokens of the question + answer at the end of ``window``


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def _chat_lines(rng, people, n):
    return [
        f"{people[int(rng.integers(len(people)))]}: {CHAT[int(rng.integers(len(CHAT)))]}\n" for _ in range(n)
    ]


def _fill_window(
    rng, facts: list[str], people, window: int, at_end: bool = False
) -> tuple[list[int], list[str]]:
    """A window of exactly ``window`` tokens: BOS, chat with the ``facts`` lines at random places (or,
    with ``at_end``, as the window's last lines, right before the next window starts)."""
    need = 1 + sum(len(encode(f)) for f in facts)
    if need > window:
        raise InputError(f"window {window} is too short for the facts of a session ({need} tokens)")
    lines = _chat_lines(rng, people, window // 8)
    if at_end and facts:
        chat, used = [], need
        for line in lines:
            if used + len(encode(line)) > window:
                break
            chat.append(line)
            used += len(encode(line))
        merged = chat + facts
        pre = [BOS] + [b for line in chat for b in encode(line)]
        ids = pre + encode(" " * (window - used)) + [b for line in facts for b in encode(line)]
        return ids, merged
    slots = sorted(int(x) for x in rng.integers(0, max(1, window // 40), size=len(facts)))
    merged, used = [], need
    fi = 0
    for i, line in enumerate(lines):
        while fi < len(facts) and slots[fi] <= i:
            merged.append(facts[fi])
            fi += 1
        if used + len(encode(line)) > window:
            break
        merged.append(line)
        used += len(encode(line))
    merged += facts[fi:]
    ids = [BOS] + [b for line in merged for b in encode(line)]
    pad = window - len(ids)
    ids += encode(" " * pad)
    return ids, merged


def make_dialogue(
    seed: int,
    *,
    window: int = 128,
    n_history: int = 1,
    n_people: int = 3,
    update_prob: float = 0.5,
    fact_position: str = "random",
    final_chat: int | None = None,
) -> Dialogue:
    """One seeded dialogue (see the module docstring). ``fact_position="end"`` puts the facts at the end
    of the last history window, a few tokens before the final window starts, and ``final_chat`` caps the
    chat tokens before the question in the final window (which is then shorter than ``window``): together
    an easy curriculum, the fact a few tokens before the window's start and the question right after."""
    seed = check_int("seed", seed, low=0)  # numpy's own errors for -1 or 1.5 name no argument
    window = check_int("window", window, low=64)
    n_history = check_int("n_history", n_history, low=1)
    # each person gets a distinct one-digit number and an update needs a digit nobody holds: at most 9
    n_people = check_int("n_people", n_people, low=1, high=MAX_PEOPLE)
    update_prob = check_number("update_prob", update_prob, low=0, high=1)
    check_choice("fact_position", fact_position, FACT_POSITIONS)
    rng = np.random.default_rng(seed)
    people = [str(p) for p in rng.choice(NAMES, size=n_people, replace=False)]
    homes = [str(c) for c in rng.choice(VALUES, size=n_people, replace=False)]
    target = int(rng.integers(n_people))
    person = people[target]
    facts = [f"{p}: my number is {c}.\n" for p, c in zip(people, homes)]
    order = rng.permutation(n_people)
    sessions: list[list[str]] = [[facts[i] for i in order]] + [[] for _ in range(n_history - 1)]
    answer, stale = homes[target], None
    if rng.random() < update_prob:
        new = str(rng.choice([c for c in VALUES if c not in homes]))
        stale, answer = answer, new
        move = f"{person}: update, my number is {new}.\n"
        if n_history > 1:
            sessions[int(rng.integers(1, n_history))].append(move)
        else:
            sessions[0].append(move)  # after the first facts: _fill_window keeps the order
    history, messages = [], []
    if fact_position == "end" and n_history > 1:
        sessions = [[] for _ in range(n_history - 1)] + [[line for ses in sessions for line in ses]]
    for facts_j in sessions:
        ids, lines = _fill_window(rng, facts_j, people, window, at_end=fact_position == "end")
        history.append(ids)
        messages += [line.strip() for line in lines]
    question = f"\nQ: What is the number of {person}?\n{person}: my number is "
    q_ids, a_ids = encode(question), encode(answer)
    budget = window - 1 - len(q_ids) - len(a_ids)
    if budget < 0:
        raise InputError(f"window {window} is too short for the question")
    if final_chat is not None:
        budget = min(budget, check_int("final_chat", final_chat, low=0))
    chat = [b for line in _chat_lines(rng, people, window // 8 + 2) for b in encode(line)]
    final = [BOS, *chat[len(chat) - budget :], *q_ids, *a_ids] if budget else [BOS, *q_ids, *a_ids]
    mask = np.zeros(len(final), dtype=bool)
    mask[len(final) - len(a_ids) :] = True
    return Dialogue(
        history=np.asarray(history, dtype=np.int64),
        window=np.asarray(final, dtype=np.int64),
        answer_mask=mask,
        messages=tuple(messages),
        question=question.strip().split("\n")[0],
        answer=answer,
        stale=stale,
        person=person,
        tail=len(q_ids) + len(a_ids),
    )


def make_dialogues(n: int, seed: int, **kwargs) -> list[Dialogue]:
    """``n`` dialogues from seeds ``seed * 100_003 + i`` (disjoint streams for different seeds)."""
    n = check_int("n", n, low=1)
    seed = check_int("seed", seed, low=0)
    return [make_dialogue(seed * 100_003 + i, **kwargs) for i in range(n)]


def words(text: str) -> list[str]:
    """Lower-cased word tokens for BM25."""
    return re.findall(r"[a-z0-9]+", text.lower())


def stack(dialogues: list[Dialogue]):
    """Tensors ``history`` (B, n_history, W), ``window`` (B, W), ``answer_mask`` (B, W)."""
    import torch

    return (
        torch.from_numpy(np.stack([d.history for d in dialogues])),
        torch.from_numpy(np.stack([d.window for d in dialogues])),
        torch.from_numpy(np.stack([d.answer_mask for d in dialogues])),
    )
