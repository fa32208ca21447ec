"""The exact analyses behind the targets: the best deterministic rule (DP), the sampler-side iteration
bound and the two counterexamples."""

import json
import math

import numpy as np
import pytest
from entropy_unmask import EBSampler, EntropySum, MaxEntropyThreshold, TopKConfidence, exact_analysis
from entropy_unmask.analysis import (
    copy_counterexample,
    deterministic_dp,
    iterations_at_kl,
    lower_hull,
    pairs_counterexample,
    sampler_bound,
)
from entropy_unmask.cli import main
from entropy_unmask.data import make_family
from entropy_unmask.exact import iteration_bound

from papershelf.errors import InputError

RULES = (EntropySum(0.1), EntropySum(0.4), EBSampler(0.3), MaxEntropyThreshold(0.3), TopKConfidence(2))


@pytest.mark.parametrize("family", ["markov", "hmm"])
def test_dp_objective_is_below_every_deterministic_rule(family):
    # the DP minimises E_p[iters] + lam * KL over every deterministic rule; the package's rules are some
    joint = make_family(family, 5, 3, seed=1)
    rows = [exact_analysis(joint.oracle(), s, joint) for s in RULES]
    for lam in (0.3, 3.0, 30.0):
        best = deterministic_dp(joint, lam)["objective"]
        for r in rows:
            assert best <= r.p_expected_iterations + lam * r.kl + 1e-9


@pytest.mark.parametrize("family", ["markov", "copy", "hmm"])
def test_dp_policy_checked_by_the_exact_engine(family):
    joint = make_family(family, 6, 3, seed=0)
    for lam in (2.0, 40.0):
        d = deterministic_dp(joint, lam, policy=True)
        res = exact_analysis(joint.oracle(), d["policy"], joint)
        assert res.p_expected_iterations == pytest.approx(d["iterations"], abs=1e-10)
        assert res.kl == pytest.approx(d["kl"], abs=1e-10)
        assert res.tc_sum == pytest.approx(res.kl, abs=1e-10)  # deterministic rule: KL = E_p[sum TC]


def test_dp_on_a_product_target_is_one_exact_step():
    d = deterministic_dp(make_family("product", 4, 3), 10.0)
    assert d["iterations"] == 1.0 and d["kl"] < 1e-12


def test_dp_refuses_large_problems():
    with pytest.raises(InputError, match="3\\^L"):
        deterministic_dp(make_family("code", 13, 2), 1.0)


def test_hull_and_interpolation():
    hull = lower_hull([(1.0, 1.0), (2.0, 0.1), (2.5, 0.5), (3.0, 0.0)])
    assert hull == [(1.0, 1.0), (2.0, 0.1), (3.0, 0.0)]
    assert iterations_at_kl(hull, 0.05) == pytest.approx(2.5)
    assert iterations_at_kl(hull, 0.1) == pytest.approx(2.0)
    assert math.isinf(iterations_at_kl([(1.0, 1.0)], 0.05))


def test_copy_counterexample_exceeds_the_bound_only_for_the_sampler():
    c = copy_counterexample()
    assert c["kl"] == pytest.approx(math.log(2)) and c["H"] == pytest.approx(math.log(2))
    assert c["E_p"] == pytest.approx(2.0) and c["E_q"] == pytest.approx(2.5)
    assert c["E_p"] <= c["bound"] < c["E_q"] <= c["sampler_bound"]
    assert c["bound"] == pytest.approx(2 * math.log(2) + 1)


def test_pairs_ascending_order_has_kl_equal_to_the_entropy():
    for r in pairs_counterexample((2, 3)):
        assert r["kl_ascending"] == pytest.approx(r["H"], abs=1e-10)
        assert r["kl_random"] < 0.5 * r["H"]


def test_pairs_counterexample_needs_the_crossing_token():
    # Ascending order without the crossing token reveals one copy per pair, and the other copy (entropy 0)
    # first in the next step: exact KL = 0 in n + 1 iterations. The counterexample is against
    # (ascending order, crossing token), not against ordering by entropy as such (README, Fidelity).
    for r in pairs_counterexample((2, 3, 4)):
        assert abs(r["kl_ascending_no_crossing"]) < 1e-12
        assert r["iters_ascending_no_crossing"] == pytest.approx(r["pairs"] + 1, abs=1e-12)
        assert r["kl_ascending"] > 0.6
        # ... and (H + KL)/eta + 1 is a bound for the crossing-token rule only: 3 > 2.538 at 2 pairs.
        assert r["iters_ascending_no_crossing"] > iteration_bound(r["H"], 0.0, r["eta"]) + 0.4


def test_sampler_bound_holds_for_every_rule():
    joint = make_family("markov", 5, 3, seed=2)
    for s in (*RULES, EntropySum(1.0), EntropySum(3.0)):
        res = exact_analysis(joint.oracle(), s, joint)
        assert res.expected_iterations <= sampler_bound(joint, res) + 1e-12


def test_cli_analyze(tmp_path, capsys):
    out = tmp_path / "a.json"
    assert (
        main(["analyze", "--family", "markov", "--L", "5", "--V", "3", "--max-pairs", "3", "--out", str(out)])
        == 0
    )
    text = capsys.readouterr().out
    assert "E_q = 2.5000" in text and "best deterministic" in text
    data = json.loads(out.read_text())
    assert data["copy"]["E_q"] == pytest.approx(2.5) and np.isfinite(data["frontier"]["iterations_at_target"])
    assert main(["analyze", "--kl", "0"]) == 2
    assert "--kl" in capsys.readouterr().err


def test_random_order_iteration_bound_uses_the_tc_sum():
    from entropy_unmask.experiments import run_schedule

    joint = make_family("copy", 6, 3)
    for eta in (0.3, 1.0):
        row = run_schedule(joint, EntropySum(eta, order="random"))
        assert row["tc_sum"] >= row["kl"] - 1e-12  # a random rule: KL <= E_p[sum TC]
        assert row["bound"] == pytest.approx((row["entropy"] + row["tc_sum"]) / eta + 1)
        assert row["p_expected_iterations"] <= row["bound"] + 1e-12


def test_cli_analyze_validates_every_argument_before_any_output(tmp_path, capsys):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.ones((3, 3)) / 5)  # sums to 1.8
    out = tmp_path / "never.json"
    for argv, word in (
        (["--joint", str(bad)], "--joint"),
        (["--joint", str(bad), "--no-frontier"], "--joint"),
        (["--L", "0"], "L"),
        (["--max-pairs", "9"], "--max-pairs"),
    ):
        assert main(["analyze", *argv, "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and word in captured.err and len(captured.err.strip().splitlines()) == 1
    assert not out.exists()
