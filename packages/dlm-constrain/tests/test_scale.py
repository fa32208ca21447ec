"""The real-vocabulary helpers: an offline BPE vocabulary, and the language comparison with outlines-core."""

import re

import pytest
from dlm_constrain import TokenDFA, sample
from dlm_constrain.scale import bpe_vocab, compare_languages, outlines_index

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def small_bpe():
    return bpe_vocab(700, corpus_bytes=300_000)


def test_bpe_vocab_is_offline_deterministic_and_marks_partial_characters(small_bpe):
    vocab, eos, special = small_bpe
    assert len(vocab) == 700 and vocab[eos] == "<eos>" and eos == 0
    assert any(len(t) > 3 for t in vocab)  # merged tokens
    assert all("\ufffd" in vocab[i] for i in special)
    assert bpe_vocab(700, corpus_bytes=300_000) == small_bpe


def test_language_comparison_finds_a_witness_python_re_accepts(small_bpe):
    pytest.importorskip("outlines_core")
    vocab, eos, special = small_bpe
    for pattern in (r"(def|class) [a-z_]+\(", r"[0-9]+(\.[0-9]+)?", r"(ab)+"):
        dfa = TokenDFA.from_regex(pattern, vocab, eos, special_ids=special)
        result = compare_languages(dfa, outlines_index(pattern, vocab, eos, special), pattern)
        assert result["pairs"] >= 1
        if not result["equal"] and result["allowed_by"] == "ours":
            # where the two disagree on a token we allow, the completed string is in the language
            assert result["python_re_accepts"] and re.fullmatch(pattern, result["accepted_string"])


def test_sampling_with_a_bpe_vocabulary_stays_in_the_language(small_bpe):
    import torch

    vocab, eos, special = small_bpe
    dfa = TokenDFA.from_regex(r"(def|class) [a-z_]{1,12}\(self\):", vocab, eos, special_ids=special)
    probs = torch.softmax(torch.randn(24, len(vocab), generator=torch.Generator().manual_seed(0)), -1)
    for method in ("sequential", "bisect", "scan"):
        x = sample(probs, dfa, 20, method=method, generator=torch.Generator().manual_seed(1))
        texts = [dfa.decode(row) for row in x.tolist()]
        assert all(re.fullmatch(r"(def|class) [a-z_]{1,12}\(self\):", t) for t in texts), texts[:3]
