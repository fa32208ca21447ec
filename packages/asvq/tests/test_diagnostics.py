"""Utilisation, perplexity, dead codes over training and loss variance on known answers."""

import math

import numpy as np
import pytest
from asvq.diagnostics import CodebookTracker, codebook_stats, loss_variance, seed_spread
from asvq.reference import perplexity

from papershelf.errors import InputError


@pytest.mark.parametrize("K", [2, 17, 4096])
def test_uniform_usage_gives_perplexity_K(K):
    idx = np.tile(np.arange(K), 3)
    s = codebook_stats(idx, K)
    assert s["perplexity"] == pytest.approx(K, rel=1e-12)
    assert s["utilization"] == 1.0 and s["dead"] == 0


def test_single_code_and_partial_usage():
    assert codebook_stats(np.zeros(100, dtype=int), 8)["perplexity"] == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 30, size=500)
    s = codebook_stats(idx, 64)
    assert s["perplexity"] == pytest.approx(perplexity(idx, 64), rel=1e-12)
    assert s["used"] == len(np.unique(idx)) and s["utilization"] == s["used"] / 64
    # two codes used 3:1 → exp(H) with H = -(¾ ln ¾ + ¼ ln ¼)
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert codebook_stats([0, 0, 0, 1], 4)["perplexity"] == pytest.approx(math.exp(h))


def test_tracker_counts_codes_unused_within_the_window():
    t = CodebookTracker(10, window=2)
    t.update([0, 1])
    t.update([2])
    t.update([3])
    # step 3: codes used in the last 2 steps are {2, 3}; code 0 and 1 were last used at step 0
    row = t.snapshot()
    assert row["dead"] == 8 and row["step"] == 3
    assert row["utilization_window"] == pytest.approx(0.2)
    t.update([0])
    assert t.dead() == 8  # {3, 0} alive


def test_loss_variance_and_spread():
    assert loss_variance([1.0, 2.0, 3.0, 100.0], last=3) == pytest.approx(np.var([2, 3, 100], ddof=1))
    assert seed_spread([1.0, 1.0, 1.0]) == 0.0
    with pytest.raises(InputError):
        seed_spread([1.0])
    with pytest.raises(InputError, match="lie in"):
        codebook_stats([0, 9], 4)
