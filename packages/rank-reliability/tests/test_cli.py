"""The CLI through main(argv), plus one subprocess smoke test."""

import json
import subprocess
import sys

import numpy as np
import pytest
from rank_reliability import cli
from rank_reliability.cli import main
from rank_reliability.data import DigitsMatrix, simulate_2pl


@pytest.fixture
def matrix(tmp_path):
    X = simulate_2pl(30, 120, seed=1).X
    X = X[:, X.min(0) < X.max(0)]
    path = tmp_path / "X.npy"
    np.save(path, X)
    return path, X


def test_analyze(matrix, tmp_path, capsys):
    path, _ = matrix
    out = tmp_path / "a.json"
    assert main(["analyze", "--matrix", str(path), "--splits", "30", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "split-half" in text and "λ★6" in text and "λ6 n/a" in text
    data = json.loads(out.read_text())
    assert data["n_models"] == 30 and data["split_half"]["n_splits"] == 30


def test_select_writes_each_format(matrix, tmp_path, capsys):
    path, _ = matrix
    for suffix in (".json", ".npy", ".txt"):
        out = tmp_path / f"sel{suffix}"
        assert main(["select", "--matrix", str(path), "--budget", "12", "--out", str(out)]) == 0
    idx = np.load(tmp_path / "sel.npy")
    assert idx.shape == (12,)
    assert json.loads((tmp_path / "sel.json").read_text())["indices"] == idx.tolist()
    assert (tmp_path / "sel.txt").read_text().split() == [str(i) for i in idx]
    assert main(["select", "--matrix", str(path), "--budget", "5", "--method", "random", "--seed", "3"]) == 0
    assert "by random" in capsys.readouterr().out


def test_cohorts_and_csv_names(tmp_path, capsys):
    X = simulate_2pl(20, 60, seed=2).X
    X = X[:, X.min(0) < X.max(0)]
    path = tmp_path / "X.csv"
    lines = ["model," + ",".join(f"q{j}" for j in range(X.shape[1]))]
    lines += [f"m{i}," + ",".join(str(int(v)) for v in row) for i, row in enumerate(X)]
    path.write_text("\n".join(lines) + "\n")
    assert main(["cohorts", "--matrix", str(path), "--out", str(tmp_path / "c.json")]) == 0
    text = capsys.readouterr().out
    assert "higher" in text and "random half" in text
    assert main(["select", "--matrix", str(path), "--budget", "3"]) == 0
    assert "items: q" in capsys.readouterr().out


def test_make_matrix_writes_npy_and_csv(tmp_path, monkeypatch, capsys):
    fake = DigitsMatrix(
        np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), ["a", "b", "c"], np.array([0, 2]), 3, 1
    )
    import rank_reliability.data as data

    monkeypatch.setattr(data, "digits_matrix", lambda **kw: fake)
    assert main(["make-matrix", "--dataset", "digits", "--out", str(tmp_path / "d.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "d.npy"), fake.X)
    assert main(["make-matrix", "--out", str(tmp_path / "d.csv")]) == 0
    assert (tmp_path / "d.csv").read_text().splitlines()[0] == "model,item0,item2"
    assert "3 models × 2 items" in capsys.readouterr().out
    assert main(["make-matrix", "--dataset", "mnist", "--out", str(tmp_path / "d.npy")]) == 2


def test_bench_quick_and_reproduce_guard(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["bench", "--quick", "--out", str(out)]) == 0
    recs = json.loads(out.read_text())
    assert {r["benchmark"] for r in recs} >= {"select-2pl-quick-b20-vs-random", "analysis-30x500-wallclock"}
    assert main(["reproduce", "--draws", "1"]) == 2
    assert main(["reproduce", "--plot", "x.jpg"]) == 2


def test_version_and_subprocess_smoke():
    assert main(["--version"]) == 0
    assert set(cli.app.commands) >= {
        "analyze",
        "select",
        "cohorts",
        "make-matrix",
        "demo",
        "bench",
        "reproduce",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "rank_reliability.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **__import__("os").environ,
            "PYTHONPATH": str(__import__("pathlib").Path(cli.__file__).parents[1]),
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert "split-half Kendall τ" in proc.stdout and "lambda6_star" in proc.stdout
