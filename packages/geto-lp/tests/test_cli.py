"""The CLI on .npy files: same answer as the API, atomic outputs, one-line errors with exit code 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from geto_lp import solve_barycenter
from geto_lp.cli import main
from geto_lp.data import smooth_histograms


@pytest.fixture
def inputs(tmp_path):
    A = smooth_histograms((6, 5), 3, seed=1)
    paths = []
    for m in range(3):
        path = tmp_path / f"h{m}.npy"
        np.save(path, A[:, m].reshape(6, 5))
        paths.append(str(path))
    return A, paths


def test_barycenter_writes_nu_plans_and_report(tmp_path, inputs, capsys):
    A, paths = inputs
    out, plans, report = tmp_path / "nu.npy", tmp_path / "plans", tmp_path / "r.json"
    argv = ["barycenter", "--inputs", *paths, "--weights", "1", "2", "1", "--out", str(out)]
    assert main([*argv, "--plans", str(plans), "--report", str(report)]) == 0
    text = capsys.readouterr().out
    assert "objective" in text and "variables" in text
    nu = np.load(out)
    expected = solve_barycenter(A, (6, 5), [0.25, 0.5, 0.25])
    assert nu.shape == (6, 5)
    np.testing.assert_allclose(nu.ravel(), expected.barycenter, atol=1e-9)
    rep = json.loads(report.read_text())
    assert rep["objective"] == pytest.approx(expected.objective, rel=1e-9)
    assert rep["n_variables"] == 3 * 30 * 11 + 30
    for m in range(3):
        plan = sp.load_npz(plans / f"plan_{m}.npz")
        np.testing.assert_allclose(np.asarray(plan.sum(axis=1)).ravel(), nu.ravel(), atol=1e-9)
        np.testing.assert_allclose(np.asarray(plan.sum(axis=0)).ravel(), A[:, m], atol=1e-9)


def _error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(("error:", "usage:")) and "Traceback" not in err
    assert len(err.splitlines()) == 1 or err.startswith("usage:")
    return err


def test_bad_inputs_exit_2_without_writing(tmp_path, inputs, capsys):
    A, paths = inputs
    out = tmp_path / "nu.npy"
    base = ["barycenter", "--out", str(out), "--inputs"]
    other = tmp_path / "other.npy"
    np.save(other, np.ones((5, 6)) / 30)
    assert "mismatched grid shapes" in _error(capsys, [*base, paths[0], str(other)])
    neg = tmp_path / "neg.npy"
    np.save(neg, -A[:, 0].reshape(6, 5))
    assert "negative" in _error(capsys, [*base, paths[0], str(neg)])
    nan = tmp_path / "nan.npy"
    np.save(nan, np.full((6, 5), np.nan))
    assert "NaN" in _error(capsys, [*base, paths[0], str(nan)])
    heavy = tmp_path / "heavy.npy"
    np.save(heavy, 3 * A[:, 1].reshape(6, 5))
    assert "unequal masses" in _error(capsys, [*base, paths[0], str(heavy)])
    zero = tmp_path / "zero.npy"
    np.save(zero, np.zeros((6, 5)))
    assert "zero total mass" in _error(capsys, [*base, paths[0], str(zero)])
    assert "no such file" in _error(capsys, [*base, paths[0], str(tmp_path / "missing.npy")])
    junk = tmp_path / "junk.npy"
    junk.write_text("not numpy")
    assert "no NumPy header" in _error(capsys, [*base, paths[0], str(junk)])
    assert "one entry per histogram" in _error(capsys, [*base, *paths, "--weights", "1", "1"])
    assert ">= 0" in _error(capsys, [*base, *paths, "--weights", "1", "-1", "1"])
    assert "GiB" in _error(capsys, [*base, *paths, "--max-memory-gb", "0.001"])
    _error(capsys, ["barycenter", "--inputs", *paths])  # --out is required
    assert not out.exists()
    assert main([*base, paths[0], str(heavy), "--normalize"]) == 0 and out.exists()


def test_bench_scale_flags_exclude_each_other(capsys):
    # together they used to run nothing and exit 0 with an empty table
    err = _error(capsys, ["bench", "--skip-scale", "--scale-only"])
    assert "exclude each other" in err


def test_palette_refuses_an_output_name_that_is_not_png(tmp_path, capsys):
    # the picture is written as PNG; "o.jpg" used to get PNG bytes under a JPEG name
    np.save(tmp_path / "a.npy", np.zeros((4, 4, 3)))
    err = _error(capsys, ["palette", "--images", str(tmp_path / "a.npy"), "--out", str(tmp_path / "o.jpg")])
    assert "--out must name a .png file" in err and not (tmp_path / "o.jpg").exists()


def test_palette_on_npy_images(tmp_path, capsys):
    pytest.importorskip("PIL")
    rng = np.random.default_rng(0)
    red = np.zeros((6, 8, 3))
    red[..., 0] = 0.1 + 0.05 * rng.random((6, 8))
    blue = np.zeros((5, 7, 3))
    blue[..., 2] = 0.9 - 0.05 * rng.random((5, 7))
    paths = []
    for name, img in (("red", red), ("blue", blue)):
        np.save(tmp_path / f"{name}.npy", img)
        paths.append(str(tmp_path / f"{name}.npy"))
    out, hist = tmp_path / "out.png", tmp_path / "nu.npy"
    assert (
        main(["palette", "--images", *paths, "--bins", "4", "--out", str(out), "--hist-out", str(hist)]) == 0
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    nu = np.load(hist)
    assert nu.shape == (4, 4, 4) and nu.sum() == pytest.approx(1.0)
    assert "variables" in capsys.readouterr().out
    np.save(tmp_path / "flat.npy", np.ones((5, 5)))
    assert "RGB" in _error(capsys, ["palette", "--images", str(tmp_path / "flat.npy"), "--out", str(out)])


def test_subprocess_smoke(tmp_path, inputs):
    _, paths = inputs
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    root = Path(__file__).resolve().parent.parent
    run = [sys.executable, "-m", "geto_lp.cli"]
    done = subprocess.run([*run, "--version"], capture_output=True, text=True, env=env, cwd=root, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("geto-lp ")
    out = tmp_path / "nu.npy"
    done = subprocess.run(
        [*run, "barycenter", "--inputs", *paths, "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert np.load(out).shape == (6, 5)
    bad = subprocess.run(
        [*run, "barycenter", "--inputs", paths[0], "--out", str(out), "--weights", "-1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr
