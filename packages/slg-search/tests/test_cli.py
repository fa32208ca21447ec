"""The CLI through main(argv), one subprocess smoke test, and hostile input (one line, exit 2, no file)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from slg_search import __version__
from slg_search.cli import main


def test_predict_npy_and_csv(tmp_path, capsys):
    r = np.random.default_rng(0).normal(size=300)
    np.save(tmp_path / "r.npy", r)
    np.savetxt(tmp_path / "r.csv", r, delimiter=",")
    out = tmp_path / "pred.json"
    assert main(["predict", "--rewards", str(tmp_path / "r.npy"), "--n", "10,1000", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mu " in text and "1000" in text
    data = json.loads(out.read_text())
    assert [p["n"] for p in data["predictions"]] == [10, 1000]
    assert main(["predict", "--rewards", str(tmp_path / "r.csv"), "--n", "1000", "--family", "gpd"]) == 0
    assert "shape" in capsys.readouterr().out


def test_predict_with_too_few_rewards_falls_back(tmp_path, capsys):
    np.save(tmp_path / "r.npy", np.array([0.3, 0.9]))
    assert main(["predict", "--rewards", str(tmp_path / "r.npy")]) == 0
    assert "fewer than 2 rewards in the tail" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content,match",
    [
        (np.array([1.0, np.nan]), "--rewards must be finite"),
        (np.zeros((3, 3)), "1-D"),
        (np.array([]), "empty"),
    ],
)
def test_predict_hostile_rewards(tmp_path, capsys, content, match):
    np.save(tmp_path / "r.npy", content)
    out = tmp_path / "pred.json"
    assert main(["predict", "--rewards", str(tmp_path / "r.npy"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and match in err and err.count("\n") == 1
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "r.npy"]


@pytest.mark.parametrize(
    "argv,match",
    [
        (["predict", "--rewards", "missing.npy"], "no such file"),
        (["predict", "--rewards", "{r}", "--n", "0"], "--n"),
        (["predict", "--rewards", "{r}", "--tail-fraction", "1.2"], "tail_fraction"),
        (["simulate", "--budget", "500", "--m", "80", "--reps", "2"], "needs: (width + 1) * m = 720"),
        (["simulate", "--reps", "1"], "--reps"),
        (["simulate", "--methods", "slg,magic", "--reps", "2"], "magic"),
        (["search", "--env", "countdown", "--numbers", "1,2"], "both --numbers and --target"),
        (["search", "--env", "countdown", "--numbers", "0,2", "--target", "5"], "positive integers"),
        (["search", "--env", "countdown", "--budget", "50", "--m", "20"], "at least 100"),
        (["search", "--env", "gaussian", "--width", "0"], "width"),
    ],
)
def test_hostile_arguments_exit_2_with_one_line(tmp_path, capsys, argv, match):
    np.save(tmp_path / "r.npy", np.arange(10.0))
    argv = [a.replace("{r}", str(tmp_path / "r.npy")) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and match in err and err.count("\n") == 1


def test_simulate_and_search(tmp_path, capsys):
    out = tmp_path / "sim.json"
    argv = [
        "simulate",
        "--budget",
        "200",
        "--reps",
        "5",
        "--methods",
        "best-of-n,slg,oracle",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert "regret ratio" in capsys.readouterr().out
    assert json.loads(out.read_text())["setting"]["reps"] == 5
    argv = ["search", "--env", "countdown", "--numbers", "3,7,25,50", "--target", "161", "--budget", "200"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "200 rollouts" in text and "best response" in text
    assert main(["search", "--env", "gaussian", "--method", "slg-tree", "--budget", "300"]) == 0


def test_bench_quick_writes_valid_records(tmp_path, capsys):
    from papershelf.bench import validate_record

    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--reps", "6", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert {r["benchmark"] for r in records} >= {
        "two-stage-regret-slg",
        "prediction-gaussian",
        "tail-fit-speed",
    }
    assert all(validate_record(r) == [] for r in records)
    assert "ratio" in capsys.readouterr().out


def test_version_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "slg_search.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and __version__ in proc.stdout
