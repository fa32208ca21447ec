"""The regex compiler against Python's re, token lifting with multi-character tokens, JSON schemas."""

import itertools
import json
import re

import numpy as np
import pytest
from dlm_constrain import CharDFA, TokenDFA, compile_regex, schema_to_regex
from dlm_constrain.json_schema import is_valid_json_for
from hypothesis import given, settings
from hypothesis import strategies as st

from papershelf.errors import InputError

ALPHA = "ab1{"
PATTERNS = [
    "a(b|1)*",
    "(ab)+1?",
    "[ab]{2,3}",
    "[^a]*a",
    "a{0,2}b{1,}",
    r"\{(a|b1)?",
    "(a|)(b|)1",
    r"\d+",
    "a+?b",
    "(?:ab|ba)*",
    ".1.",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_dfa_matches_python_re_on_all_short_strings(pattern):
    dfa = compile_regex(pattern, ALPHA)
    for k in range(6):
        for chars in itertools.product(ALPHA, repeat=k):
            s = "".join(chars)
            assert dfa.accepts(s) == (re.fullmatch(pattern, s) is not None), (pattern, s)


def test_dfa_is_minimal_for_a_known_language():
    # strings over {a, b} whose count of a's is divisible by 3: exactly 3 live states + dead
    assert compile_regex("(b*ab*ab*ab*)*b*", "ab").num_states == 4


@given(st.lists(st.sampled_from(["a", "b", "ab", "bba", "1", "{a"]), min_size=0, max_size=6))
@settings(max_examples=150, deadline=None)
def test_token_dfa_equals_regex_on_decoded_text(tokens):
    vocab = ["a", "b", "ab", "bba", "1", "{a", "<eos>"]
    for pattern in ("(ab|b)*1?", r"\{?a(ba)*b*"):
        dfa = TokenDFA.from_regex(pattern, vocab, eos_id=6)
        ids = [vocab.index(t) for t in tokens]
        text = "".join(tokens)
        expect = re.fullmatch(pattern, text) is not None
        assert dfa.accepts(ids) == expect
        assert dfa.accepts([*ids, 6, 6]) == expect  # EOS pads an accepted string
        if ids:
            assert not dfa.accepts([6, *ids])  # nothing but padding after EOS


def test_special_and_empty_tokens_are_never_allowed():
    dfa = TokenDFA.from_regex("a*", ["a", "", "<mask>", "<eos>"], eos_id=3, special_ids=[2])
    assert dfa.accepts([0, 0, 3]) and not dfa.accepts([0, 1]) and not dfa.accepts([2])


def test_vocab_as_dict():
    dfa = TokenDFA.from_regex("ab", {"b": 1, "a": 0})
    assert dfa.accepts([0, 1]) and dfa.vocab == ("a", "b")


SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 12},
        "tag": {"enum": ["x", "yz"]},
        "v": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
        "s": {"type": "string", "maxLength": 2},
    },
    "required": ["id", "tag"],
}


@pytest.mark.parametrize(
    "doc,ok",
    [
        ({"id": 3, "tag": "x"}, True),
        ({"id": 12, "tag": "yz", "v": [True, False]}, True),
        ({"id": 1, "tag": "x", "s": "ab"}, True),
        ({"id": 1, "tag": "x", "v": [], "s": ""}, True),
        ({"id": 13, "tag": "x"}, False),
        ({"id": 0, "tag": "x"}, False),
        ({"id": 3}, False),
        ({"id": 3, "tag": "y"}, False),
        ({"id": 3, "tag": "x", "v": [True, True, True]}, False),
        ({"id": 3, "tag": "x", "s": "abc"}, False),
    ],
)
def test_json_schema_automaton(doc, ok):
    text = json.dumps(doc, separators=(",", ":"))
    vocab = [*sorted(set('{}[]":,' + "0123456789" + "abcdefghijklmnopqrstuvwxyz")), '{"', '":', "true", "<e>"]
    dfa = TokenDFA.from_json_schema(SCHEMA, vocab, eos_id=len(vocab) - 1)
    chars = [vocab.index(c) for c in text]
    assert dfa.accepts(chars) == ok
    assert is_valid_json_for(SCHEMA, text) == ok
    if ok:  # the same text split into multi-character tokens is accepted too
        multi = text.replace('{"', "\x00").replace("true", "\x01")
        ids = [
            vocab.index('{"') if c == "\x00" else vocab.index("true") if c == "\x01" else vocab.index(c)
            for c in multi
        ]
        assert dfa.accepts(ids)


@pytest.mark.parametrize(
    "pattern,match",
    [
        ("a(b", "missing '\\)'"),
        ("a)b", "unexpected '\\)'"),
        ("*a", "nothing to repeat"),
        ("[ab", "unterminated"),
        ("a{3,1}", "bad repetition"),
        ("a{0,99999999}", "exceed the supported 1000"),
        ("(?=a)", "look-around"),
        (r"(a)\1", "unsupported escape"),
        ("^a$", "anchors"),
        ("[b-a]", "bad range"),
        ("a**", "multiple repeat"),
        ("a*+", "multiple repeat"),
        ("a{2}{3}", "multiple repeat"),
        (r"[\d-x]", "bad character range"),  # Python's re refuses these too
        (r"[a-\w]", "bad character range"),
    ],
)
def test_bad_regex_names_the_problem(pattern, match):
    with pytest.raises(InputError, match=match):
        TokenDFA.from_regex(pattern, ["a", "b"])


@pytest.mark.parametrize(
    "schema,match",
    [
        ({}, "unrestricted"),
        ({"type": "thing"}, "unsupported"),
        ({"type": "object", "properties": {"a": {"type": "null"}}, "required": ["b"]}, "unknown properties"),
        ("{not json", "not valid JSON"),
        ({"enum": []}, "non-empty"),
        ({"type": "integer", "minimum": 5, "maximum": 2}, "no integer satisfies"),
        ({"type": []}, "non-empty list"),
        ({"type": "integer", "multipleOf": 2}, "'multipleOf' is not supported"),
        ({"type": "string", "format": "date"}, "'format' is not supported"),
        ({"type": "number", "minimum": 1}, "'minimum' is not supported"),
        ({"type": ["integer", "null"], "pattern": "a"}, "'pattern' is not supported"),
        ({"type": "string", "pattern": "a.b"}, "quote, a backslash"),
        ({"type": "integer", "minimum": "x"}, "minimum must be a number"),
        ({"type": "object", "properties": {}, "required": None}, "required must be a list"),
        ({"type": "string", "minLength": 3, "maxLength": 1}, "maxLength 1 < minLength 3"),
        ({"type": "array", "items": {"type": "null"}, "minItems": -1}, "non-negative integer"),
        # used to surface as the generated regex's "bad repetition bounds", not the schema keyword
        ({"type": "string", "maxLength": 10**8}, r"schema\.maxLength must be at most 1000"),
        ({"type": "array", "items": {"type": "null"}, "maxItems": 5000}, "maxItems must be at most 1000"),
    ],
)
def test_bad_schema(schema, match):
    with pytest.raises(InputError, match=match):
        TokenDFA.from_json_schema(schema, ["a"])


def test_bad_vocab_and_ids():
    with pytest.raises(InputError, match="vocab must not be empty"):
        TokenDFA.from_regex("a", [])
    with pytest.raises(InputError, match="eos_id must be a token id in \\[0, 1\\]"):
        TokenDFA.from_regex("a", ["a", "b"], eos_id=5)
    with pytest.raises(InputError, match="list of token strings"):
        TokenDFA.from_regex("a", "ab")
    with pytest.raises(InputError, match="list of token strings"):
        TokenDFA.from_regex("a", None)
    dfa = TokenDFA.from_regex("ab", ["a", "b"])
    with pytest.raises(InputError, match="token id 9 is outside"):
        dfa.decode([0, 9])
    from dlm_constrain import sample

    probs = np.full((2, 2), 0.5)
    for bad in (2.5, 0, True):
        with pytest.raises(InputError, match="num_samples"):
            sample(probs, dfa, bad)
    with pytest.raises(InputError, match="generator"):
        sample(probs, dfa, 1, generator=3)
    with pytest.raises(InputError, match="TokenDFA"):
        sample(probs, "ab", 1)


def test_schema_regex_is_plain_python_regex():
    assert re.fullmatch(schema_to_regex({"type": "array", "items": {"type": "integer"}}), "[1,-2,30]")


@pytest.mark.parametrize(
    "lo,hi",
    [(None, 7), (0, None), (5, None), (-15, None), (None, -7), (-123, 4567), (17, 30219), (-30219, -17),
     (999, 1000), (3, 3), (-2000, 2000)],
)  # fmt: skip
def test_integer_bounds_match_exactly_the_integers_in_range(lo, hi):
    """One- and two-sided, narrow (enumerated) and wide (digit by digit) ranges, against brute force."""
    schema = {"type": "integer", "title": "n"}  # an annotation is allowed
    schema |= {k: v for k, v in (("minimum", lo), ("maximum", hi)) if v is not None}
    rx = re.compile(schema_to_regex(schema))
    rng = np.random.default_rng(0)
    for x in [*range(-1100, 1101), *rng.integers(-(10**6), 10**6, 2000).tolist()]:
        inside = (lo is None or x >= lo) and (hi is None or x <= hi)
        assert (rx.fullmatch(str(x)) is not None) == inside, x
    assert not any(rx.fullmatch(t) for t in ("-0", "01", "+5", "", "-", "1.0"))


def test_non_integer_and_exclusive_bounds_and_type_lists():
    rx = re.compile(schema_to_regex({"type": "integer", "minimum": 1.5, "exclusiveMaximum": 4}))
    assert [x for x in range(-3, 8) if rx.fullmatch(str(x))] == [2, 3]
    rx = re.compile(schema_to_regex({"type": ["integer", "null"], "minimum": 0}))  # minimum: integers only
    assert rx.fullmatch("null") and rx.fullmatch("12") and not rx.fullmatch("-1")
    assert re.fullmatch(schema_to_regex({"type": "string", "pattern": "^[a-z]+$"}), '"abc"')


def test_lazy_suffixes_and_grouped_repeats_keep_their_language():

    for pattern in ("a*?", "(a*)*", "a{1,2}?b"):
        dfa = compile_regex(pattern, "ab")
        want = re.compile(pattern)
        for word in ("", "a", "aa", "ab", "aab", "b"):
            assert dfa.accepts(word) == bool(want.fullmatch(word)), (pattern, word)


# ------------------------------------------------------------------------------- large alphabets, fast lift
def test_character_classes_keep_the_language_over_a_large_alphabet():
    # 26 letters + digits + punctuation: the DFA is built over ~5 character classes, then expanded
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789.,;"
    pattern = r"[a-m]+x?|[n-z]\d{1,2}|[^a-z0-9]*"
    dfa = compile_regex(pattern, alphabet)
    assert dfa.delta.shape[1] == len(alphabet)
    rng = np.random.default_rng(0)
    for _ in range(3000):
        s = "".join(rng.choice(list(alphabet), size=int(rng.integers(0, 5))))
        assert dfa.accepts(s) == (re.fullmatch(pattern, s) is not None), s


@pytest.mark.parametrize("pattern", [r"\d+", r"\w+\s?", r"[^\W\d]+", r"\S\D", "[ -é]+", r"[\d-]+"])
def test_unicode_classes_follow_python_re(pattern):
    alphabet = "a1_é٢\u00a0 \t.Ωx-"  # an Arabic-Indic digit, a no-break space, a Greek letter
    dfa = compile_regex(pattern, alphabet)
    for k in range(4):
        for chars in itertools.product(alphabet, repeat=k):
            s = "".join(chars)
            assert dfa.accepts(s) == (re.fullmatch(pattern, s) is not None), (pattern, s)


def test_vectorised_lift_equals_walking_each_token_from_each_state():
    from dlm_constrain.automaton import _walk_tokens

    cdfa = compile_regex(r"(ab|b1)*\{?é", "ab1{é")
    shuffled = CharDFA(cdfa.alphabet[::-1], cdfa.delta[:, ::-1], cdfa.start, cdfa.accept, cdfa.dead)
    assert (
        _walk_tokens(shuffled, ["ab", "b1é", "z"], dead=-1).tolist()
        == _walk_tokens(cdfa, ["ab", "b1é", "z"], dead=-1).tolist()
    )  # a CharDFA's alphabet need not be sorted
    rng = np.random.default_rng(1)
    chars = [*"ab1{é", "z", "😀"]  # z and the emoji are outside the alphabet
    texts = ["".join(rng.choice(chars, size=int(rng.integers(0, 7)))) for _ in range(300)]  # "" too
    out = _walk_tokens(cdfa, texts, dead=-1, budget=64)  # a tiny budget: many chunks
    for j, text in enumerate(texts):
        for q in range(cdfa.num_states):
            r = cdfa.run(text, q)
            assert out[q, j] == (-1 if r == cdfa.dead else r), (text, q)


def test_token_classes_group_exactly_the_equal_columns():
    from dlm_constrain.automaton import _token_classes

    rng = np.random.default_rng(2)
    T = rng.integers(0, 3, size=(4, 40))
    T[:, 20:] = T[:, :20]  # every column appears at least twice
    for mult in (None, np.zeros(4, dtype=np.uint64)):  # all-zero multipliers force the exact fallback
        cls, reps = _token_classes(T, mult=mult)
        same = (T[:, :, None] == T[:, None, :]).all(0)
        np.testing.assert_array_equal(same, cls[:, None] == cls[None, :])
        np.testing.assert_array_equal(T[:, reps[cls]], T)
        assert list(reps) == sorted(reps) and reps[0] == 0  # classes numbered by their first token


def _assert_same_token_language(dfa, index, eos_id):
    """Product walk of our automaton and outlines-core's index: equal allowed tokens and acceptance."""
    trans = {s: dict(t) for s, t in index.get_transitions().items()}
    final = set(index.get_final_states())
    seen = {(dfa.start, index.get_initial_state())}
    stack = list(seen)
    while stack:
        q, s = stack.pop()
        ours = {int(v): int(dfa.table[q, v]) for v in np.nonzero(dfa.table[q] != dfa.dead)[0] if v != eos_id}
        theirs = {v: r for v, r in trans.get(s, {}).items() if v != eos_id}
        assert set(ours) == set(theirs), (q, s, sorted(set(ours) ^ set(theirs))[:5])
        assert bool(dfa.accept[q]) == (s in final), (q, s)
        for v in ours:
            if (ours[v], theirs[v]) not in seen:
                seen.add((ours[v], theirs[v]))
                stack.append((ours[v], theirs[v]))
    return {q for q, _ in seen}


@pytest.mark.parametrize(
    "pattern",
    [r"[a-z]{1,8}", r"(ab|cd)+\}[0-9]?", r'\{"id":[0-9]+(,"k":"[^"]{0,4}")?\}', r"[^:]*:[ab]{2}"],
)
def test_token_automaton_matches_outlines_core(pattern):
    # patterns whose accepting prefixes continue only into accepting states: outlines-core (0.2.11 to
    # 0.2.14) drops a token that leaves an accepting state for a non-accepting one (its index for
    # "(ab)+" over one-character tokens rejects "abab"; `dlm-constrain bench` records such witnesses)
    oc = pytest.importorskip("outlines_core")
    from dlm_constrain.experiments import BENCH_SCHEMA, bench_vocab

    vocab = bench_vocab(512, seed=0)
    eos = len(vocab) - 1
    for regex in (pattern, schema_to_regex(BENCH_SCHEMA)):
        dfa = TokenDFA.from_regex(regex, vocab, eos_id=eos)
        ids: dict[str, list[int]] = {}
        for i, t in enumerate(vocab[:eos]):
            ids.setdefault(t, []).append(i)
        index = oc.Index(regex, oc.Vocabulary(eos, ids))
        visited = _assert_same_token_language(dfa, index, eos)
        ended = {int(dfa.table[q, eos]) for q in np.nonzero(dfa.accept)[0]}  # reached by EOS only
        assert visited | ended == set(range(dfa.dead))  # every live state was compared


def test_outlines_schema_backend_follows_its_regex_and_resolves_refs():
    pytest.importorskip("outlines_core")
    from outlines_core.json_schema import build_regex_from_schema

    schema = {
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/pt"}, "ok": {"type": "boolean"}},
        "required": ["p"],
        "$defs": {"pt": {"type": "integer"}},
    }
    docs = ['{"p":3}', '{ "p" : -12 , "ok" : true }', '{"p":1,"ok":false}', '{"p":"x"}', '{"ok":true}']
    vocab = [*sorted(set("".join(docs)) | set("0123456789")), "true", "false", "<eos>"]
    eos = len(vocab) - 1
    dfa = TokenDFA.from_json_schema(schema, vocab, eos_id=eos, backend="outlines")
    regex = build_regex_from_schema(json.dumps(schema))
    for doc in docs:
        tokens = [vocab.index(ch) for ch in doc]  # one character per token
        assert dfa.accepts(tokens) == (re.fullmatch(regex, doc) is not None), doc
    assert dfa.accepts([vocab.index(ch) for ch in '{ "p" : -12 , "ok" : true }'])


def test_schema_backend_errors(monkeypatch):
    with pytest.raises(InputError, match="backend must be 'papershelf' or 'outlines'"):
        TokenDFA.from_json_schema({"type": "integer"}, list("0123"), backend="interegular")
    import sys

    monkeypatch.setitem(sys.modules, "outlines_core.json_schema", None)  # as if not installed
    with pytest.raises(InputError, match="pip install outlines-core"):
        TokenDFA.from_json_schema({"type": "integer"}, list("0123"), backend="outlines")
