"""The CLI through main(argv): outputs, atomic files, one-line errors with exit code 2; one subprocess run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bif_hgp.cli import main


def _error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(("error:", "usage:")) and "Traceback" not in err
    assert len(err.splitlines()) == 1 or err.startswith("usage:")
    return err


def test_run_prints_scores_and_writes_json(tmp_path, capsys):
    out = tmp_path / "run.json"
    argv = [
        "run",
        "--problem",
        "additive2d",
        "--budget",
        "5",
        "--grid",
        "6",
        "--seed",
        "1",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "parent R²" in text and "AUC" in text
    assert "child a: lengthscale / outputscale / noise" in text and "parent noise" in text
    data = json.loads(out.read_text())
    assert data["problem"] == "additive2d" and len(data["run"]["y"]) == 5
    assert data["run"]["n_queries"] == [3, 4, 5]
    assert set(data["run"]["child_r2"]) == {"a", "b"}
    assert data["manifest"]["python"]


def test_run_without_an_initial_design_writes_strict_json(tmp_path, capsys):
    # no observation before the first query: best_y starts undefined (null), not NaN (an error)
    out = tmp_path / "run.json"
    assert main(["run", "--n-init", "0", "--budget", "3", "--grid", "5", "-q", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["run"]["n_queries"][0] == 0 and data["run"]["best_y"][0] is None
    assert all(v is not None for v in data["run"]["best_y"][1:])


def test_run_baselines(tmp_path, capsys):
    for method in ("vanilla", "random"):
        assert main(["run", "--method", method, "--budget", "4", "--grid", "5", "-q"]) == 0
    assert "exploration score" in capsys.readouterr().out


def test_bad_inputs_exit_2_without_writing(tmp_path, capsys):
    out = tmp_path / "run.json"
    base = ["run", "--grid", "5", "--out", str(out)]
    assert "--budget (2) must be at least the initial design --n-init (3)" in _error(
        capsys, [*base, "--budget", "2"]
    )
    assert "--problem must be one of" in _error(capsys, [*base, "--problem", "branin"])
    assert "--method must be one of" in _error(capsys, [*base, "--method", "turbo"])
    assert "noise must be in" in _error(capsys, [*base, "--noise", "-1", "--budget", "4"])
    assert "--budget must be an integer in [1, 2000]" in _error(capsys, [*base, "--budget", "100000000"])
    assert "grid must be an integer" in _error(capsys, ["run", "--grid", "1", "--budget", "4"])
    assert "child_acquisition must be one of" in _error(
        capsys, [*base, "--child-acquisition", "thompson", "--budget", "4"]
    )
    assert "is a directory" in _error(capsys, ["run", "--out", str(tmp_path)])
    _error(capsys, ["run", "--budget", "many"])  # argparse usage error
    assert not out.exists()
    assert "must be a child of both tasks" in _error(capsys, ["transfer", "--child", "b"])
    assert "--problems must be one of" in _error(capsys, ["reproduce", "--problems", "branin"])
    assert "--methods must be one of" in _error(capsys, ["reproduce", "--methods", "turbo"])
    assert "--seeds must be an integer" in _error(capsys, ["bench", "--quick", "--seeds", "0"])  # not ignored
    assert "--budget must be an integer" in _error(capsys, ["bench", "--quick", "--budget", "-1"])


def test_tiny_reproduce_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = [
        "reproduce",
        "--seeds",
        "2",
        "--budget",
        "4",
        "--problems",
        "additive2d",
        "--grid",
        "6",
        "--methods",
        "bif",
        "bottomup",
        "--out",
        str(out),
        "-q",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "child drop %" in text
    data = json.loads(out.read_text())
    block = data["problems"][0]
    assert block["problem"] == "additive2d" and len(block["runs"]["bif"]) == 2
    assert "child_r2_drop" in block["aggregate"] and "p_child_r2" in block["aggregate"]


@pytest.mark.parametrize("argv", [["--version"], ["run", "--problem", "nope"]])
def test_subprocess_smoke(argv):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "bif_hgp.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=120,
    )
    if argv == ["--version"]:
        assert done.returncode == 0 and done.stdout.startswith("bif-hgp ")
    else:
        assert done.returncode == 2 and done.stderr.startswith("error: --problem must be one of")
        assert "Traceback" not in done.stderr
