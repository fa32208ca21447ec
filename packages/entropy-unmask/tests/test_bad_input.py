"""Hostile inputs: clear InputError naming the argument, CLI exit 2, no half-written files."""

import numpy as np
import pytest
from entropy_unmask import (
    EntropySum,
    ExactOracle,
    FixedK,
    LogitsPredictor,
    exact_analysis,
    joint_from_table,
    markov,
    random_code,
    sample,
)
from entropy_unmask.baselines import EBSampler, MaxEntropyThreshold
from entropy_unmask.cli import main

from papershelf.errors import InputError


@pytest.mark.parametrize("eta", [0, -0.1, float("nan"), float("inf")])
def test_eta_must_be_positive(eta):
    with pytest.raises(InputError, match="eta"):
        EntropySum(eta)


def test_other_parameters():
    with pytest.raises(InputError, match="k"):
        FixedK(0)
    with pytest.raises(InputError, match="tau"):
        MaxEntropyThreshold(-1)
    with pytest.raises(InputError, match="gamma"):
        EBSampler(float("nan"))
    with pytest.raises(InputError, match="order"):
        EntropySum(0.1, order="sideways")


def _const(rows):
    return lambda tokens: np.repeat(np.asarray(rows, dtype=float)[None, None, :], len(tokens), 0).repeat(3, 1)


@pytest.mark.parametrize(
    "rows, msg",
    [([np.nan, 0.5], "NaN"), ([-0.5, 1.5], "negative"), ([0.3, 0.3], "sum to 1")],
)
def test_predictor_rows_must_be_distributions(rows, msg):
    with pytest.raises(InputError, match=msg):
        sample(_const(rows), EntropySum(0.1), L=3, n=2, rng=0)


def test_predictor_shape_is_checked():
    with pytest.raises(InputError, match="shape"):
        sample(lambda t: np.ones((len(t), 2, 2)) / 2, EntropySum(0.1), L=3, n=1, rng=0)


def test_joint_tables_too_large_are_refused_with_the_size():
    with pytest.raises(InputError, match="16,777,216"):
        joint_from_table(np.lib.stride_tricks.as_strided(np.zeros(1), shape=(4,) * 12, strides=(0,) * 12))


def test_dp_too_large_is_refused_with_the_size():
    j = random_code(L=14, V=4, size=4096, seed=0)
    with pytest.raises(InputError, match="cells"):
        exact_analysis(j.oracle(), EntropySum(0.1), j)


def test_bad_joints():
    with pytest.raises(InputError, match="sum to 1"):
        joint_from_table(np.full((2, 2), 0.3))
    with pytest.raises(InputError, match="non-negative"):
        joint_from_table(np.array([[0.5, 0.6], [-0.1, 0.0]]))
    with pytest.raises(InputError, match="distinct"):
        ExactOracle(np.array([[0, 1], [0, 1]]), np.array([0.5, 0.5]), V=2)
    with pytest.raises(InputError, match="tokens"):
        ExactOracle(np.array([[0, 2]]), np.array([1.0]), V=2)


def test_oracle_raise_fallback():
    o = markov(L=4, V=4, branching=1, seed=0).oracle(fallback="raise")
    bad = o.support[0].copy()
    bad[1] = (bad[1] + 1) % 4
    with pytest.raises(InputError, match="probability zero"):
        o(np.array([[bad[0], bad[1], -1, -1]]))


def test_logits_predictor_rejects_nan():
    pred = LogitsPredictor(lambda ids: np.full((*ids.shape, 2), np.nan), mask_id=2)
    with pytest.raises(InputError, match="NaN"):
        pred(np.array([[-1, 0]]))


def test_cli_errors_exit_2_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "x.npy"
    assert main(["sample", "--schedule", "entropy-sum", "--value", "0", "--out", str(out)]) == 2
    assert "error: eta must be" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.iterdir())
    assert main(["sweep", "--values", "0.1,abc"]) == 2
    assert main(["sweep", "--joint", str(tmp_path / "missing.npy")]) == 2
    big = tmp_path / "big.npy"
    np.save(big, np.zeros((2,) * 23))
    assert main(["sweep", "--joint", str(big)]) == 2
    assert "cells" in capsys.readouterr().err


def test_fixed_k_refuses_too_many_exact_subsets():
    probs = np.full((20, 2), 0.5)
    with pytest.raises(InputError, match="125,970 subsets"):
        FixedK(8).set_distribution(probs, np.ones(20, bool))
    assert len(FixedK(8).set_distribution(probs[:16], np.ones(16, bool))) == 12870


def test_logits_predictor_mask_id_and_vocabulary():
    zeros = lambda ids: np.zeros((*ids.shape, 4))  # noqa: E731
    for kwargs, match in (({"mask_id": -1}, "mask_id"), ({"mask_id": 0, "V": 1}, "nothing left"),
                          ({"mask_id": 9, "V": 0}, "V"), ({"mask_id": 1.5}, "mask_id")):  # fmt: skip
        with pytest.raises(InputError, match=match):
            LogitsPredictor(zeros, **kwargs)
    with pytest.raises(InputError, match="fewer than V = 6"):
        LogitsPredictor(zeros, mask_id=9, V=6)(np.array([[-1, 0]]))
    with pytest.raises(InputError, match="revealed token equals mask_id 2"):  # e.g. a prompt holding it
        LogitsPredictor(zeros, mask_id=2)(np.array([[-1, 2]]))
    with pytest.raises(InputError, match="only the mask token"):
        LogitsPredictor(lambda ids: np.zeros((*ids.shape, 1)), mask_id=0)(np.array([[-1, -1]]))


def test_logits_predictor_never_decodes_to_the_mask_token():
    # LLaDA-style: the model scores its own mask id (here 1, inside the vocabulary) and likes it best
    def logits(ids):
        z = np.zeros((*ids.shape, 4))
        z[..., 1] = 10.0
        return z

    for V in (None, 3):
        p = LogitsPredictor(logits, mask_id=1, V=V)(np.array([[-1, 2]]))
        width = 4 if V is None else 3
        assert p.shape == (1, 2, width) and p[0, 0, 1] == 0.0
        expected = np.where(np.arange(width) == 1, 0.0, 1.0 / (width - 1))  # uniform over the others
        assert np.allclose(p[0, 0], expected) and np.allclose(p[0, 1], expected)


def test_exact_analysis_refuses_a_predictor_with_another_vocabulary():
    joint = markov(L=3, V=3, seed=0)
    pred = LogitsPredictor(lambda ids: np.zeros((*ids.shape, 4)), mask_id=4)
    with pytest.raises(InputError, match="V = 3"):
        exact_analysis(pred, EntropySum(0.1), joint)


@pytest.mark.parametrize(
    "table", [np.ones((2, 2), complex) / 4, np.array(["a", "b"]), None, {"a": np.ones((2, 2)) / 4}]
)
def test_cli_joint_files_that_are_not_real_tables(tmp_path, capsys, table):
    path = tmp_path / "t.npy"
    if table is None:
        path.write_bytes(b"")
    elif isinstance(table, dict):
        with open(path, "wb") as handle:
            np.savez(handle, **table)
    else:
        np.save(path, table)
    assert main(["sweep", "--joint", str(path)]) == 2
    assert "--joint" in capsys.readouterr().err


def test_cli_output_paths_are_checked_before_work(tmp_path, capsys):
    same = tmp_path / "a.npy"
    assert main(["sample", "--out", str(same), "--iters-out", str(tmp_path / "." / "a.npy")]) == 2
    assert "same file" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["reproduce", "--quick", "--plot", str(blocker)]) == 2
    assert "--plot" in capsys.readouterr().err
    assert main(["bench", "--quick", "--out", str(tmp_path)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_sequence_spaces_beyond_int64_codes_are_refused(capsys):
    # 64^12 = 2^72 sequences: the oracle's int64 codes wrapped around and it conditioned on the wrong
    # context (p(X_0 | X_11) came out uniform although X_0 = X_11)
    sup = np.zeros((2, 12), dtype=np.int64)
    sup[0, [0, 11]], sup[1, [0, 11]] = 1, 2
    with pytest.raises(InputError, match="2\\^62"):
        ExactOracle(sup, np.array([0.5, 0.5]), V=64)
    for family in ("template", "code", "markov"):
        assert main(["sweep", "--family", family, "--L", "16", "--V", "64"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: V^L = 64^16")


def test_family_sizes_and_geometric_grids_give_one_error_line(capsys):
    for argv, word in (
        (["sweep", "--family", "point", "--L", "3", "--V", "0"], "error: V must be"),
        (["sweep", "--family", "code", "--L", "5", "--V", "3", "--values", "geom:0.1:inf:3"], "< inf"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and word in err[0], err


def test_iteration_bound_and_output_table_validate_their_arguments():
    from entropy_unmask import exact_output_distribution, iteration_bound

    for eta in (0, -1.0, float("nan")):
        with pytest.raises(InputError, match="eta"):
            iteration_bound(1.0, 0.0, eta)
    with pytest.raises(InputError, match="kl"):
        iteration_bound(1.0, float("nan"), 0.5)
    assert iteration_bound(1.0, 0.0, 0.5) == 3.0
    oracle = markov(L=3, V=3, seed=0).oracle()
    with pytest.raises(InputError, match="L must be"):
        exact_output_distribution(oracle, EntropySum(0.1), -1, 3)


@pytest.mark.parametrize(
    "rows, msg",
    [([np.nan, 0.5, 0.5], "NaN"), ([-0.5, 1.0, 0.5], "negative"), ([0.3, 0.3, 0.3], "sum to 1")],
)
def test_exact_analysis_refuses_predictor_rows_that_are_not_distributions(rows, msg):
    joint = markov(L=3, V=3, seed=0)
    with pytest.raises(InputError, match=msg):
        exact_analysis(_const(rows), EntropySum(0.1), joint)


def test_reproduce_without_torch_fails_before_any_work(monkeypatch, capsys):
    import entropy_unmask.model as model
    from entropy_unmask.experiments import reproduce

    from papershelf.errors import MissingDependencyError

    def missing():
        raise MissingDependencyError("torch", package="entropy-unmask", extra="bench")

    monkeypatch.setattr(model, "_torch", missing)
    logged = []
    with pytest.raises(MissingDependencyError, match="torch"):
        reproduce(quick=True, log=logged.append)
    assert logged == []  # refused up front, not after the exact curves
    assert main(["reproduce", "--quick"]) == 2
    assert "entropy-unmask[bench]" in capsys.readouterr().err
