"""Fast paths against brute-force enumeration; sampler distributions; invariances; bad input."""

import collections
import math

import numpy as np
import pytest
import torch
from dlm_constrain import (
    METHODS,
    TokenDFA,
    check_feasible,
    constrained_marginals,
    inference,
    log_partition,
    map_decode,
    sample,
    transfer_matrices,
)
from dlm_constrain.reference import (
    brute_force_argmax,
    brute_force_marginals,
    brute_force_posterior,
    reference_transfer,
)

from papershelf.errors import InputError

VOCAB = ["a", "b", "ab", "ba", "<e>"]
PATTERNS = ["(ab|b)*a?", "a(b|ba)*", "(a|b)*abb(a|b)*", "b{1,3}(ab)?"]


def _dfa(pattern):
    return TokenDFA.from_regex(pattern, VOCAB, eos_id=4)


def _probs(seed, n, V=5, sharp=2.0):
    p = np.random.default_rng(seed).random((n, V)) ** sharp + 1e-3
    return p / p.sum(1, keepdims=True)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_partition_marginals_transfer_match_brute_force(pattern, seed):
    dfa = _dfa(pattern)
    p = _probs(seed, 6)
    _post, Z = brute_force_posterior(p, dfa)
    assert Z > 0
    for method in METHODS:
        assert math.isclose(log_partition(p, dfa, method=method), math.log(Z), rel_tol=0, abs_tol=1e-12)
    np.testing.assert_allclose(
        constrained_marginals(p, dfa).numpy(), brute_force_marginals(p, dfa), atol=1e-12
    )
    np.testing.assert_allclose(transfer_matrices(p, dfa).numpy(), reference_transfer(p, dfa), atol=1e-15)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("method", METHODS)
def test_greedy_equals_brute_force_argmax(pattern, method):
    dfa = _dfa(pattern)
    for seed in range(4):
        p = _probs(10 + seed, 5 + seed % 3)  # n = 5, 6, 7: also non-powers of two for the tree
        assert tuple(map_decode(p, dfa, method=method).tolist()) == brute_force_argmax(p, dfa)


def _tv(samples, post):
    counts = collections.Counter(map(tuple, samples.tolist()))
    N = len(samples)
    outside = sum(c for x, c in counts.items() if x not in post)
    return 0.5 * (sum(abs(counts.get(x, 0) / N - w) for x, w in post.items()) + outside / N)


@pytest.mark.parametrize("method", METHODS)
def test_samples_match_exact_posterior_in_total_variation(method):
    # support of 4 strings ... 40: with N samples the expected TV of an exact sampler is about
    # sum_x sqrt(q(x)(1 - q(x)) / (2 pi N)) ~ 0.023 here (N = 20000); the bound 0.045 fails any error
    # of a few percent
    # of the mass (a sampler that ignored the constraint or the backward messages has TV > 0.2).
    dfa = _dfa("(ab|b)*a?")
    p = _probs(3, 4, sharp=1.0)
    post, _ = brute_force_posterior(p, dfa)
    x = sample(p, dfa, 20_000, method=method, generator=torch.Generator().manual_seed(7))
    assert all(dfa.accepts(r) for r in x.tolist())
    assert _tv(x, post) < 0.045


def test_samplers_agree_with_each_other_chi_square():
    from scipy.stats import chi2_contingency

    dfa = _dfa("a(b|ba)*")
    p = _probs(5, 5, sharp=1.0)
    table = []
    keys = None
    for i, method in enumerate(METHODS):
        x = sample(p, dfa, 12_000, method=method, generator=torch.Generator().manual_seed(100 + i))
        c = collections.Counter(map(tuple, x.tolist()))
        keys = sorted(c) if keys is None else keys
        table.append([c.get(k, 0) for k in keys])
    table = np.array(table)
    table = table[:, table.min(0) >= 5]
    assert chi2_contingency(table).pvalue > 1e-4


def test_naive_unconstrained_sampling_fails_the_tv_bound():
    """The TV test can fail: independent per-position sampling conditioned by rejection is exact, but
    sampling the constrained marginals independently per position is not."""
    dfa = _dfa("(ab|b)*a?")
    p = _probs(3, 4, sharp=1.0)
    post, _ = brute_force_posterior(p, dfa)
    m = constrained_marginals(p, dfa)
    x = torch.multinomial(m, 40_000, replacement=True, generator=torch.Generator().manual_seed(0)).T
    assert _tv(x, post) > 0.1


@pytest.mark.parametrize("method", METHODS)
def test_rescaling_a_position_leaves_the_posterior_unchanged(method):
    dfa = _dfa("(a|b)*abb(a|b)*")
    p = _probs(8, 6)
    q = p.copy()
    q[2] *= 7.5  # unnormalised rows are normalised; the posterior must not move
    q[4] *= 0.01
    np.testing.assert_allclose(constrained_marginals(q, dfa), constrained_marginals(p, dfa), atol=1e-13)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(
        sample(p, dfa, 50, method=method, generator=g1), sample(q, dfa, 50, method=method, generator=g2)
    )
    assert torch.equal(map_decode(p, dfa, method=method), map_decode(q, dfa, method=method))


@pytest.mark.parametrize("method", METHODS)
def test_one_hot_inputs_return_the_forced_string(method):
    dfa = _dfa("(ab|b)*a?")
    forced = [2, 1, 0, 4, 4]  # "ab" "b" "a" eos eos
    p = np.eye(5)[forced]
    assert sample(p, dfa, method=method).tolist() == forced
    assert map_decode(p, dfa, method=method).tolist() == forced
    np.testing.assert_allclose(constrained_marginals(p, dfa).numpy(), p)


def test_long_sequences_do_not_underflow():
    # pattern (a|b)*: every token but EOS ("a", "b", "ab", "ba") is allowed anywhere, so Z = 0.8^n
    dfa = TokenDFA.from_regex("(a|b)*", VOCAB)
    n = 2000
    p = np.full((n, 5), 0.2)
    for method in METHODS:
        assert math.isclose(log_partition(p, dfa, method=method), n * math.log(0.8), rel_tol=1e-12)
    x = sample(p, dfa, 3, method="bisect", generator=torch.Generator().manual_seed(0))
    assert set(x.flatten().tolist()) <= {0, 1, 2, 3}  # never EOS (not in the language)


def test_sampled_strings_are_always_accepted_on_random_marginals():
    vocab = ["{", "}", '"', "a", "1", ":", ",", '{"', '":', "1,", "<e>"]
    dfa = TokenDFA.from_json_schema(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "aa": {"type": "string", "maxLength": 3}},
        },
        vocab,
        eos_id=10,
    )
    gen = torch.Generator().manual_seed(0)
    for trial in range(30):
        p = torch.softmax(torch.randn(24, len(vocab), generator=gen, dtype=torch.float64) * 3, -1)
        for method in METHODS:
            x = sample(p, dfa, 20, method=method, generator=gen)
            assert all(dfa.accepts(r) for r in x.tolist()), (trial, method)


# ----------------------------------------------------------------------------------------- bad input
def test_empty_language_at_length_is_a_clear_error():
    dfa = TokenDFA.from_regex("aaa", ["a", "b"])  # exactly three a's, no EOS padding
    with pytest.raises(InputError, match=r"regex 'aaa' accepts no sequence of length 2"):
        sample(np.full((2, 2), 0.5), dfa)
    with pytest.raises(InputError, match="length 2"):
        check_feasible(np.full((2, 2), 0.5), dfa)
    assert log_partition(np.full((2, 2), 0.5), dfa) == -math.inf
    with pytest.raises(InputError, match="probability 0 at length 3"):
        sample(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]), dfa)  # "aba" is forced and rejected


@pytest.mark.parametrize(
    "bad,match",
    [
        (np.array([[0.5, np.nan, 0.5, 0, 0]] * 3), "finite"),
        (np.array([[0.5, -0.1, 0.6, 0, 0]] * 3), "non-negative"),
        (np.array([[0.0] * 5] * 3), "sums to 0"),
        (np.full((3, 4), 0.25), "vocabulary mismatch: probs has 4 columns"),
        (np.full((5,), 0.2), "2-D"),
        (np.zeros((0, 5)), "no positions"),
        (np.array([["a"] * 5] * 3), "numeric"),
    ],
)
def test_bad_probabilities_are_rejected(bad, match):
    dfa = _dfa("(ab|b)*a?")
    for fn in (sample, map_decode, constrained_marginals, transfer_matrices, log_partition):
        with pytest.raises(InputError, match=match):
            fn(bad, dfa)


def test_unnormalised_rows_normalise_or_reject():
    dfa = _dfa("(ab|b)*a?")
    p = _probs(0, 3) * 3
    with pytest.raises(InputError, match=r"row 0 sums to 3, not 1"):
        sample(p, dfa, normalize=False)
    assert math.isclose(log_partition(p, dfa), log_partition(p / 3, dfa), abs_tol=1e-12)


def test_rows_whose_sum_overflows_are_normalised_not_zeroed():
    # finite entries of 1e308 sum to inf; dividing by that sum zeroed the rows and reported Z = 0
    dfa = _dfa("(ab|b)*a?")
    p = _probs(2, 4)
    q = p / p.max(1, keepdims=True) * 1.7e308  # row maxima 1.7e308: sums overflow, entries do not
    with np.errstate(over="ignore"):
        assert np.isfinite(q).all() and not np.isfinite(q.sum(1)).all()
    assert math.isclose(log_partition(q, dfa), log_partition(p, dfa), abs_tol=1e-12)
    np.testing.assert_allclose(constrained_marginals(q, dfa), constrained_marginals(p, dfa), atol=1e-12)
    with pytest.raises(InputError, match="sums to inf, not 1"):
        sample(q, dfa, normalize=False)


def test_bad_method_and_sample_count():
    dfa = _dfa("(ab|b)*a?")
    with pytest.raises(InputError, match="method must be one of"):
        sample(_probs(0, 3), dfa, method="magic")
    with pytest.raises(InputError, match="num_samples"):
        sample(_probs(0, 3), dfa, 0)


@pytest.mark.parametrize("method", METHODS)
def test_tokens_sharing_a_class_are_drawn_in_proportion(method):
    # "a"/"c" and "ab"/"cb" move every state alike, so each pair is one class of two tokens: the class
    # is drawn by its summed probability, then the token within it -- the joint must still be exact
    vocab = ["a", "b", "c", "ab", "cb", "<e>"]
    dfa = TokenDFA.from_regex("((a|c)b|b)*(a|c)?", vocab, eos_id=5)
    plan = inference._plan(dfa)
    assert plan.C < len(vocab) - 1 and int(plan.cls[0]) == int(plan.cls[2])
    p = _probs(5, 3, V=6, sharp=1.0)
    post, _ = brute_force_posterior(p, dfa)
    x = sample(p, dfa, 20_000, method=method, generator=torch.Generator().manual_seed(3))
    assert all(dfa.accepts(r) for r in x.tolist())
    assert _tv(x, post) < 0.05
    assert tuple(map_decode(p, dfa, method=method).tolist()) == tuple(brute_force_argmax(p, dfa))


@pytest.mark.parametrize("method", METHODS)
def test_greedy_ties_between_classes_go_to_the_lowest_token_id(method):
    # "b" (id 3) and the second "a" (id 5) tie at 0.4; "a"'s class starts at id 0, "b"'s at 3
    dfa = TokenDFA.from_regex("(a|b)a*", ["a", "c", "c", "b", "c", "a"])
    p = torch.tensor([[0.1, 0.05, 0.05, 0.4, 0.0, 0.4]], dtype=torch.float64)
    assert map_decode(p, dfa, method=method).tolist() == [3]
