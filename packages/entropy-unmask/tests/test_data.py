"""Target families: entropies, structure and round trips."""

import itertools
import math

import numpy as np
import pytest
from entropy_unmask import (
    copy,
    hmm,
    joint_from_table,
    make_family,
    markov,
    mixture,
    product,
    random_code,
    template,
)
from entropy_unmask.data import FAMILIES, hmm_matrices


def test_code_entropy_is_log_size():
    j = random_code(L=8, V=4, size=32, seed=0)
    assert j.entropy == pytest.approx(math.log(32))
    assert j.n == 32


def test_copy_repeats_first_half():
    j = copy(L=8, V=3, seed=1)
    assert (j.support[:, :4] == j.support[:, 4:]).all()


def test_markov_support_and_transitions():
    j = markov(L=6, V=4, branching=2, seed=0)
    assert j.n == 4 * 2**5
    pairs = {(a, b) for row in j.support.tolist() for a, b in itertools.pairwise(row)}
    assert len(pairs) == 8  # each state has exactly two successors


def test_hmm_matches_brute_force_sum_over_hidden_paths():
    L, V, hidden, emit, seed = 4, 3, 4, 2, 0
    j = hmm(L=L, V=V, hidden=hidden, emit=emit, seed=seed)
    A, E = hmm_matrices(np.random.default_rng(seed), V, hidden, emit)
    table = np.zeros((V,) * L)
    for z in itertools.product(range(hidden), repeat=L):
        pz = math.prod(A[a, b] for a, b in itertools.pairwise(z)) / hidden
        for x in itertools.product(range(V), repeat=L):
            table[x] += pz * math.prod(E[zt, xt] for zt, xt in zip(z, x))
    assert table.sum() == pytest.approx(1.0) and j.entropy > 0
    np.testing.assert_allclose(j.table(), table, atol=1e-15)


def test_random_code_on_a_space_above_2_to_the_40():
    # 16^12 = 2^48 sequences: the words used to be drawn only below 2^40 (a crash above it)
    j = random_code(L=12, V=16, size=16, seed=0)
    assert j.n == 16 and j.entropy == pytest.approx(math.log(16))
    assert random_code(L=5, V=3, size=7, seed=1).n == 7  # small spaces: unchanged path


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_builds_and_round_trips_through_a_table(name):
    j = make_family(name, 5, 3, seed=0)
    j2 = joint_from_table(j.table())
    d1 = dict(zip(map(tuple, j.support.tolist()), j.probs))
    d2 = dict(zip(map(tuple, j2.support.tolist()), j2.probs))
    assert d1.keys() == d2.keys()
    assert all(abs(d1[k] - d2[k]) < 1e-15 for k in d1)


def test_product_entropy_is_sum_of_marginal_entropies():
    j = product(L=4, V=3, seed=0)
    t = j.table()
    H = 0.0
    for i in range(4):
        m = t.sum(axis=tuple(a for a in range(4) if a != i))
        H -= (m * np.log(m)).sum()
    assert j.entropy == pytest.approx(H)


def test_low_entropy_families_for_the_bench():
    for name in ("markov", "code", "template", "copy", "hmm", "mixture"):
        assert make_family(name, 10, 4, seed=0).entropy_fraction <= 0.3


def test_mixture_weights():
    a, b = template(L=5, V=3, seed=0), template(L=5, V=3, seed=1)
    m = mixture([a, b], [0.25, 0.75])
    assert m.probs.sum() == pytest.approx(1.0)
