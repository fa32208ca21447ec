"""The tiny masked diffusion LM trains and plugs into the sampler and the exact engine."""

import math

import numpy as np
import pytest
from entropy_unmask import EntropySum, FixedK, exact_analysis, markov, sample

torch = pytest.importorskip("torch")


def test_tiny_mdm_trains_and_drives_the_sampler():
    from entropy_unmask.model import train_mdm

    target = markov(L=4, V=3, seed=0)
    trained = train_mdm(target, steps=5, batch=16, d=8, layers=1, seed=0)
    pred = trained.predictor()
    probs = pred(np.array([[-1, -1, -1, -1], [0, -1, 1, -1]]))
    assert probs.shape == (2, 4, 3) and np.allclose(probs.sum(-1), 1.0)
    x, it = sample(pred, EntropySum(0.3), 4, 16, 0)
    assert x.shape == (16, 4) and it.max() <= 4
    res = exact_analysis(pred, FixedK(2), target)
    assert math.isfinite(res.kl) and res.kl >= 0
    # fixed-k takes ceil(L / k) iterations on every trajectory, whatever the predictor
    assert res.expected_iterations == res.iterations_low == res.iterations_high == 2
    # a state-dependent rule on a learned predictor has no exact off-support tail: iterations are bracketed
    res = exact_analysis(pred, EntropySum(0.3), target)
    assert math.isnan(res.expected_iterations) and res.iterations_low <= res.iterations_high
