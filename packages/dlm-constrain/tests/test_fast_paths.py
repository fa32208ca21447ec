"""The sparse product tree, the compact transfer matrices and the decode step against plain references,
at lengths where brute force is impossible, and through every code path (sparse/dense tree levels,
identity padding, both semirings)."""

import math

import numpy as np
import pytest
import torch
from dlm_constrain import METHODS, ConstrainedSampler, TokenDFA, inference
from dlm_constrain.reference import brute_force_argmax, brute_force_posterior, reference_chain

VOCAB = ["{", "}", '"', "a", "1", ":", ",", '{"', '":', "1,", "<e>"]
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "aa": {"type": "string", "maxLength": 3}},
}


@pytest.fixture(scope="module")
def dfa():
    return TokenDFA.from_json_schema(SCHEMA, VOCAB, eos_id=10)


def _probs(seed, n, V, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(n, V, generator=g, dtype=torch.float64) * scale, -1)


@pytest.fixture(params=["sparse", "dense"])
def tree_mode(request, monkeypatch):
    """Run a test with the sparse tree (default) and with every level multiplied densely."""
    if request.param == "dense":
        monkeypatch.setattr(inference, "_DENSE_WORK", 0.0)
    return request.param


def _fresh(dfa):  # a copy without cached plans (the dense/sparse choice is made when a plan is built)
    return TokenDFA(dfa.table, dfa.accept, dfa.start, dfa.dead, dfa.vocab, dfa.eos_id, dfa.name)


@pytest.mark.parametrize("n", [45, 130])
def test_log_partition_and_marginals_match_the_plain_chain(dfa, n, tree_mode):
    d = _fresh(dfa)
    p = _probs(n, n, len(VOCAB))
    logz, marg = reference_chain(p.numpy(), d)
    assert np.isfinite(logz)
    for method in METHODS:
        assert math.isclose(inference.log_partition(p, d, method=method), logz, rel_tol=1e-12, abs_tol=1e-10)
    np.testing.assert_allclose(inference.constrained_marginals(p, d).numpy(), marg, atol=1e-12)
    if tree_mode == "dense":
        assert any(lv.dense for lv in inference._plan(d).levels(256, True))


def test_tree_levels_are_sparse_for_the_bench_automaton():
    from dlm_constrain.experiments import BENCH_SCHEMA, bench_vocab

    vocab = bench_vocab(128)
    d = TokenDFA.from_json_schema(BENCH_SCHEMA, vocab, eos_id=len(vocab) - 1)
    plan = inference._plan(d)
    Qe = d.dead
    assert plan.P < Qe * Qe / 10  # far fewer state pairs than the dense grid
    levels = plan.levels(1024, False)
    assert len(levels) == 11 and not levels[0].dense and levels[0].a is not None


@pytest.mark.parametrize("n", [70])
def test_map_decode_agrees_across_methods_and_is_optimal(dfa, n, tree_mode):
    d = _fresh(dfa)
    p = _probs(7 + n, n, len(VOCAB), scale=4.0)
    outs = [inference.map_decode(p, d, method=m) for m in METHODS]
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    x = outs[0].tolist()
    assert d.accepts(x)
    # optimal: no sampled accepted string is more probable
    logp = p.log()
    best = float(logp[torch.arange(n), outs[0]].sum())
    xs = inference.sample(p, d, 200, generator=torch.Generator().manual_seed(1))
    assert float(logp.gather(1, xs.T).sum(0).max()) <= best + 1e-9


def test_small_cases_match_brute_force_with_dense_levels(tree_mode):
    vocab = ["a", "b", "ab", "ba", "<e>"]
    d = TokenDFA.from_regex("(ab|b)*a?", vocab, eos_id=4)
    d = _fresh(d)
    p = np.random.default_rng(4).random((5, 5)) ** 2 + 1e-3  # n = 5: a padded tree (N = 8)
    post, Z = brute_force_posterior(p, d)
    for method in METHODS:
        assert math.isclose(inference.log_partition(p, d, method=method), math.log(Z), abs_tol=1e-12)
        assert tuple(inference.map_decode(p, d, method=method).tolist()) == brute_force_argmax(p, d)
        x = inference.sample(p, d, 20_000, method=method, generator=torch.Generator().manual_seed(2))
        freq = {}
        for row in map(tuple, x.tolist()):
            freq[row] = freq.get(row, 0) + 1
        # expected TV of an exact sampler ~ sum_x sqrt(q(x) / (2 pi N)) (about 0.03 here)
        expected = sum(math.sqrt(w * (1 - w) / (2 * math.pi * 20_000)) for w in post.values())
        tv = 0.5 * sum(abs(freq.get(s, 0) / 20_000 - w) for s, w in post.items())
        assert tv < 2 * expected and set(freq) <= set(post)


@pytest.mark.parametrize("method", METHODS)
def test_long_samples_are_valid_and_agree_in_per_position_frequency(dfa, method):
    n = 200
    p = _probs(3, n, len(VOCAB), scale=2.0)
    x = inference.sample(p, dfa, 400, method=method, generator=torch.Generator().manual_seed(5))
    assert all(dfa.accepts(r) for r in x.tolist())
    # empirical per-position marginals against the exact ones: 400 samples, so about 0.025 per cell
    emp = (
        torch.zeros(n, len(VOCAB), dtype=torch.float64).scatter_add_(
            1, x.T, torch.ones(n, 400, dtype=torch.float64)
        )
        / 400
    )
    exact = inference.constrained_marginals(p, dfa)
    assert float((emp - exact).abs().max()) < 0.12
    assert float((emp - exact).abs().mean()) < 0.01


def test_compact_transfer_equals_the_dense_scatter(dfa):
    p = _probs(1, 50, len(VOCAB))
    plan = inference._plan(dfa)
    M = inference.transfer_matrices(p, dfa)
    T = torch.from_numpy(dfa.table[: dfa.dead].astype(np.int64))
    ref = torch.zeros(50, dfa.dead, dfa.dead + 1, dtype=torch.float64)
    ref.scatter_add_(2, T[None].expand(50, -1, -1), p[:, None, :].expand(-1, dfa.dead, -1))
    torch.testing.assert_close(M, ref[:, :, : dfa.dead], rtol=0, atol=1e-15)
    live = dfa.table[: dfa.dead] != dfa.dead
    assert (plan.Bc[plan.cls].sum() == live.sum()) and plan.C == len(np.unique(dfa.table.T, axis=0))


def test_decode_step_commits_completable_tokens(dfa):
    n = 40
    logits = torch.randn(n, len(VOCAB), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for method in METHODS:
        sampler = ConstrainedSampler(lambda t: logits, dfa, steps=8, method=method)
        gen = torch.Generator().manual_seed(1)
        x = torch.full((n,), len(VOCAB), dtype=torch.long)
        decoded = torch.zeros(n, dtype=torch.bool)
        for _ in range(8):
            pos, tok = sampler.step(logits, x, decoded, (0, n), 5, generator=gen)
            assert len(pos) == 5 and not decoded[pos].any()
            x[pos], decoded[pos] = tok, True
            # the partial sequence still has a valid completion
            p = torch.softmax(logits, -1)
            p[decoded] = torch.nn.functional.one_hot(x[decoded], len(VOCAB)).double()
            assert inference.log_partition(p, dfa) > -math.inf
        assert decoded.all() and dfa.accepts(x.tolist())


def test_numpy_categorical_matches_torch_inverse_cdf():
    """The numpy draw used by the bisection levels and the token step is the torch inverse CDF, and it
    never returns a zero-weight index (zeros in the middle and at the end of a row)."""
    from dlm_constrain.inference import _categorical, _categorical_np

    g = torch.Generator().manual_seed(3)
    w = torch.rand(400, 9, generator=g, dtype=torch.float64)
    w[w < 0.4] = 0.0
    w[:, 0] += 1e-3  # every row has a positive weight
    u_gen, t_gen = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    u = torch.rand(400, dtype=torch.float64, generator=u_gen).numpy()
    got = _categorical_np(w.numpy(), u)
    want = _categorical(w, t_gen).numpy()
    assert (got == want).all()
    assert (w.numpy()[np.arange(400), got] > 0).all()
