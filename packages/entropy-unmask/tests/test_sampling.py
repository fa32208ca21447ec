"""Monte Carlo samples follow the exact law (chi-square), and iterations stay within L."""

import numpy as np
import pytest
from entropy_unmask import EntropySum, FixedK, chi_square_test, exact_analysis, markov, random_code, sample


@pytest.mark.parametrize(
    "sched", [EntropySum(0.6), EntropySum(0.6, order="random"), FixedK(2)], ids=["es", "es-random", "fixed2"]
)
def test_monte_carlo_matches_exact_law(sched):
    # 50k samples for the paper's rule, 20k for the others; the test has size 1e-3 per case, so a
    # correct sampler fails it 0.1% of the time and the fixed seed makes the outcome deterministic.
    target = markov(L=6, V=3, seed=0)
    res = exact_analysis(target.oracle(), sched, target)
    n = 50_000 if sched.deterministic else 20_000
    x, it = sample(target.oracle(), sched, target.L, n, np.random.default_rng(1))
    chi = chi_square_test(x, target.support, res.q_support, res.off_support_mass, target.V)
    assert chi.bins > 10 and chi.pvalue > 1e-3, chi
    # mean iterations agree with the exact expectation (CLT, 5 standard errors)
    se = it.std() / np.sqrt(it.size)
    assert abs(it.mean() - res.expected_iterations) < 5 * se + 1e-9
    assert it.max() <= target.L and it.min() >= 1


def test_chi_square_detects_a_wrong_law():
    target = markov(L=6, V=3, seed=0)
    wrong = exact_analysis(target.oracle(), FixedK(1), target)  # the exact law of another schedule
    x, _ = sample(target.oracle(), FixedK(3), target.L, 20_000, np.random.default_rng(2))
    chi = chi_square_test(x, target.support, wrong.q_support, wrong.off_support_mass, target.V)
    assert chi.pvalue < 1e-6


def test_prompt_positions_are_kept():
    target = random_code(L=6, V=3, size=5, seed=0)
    prompt = target.support[2].copy()
    prompt[[1, 4]] = -1
    x, it = sample(target.oracle(), EntropySum(0.1), 6, 50, 0, prompt=prompt)
    assert (x == target.support[2]).all()  # the code word is determined by the prompt
    assert (it == 1).all()


def test_monte_carlo_matches_the_full_exact_output_distribution():
    # exact_output_distribution gives the law over all V^L sequences, the sampler's off-support
    # sequences included (eta = 1.5 sends ~1/3 of the mass off the support here); one chi-square bin
    # per sequence with expected count >= 5, size 1e-3 as above
    from entropy_unmask import exact_output_distribution
    from entropy_unmask.exact import full_support

    target = markov(L=5, V=3, seed=0)
    sched = EntropySum(1.5)
    table = exact_output_distribution(target.oracle(), sched, target.L, target.V)
    allseq = full_support(target.L, target.V)
    q = table[tuple(allseq.T)]
    assert q[~np.isin(allseq @ 3 ** np.arange(5), target.support @ 3 ** np.arange(5))].sum() > 0.1
    x, _ = sample(target.oracle(), sched, target.L, 20_000, np.random.default_rng(3))
    chi = chi_square_test(x, allseq, q, 0.0, target.V)
    assert chi.bins > 20 and chi.pvalue > 1e-3, chi
