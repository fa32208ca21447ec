"""Transcripts and the exact error rates."""

import itertools

import numpy as np
import pytest
from papershelf_speech.evaluate import cer, edit_distance, error_rates, wer
from papershelf_speech.text import ALPHABET, decode, encode, sentence, vocabulary

from papershelf.errors import InputError


def test_sentences_are_seeded_and_stay_in_the_vocabulary():
    a = [sentence(np.random.default_rng([5, i])) for i in range(50)]
    b = [sentence(np.random.default_rng([5, i])) for i in range(50)]
    assert a == b and len(set(a)) > 40
    words = set(vocabulary())
    assert all(set(s.split()) <= words for s in a)
    assert all(decode(encode(s)) == s for s in a)


def test_encode_rejects_characters_outside_the_alphabet():
    with pytest.raises(InputError, match="alphabet"):
        encode("Hello!")
    assert ALPHABET[0] == "_" and decode([0, 5, 0, 6]) == "cd"


@pytest.mark.parametrize(
    ("ref", "hyp", "expected"),
    [
        ("the red dog runs", "the red dog runs", 0.0),
        ("the red dog runs", "the red dog run", 1 / 4),  # one substitution
        ("the red dog runs", "the dog runs", 1 / 4),  # one deletion
        ("the red dog runs", "the big red dog runs now", 2 / 4),  # two insertions
        ("a b c", "", 1.0),
        ("a b c", "c b a", 2 / 3),
        ("one two", "three four five six", 4 / 2),  # WER can exceed 1
    ],
)
def test_wer_on_known_cases(ref, hyp, expected):
    assert wer(ref, hyp) == pytest.approx(expected, abs=0)


def test_corpus_wer_pools_edits_over_all_words_and_cer_counts_characters():
    scores = error_rates(["a b c d", "e f"], ["a x c d", ""])
    assert scores["wer"] == 3 / 6 and scores["words"] == 6
    assert cer("abc", "abd") == 1 / 3
    assert cer("ab cd", "ab  cd") == 0.0  # whitespace is normalised
    with pytest.raises(InputError, match="hypotheses"):
        wer(["a"], ["a", "b"])
    with pytest.raises(InputError, match="no words"):
        wer([""], [""])


def _brute_distance(a, b):
    """Shortest edit script by breadth-first search over strings (tiny inputs only)."""
    frontier, seen, steps = {a}, {a}, 0
    alphabet = set(a) | set(b)
    while b not in frontier:
        nxt = set()
        for s in frontier:
            for i in range(len(s) + 1):
                for c in alphabet:
                    nxt.add(s[:i] + c + s[i:])
                    if i < len(s):
                        nxt.add(s[:i] + c + s[i + 1 :])
                if i < len(s):
                    nxt.add(s[:i] + s[i + 1 :])
        frontier, steps = nxt - seen, steps + 1
        seen |= nxt
    return steps


def test_edit_distance_equals_brute_force_on_all_short_strings():
    strings = ["".join(p) for n in range(4) for p in itertools.product("ab", repeat=n)]
    for a, b in itertools.product(strings, repeat=2):
        assert edit_distance(a, b) == _brute_distance(a, b), (a, b)
