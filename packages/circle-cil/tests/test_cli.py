"""The CLI through main(argv), bad input (one line, exit 2), and a subprocess smoke test."""

import json
import subprocess
import sys

import numpy as np
from circle_cil.cli import main


def _error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(("error:", "usage:")), err
    assert ("Traceback" not in err and len(err.splitlines()) == 1) or err.startswith("usage:")
    return err


def test_run_on_digits_and_npz(tmp_path, capsys):
    out = tmp_path / "run.json"
    argv = [
        "run",
        "--dataset",
        "digits",
        "--tasks",
        "5",
        "--reservoirs",
        "2",
        "--groups",
        "2",
        "--units",
        "16",
    ]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    res = json.loads(out.read_text())
    assert res["n_tasks"] == 5 and len(res["accs"]) == 5 and res["final_acc"] > 0.8
    assert "final acc" in capsys.readouterr().out
    # a user's own data as .npz
    rng = np.random.default_rng(0)
    npz = tmp_path / "mine.npz"
    X = rng.random((40, 1, 8, 8)).astype(np.float32)
    y = np.repeat(np.arange(4), 10)
    X[y == 1] += 1.0
    np.savez(npz, X_train=X, y_train=y, X_test=X, y_test=y)
    assert (
        main(
            [
                "run",
                "--dataset",
                str(npz),
                "--tasks",
                "2",
                "--reservoirs",
                "1",
                "--groups",
                "1",
                "--units",
                "8",
            ]
        )
        == 0
    )


def test_make_data(tmp_path, capsys):
    f = tmp_path / "g.npz"
    assert (
        main(["make-data", "--dataset", "glyph", "--classes", "3", "--per-class", "3", "--to", str(f)]) == 0
    )
    z = np.load(f)
    assert z["X_train"].shape[1:] == (1, 32, 32) and len(z["y_test"]) == 3
    assert "wrote glyph-3" in capsys.readouterr().out


def test_bad_inputs_exit_2(tmp_path, capsys):
    assert "exceeds the 10 classes" in _error(capsys, ["run", "--dataset", "digits", "--tasks", "20"])
    assert "--groups" in _error(capsys, ["run", "--dataset", "digits", "--reservoirs", "2", "--groups", "3"])
    assert "--method" in _error(capsys, ["run", "--dataset", "digits", "--method", "EWC"])
    assert "--dataset" in _error(capsys, ["run", "--dataset", "cifar"])
    assert "--order-seed" in _error(capsys, ["run", "--dataset", "digits", "--order-seed", "-1"])
    assert "does not exist" in _error(capsys, ["run", "--dataset", str(tmp_path / "no.npz")])
    bad = tmp_path / "bad.npz"
    X = np.zeros((4, 1, 8, 8))
    X[0, 0, 0, 0] = np.nan
    np.savez(bad, X_train=X, y_train=np.arange(4), X_test=X, y_test=np.arange(4))
    assert "NaN" in _error(capsys, ["run", "--dataset", str(bad), "--tasks", "2"])
    np.savez(
        bad,
        X_train=np.zeros((4, 1, 8, 8)),
        y_train=np.array([0.5, 1, 2, 3]),
        X_test=np.zeros((4, 1, 8, 8)),
        y_test=np.arange(4),
    )
    assert "integer" in _error(capsys, ["run", "--dataset", str(bad), "--tasks", "2"])
    np.savez(bad, X_train=np.zeros((4, 1, 8, 8)))
    assert "lacks" in _error(capsys, ["run", "--dataset", str(bad)])
    out = tmp_path / "x.txt"
    assert ".npz" in _error(capsys, ["make-data", "--to", str(out)])
    assert not out.exists()
    assert ".png" in _error(capsys, ["reproduce", "--quick", "--plot", str(tmp_path / "p.pdf")])
    assert "units" in _error(capsys, ["run", "--dataset", "digits", "--units", "10", "--tasks", "2"])


def test_npz_test_classes_must_be_trained(tmp_path, capsys):
    # regression: a y_test class absent from y_train crashed with a RuntimeError traceback
    X = np.random.default_rng(0).random((8, 1, 8, 8))
    y = np.repeat(np.arange(4), 2)
    f = tmp_path / "unseen.npz"
    np.savez(f, X_train=X, y_train=y, X_test=X[:2], y_test=np.array([7, 7]))
    small = ["--tasks", "2", "--reservoirs", "1", "--groups", "1", "--units", "8"]
    err = _error(capsys, ["run", "--dataset", str(f), *small])
    assert "[7]" in err and "y_train" in err
    np.savez(f, X_train=X, y_train=y)
    err = _error(capsys, ["run", "--dataset", str(f)])
    assert "lacks array(s) X_test, y_test;" in err
    # test images of only some classes: tasks with nothing to score are skipped, not a crash
    np.savez(f, X_train=X, y_train=y, X_test=X[y == 0], y_test=y[y == 0])
    assert main(["run", "--dataset", str(f), *small[:1], "4", *small[2:], "--quiet"]) == 0
    assert main(["run", "--dataset", str(f), "--tasks", "4", "--method", "random-conv", "--quiet"]) == 0


def test_version_help_and_subprocess_smoke():
    assert main(["--version"]) == 0
    assert main(["--help"]) == 0
    proc = subprocess.run(
        [sys.executable, "-m", "circle_cil.cli", "make-data", "--dataset", "digits", "--to", "nowhere.txt"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: --to must end in .npz"), proc.stderr
