"""Transcripts: a seeded sentence generator over a fixed vocabulary, and the character alphabet."""

from __future__ import annotations

import numpy as np

from papershelf.errors import InputError

# The CTC output alphabet: index 0 is the blank, then space, apostrophe and a-z.
BLANK = 0
ALPHABET = "_ 'abcdefghijklmnopqrstuvwxyz"
VOCAB_SIZE = len(ALPHABET)
_INDEX = {c: i for i, c in enumerate(ALPHABET) if i != BLANK}

# A fixed vocabulary of common, regularly pronounced English words, by part of speech.
# fmt: off
WORDS = {
    "det": ["the", "a", "this", "that", "my", "your", "our", "every", "one", "some"],
    "num": ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "twenty"],
    "adj": [
        "red", "blue", "green", "yellow", "black", "white", "small", "large", "old", "new", "quick",
        "slow", "quiet", "loud", "happy", "bright", "dark", "warm", "cold", "heavy", "empty", "clean",
    ],
    "noun": [
        "dog", "cat", "bird", "fish", "horse", "child", "teacher", "doctor", "farmer", "driver", "house",
        "garden", "river", "window", "table", "chair", "book", "letter", "car", "train", "boat", "city",
        "road", "tree", "apple", "bread", "music", "morning", "evening", "door", "box", "phone",
    ],
    "nouns": [
        "dogs", "cats", "birds", "horses", "children", "teachers", "doctors", "farmers", "houses",
        "windows", "tables", "chairs", "books", "letters", "cars", "trains", "boats", "trees", "apples",
        "boxes",
    ],
    "verb": [
        "sees", "finds", "takes", "brings", "opens", "carries", "likes", "watches", "paints", "moves",
        "cleans", "follows", "holds", "pulls", "pushes", "wants",
    ],
    "verbi": ["runs", "waits", "sleeps", "sings", "walks", "stops", "turns", "falls", "jumps", "works"],
    "prep": ["near", "under", "behind", "beside", "inside", "over", "across", "from", "into", "with"],
    "adv": ["today", "again", "slowly", "quickly", "now", "later", "often", "never", "always", "here"],
    "name": ["anna", "peter", "maria", "john", "sarah", "david", "emma", "paul", "lucy", "tom"],
}

# Templates: sequences of parts of speech; a string that is not a key is a literal word.
TEMPLATES = [
    ["det", "adj", "noun", "verb", "det", "noun"],
    ["det", "noun", "verbi", "prep", "det", "adj", "noun"],
    ["name", "verb", "num", "adj", "nouns", "adv"],
    ["det", "adj", "adj", "noun", "verbi", "adv"],
    ["name", "and", "name", "verb_base", "det", "noun", "prep", "det", "noun"],
    ["num", "nouns", "prep", "det", "noun", "are", "adj"],
    ["where", "is", "det", "adj", "noun"],
    ["det", "noun", "is", "adj", "and", "adj"],
    ["name", "verbi", "adv", "prep", "det", "noun"],
    ["please", "verb_base", "det", "adj", "noun", "adv"],
    ["name", "can't", "find", "det", "noun"],
    ["det", "noun", "prep", "det", "noun", "verb", "name"],
]
WORDS["verb_base"] = [
    "see", "find", "take", "bring", "open", "carry", "watch", "paint", "move", "clean", "hold",
]
# fmt: on


def vocabulary() -> list[str]:
    """Every word the generator can emit, sorted."""
    words = {w for ws in WORDS.values() for w in ws}
    words |= {w for t in TEMPLATES for w in t if w not in WORDS}
    return sorted(words)


def sentence(rng: np.random.Generator) -> str:
    """One sentence drawn from the templates with ``rng`` (lower case, single spaces)."""
    template = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    out = []
    for slot in template:
        choices = WORDS.get(slot)
        out.append(choices[int(rng.integers(len(choices)))] if choices else slot)
    return " ".join(out)


def encode(text: str) -> list[int]:
    """Character ids of a transcript (no blank); a character outside the alphabet is an error."""
    bad = sorted({c for c in text if c not in _INDEX})
    if bad:
        raise InputError(f"text has characters outside the alphabet {ALPHABET[1:]!r}: {bad}")
    return [_INDEX[c] for c in text]


def decode(ids) -> str:
    """Text of character ids (blanks dropped, no collapsing)."""
    return "".join(ALPHABET[int(i)] for i in ids if int(i) != BLANK)
