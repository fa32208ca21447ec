"""The command line through main(argv), and one subprocess smoke test."""

import json
import subprocess
import sys

import numpy as np
from entropy_unmask.cli import main


def test_sweep_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert (
        main(["sweep", "--family", "code", "--L", "6", "--V", "3", "--eta", "0.05,0.5", "--out", str(out)])
        == 0
    )
    text = capsys.readouterr().out
    assert "entropy-sum(eta=0.05)" in text and "bound" in text
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 2 and data["rows"][0]["kl"] < 1e-9


def test_sweep_fixed_k_and_own_joint(tmp_path, capsys):
    table = np.zeros((3, 3, 3))
    table[0, 0, 0] = table[1, 1, 1] = table[2, 2, 2] = 1 / 3
    path = tmp_path / "joint.npy"
    np.save(path, table)
    assert main(["sweep", "--joint", str(path), "--schedule", "fixed-k", "--values", "1,3"]) == 0
    text = capsys.readouterr().out
    assert "fixed-k(k=3)" in text


def test_sample_writes_npy(tmp_path, capsys):
    out, its = tmp_path / "x.npy", tmp_path / "it.npy"
    assert (
        main(
            [
                "sample",
                "--family",
                "markov",
                "--L",
                "6",
                "--V",
                "3",
                "--n",
                "20",
                "--value",
                "0.3",
                "--out",
                str(out),
                "--iters-out",
                str(its),
            ]
        )
        == 0
    )
    x = np.load(out)
    assert x.shape == (20, 6) and x.min() >= 0 and np.load(its).max() <= 6
    assert "mean iterations" in capsys.readouterr().out


def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    assert "entropy-sum(eta=0.1)" in capsys.readouterr().out


def test_bench_quick(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--quiet", "--out", str(out)]) == 0
    recs = json.loads(out.read_text())
    assert any(r["benchmark"].endswith("entropy-sum-vs-fixed-k") for r in recs)
    assert any(r["benchmark"] == "iters-at-kl0.05/L6/code/entropy-sum-vs-fixed-k" for r in recs)
    assert any(r["benchmark"].endswith("entropy-sum-random-vs-fixed-k") for r in recs)
    text = capsys.readouterr().out
    assert "iteration bound" in text and "none above L = 5" in text


def test_subprocess_version():
    res = subprocess.run(
        [sys.executable, "-m", "entropy_unmask.cli", "--version"], capture_output=True, text=True
    )
    assert res.returncode == 0 and res.stdout.strip().startswith("entropy-unmask ")


def test_sweep_geometric_values(capsys):
    assert main(["sweep", "--family", "code", "--L", "5", "--V", "3", "--values", "geom:0.1:1:3"]) == 0
    text = capsys.readouterr().out
    assert "eta=0.1)" in text and "eta=0.3162)" in text and "eta=1)" in text
    assert main(["sweep", "--family", "code", "--L", "5", "--V", "3", "--values", "geom:1:0.1:3"]) == 2
    assert "geom:START:STOP:N" in capsys.readouterr().err


def test_sweep_out_never_overwrites_the_joint_and_sample_count_is_bounded(tmp_path, capsys):
    joint = tmp_path / "joint.npy"
    table = np.random.default_rng(0).random((3, 3, 3))
    np.save(joint, table / table.sum())
    before = joint.read_bytes()
    assert main(["sweep", "--joint", str(joint), "--values", "0.1", "--out", str(joint)]) == 2
    assert "would overwrite the input --joint" in capsys.readouterr().err
    assert joint.read_bytes() == before
    assert main(["sample", "--joint", str(joint), "--n", "10000000000000"]) == 2
    assert "--n must be an integer in [1, 10000000]" in capsys.readouterr().err
