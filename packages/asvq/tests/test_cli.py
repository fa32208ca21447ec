"""The CLI: search on .npy files equals the brute force, train prints diagnostics, errors exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from asvq import data
from asvq.cli import main
from asvq.data import espeak_binary
from asvq.reference import brute_force_nearest


def _error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(("error:", "usage:")) and "Traceback" not in err
    return err


def test_search_writes_the_brute_force_indices(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x, c = rng.normal(size=(200, 5)), rng.normal(size=(33, 5))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "c.npy", c)
    out = tmp_path / "idx.npy"
    argv = ["search", "--vectors", str(tmp_path / "x.npy"), "--codebook", str(tmp_path / "c.npy")]
    assert main([*argv, "--out", str(out), "--chunk-size", "17"]) == 0
    np.testing.assert_array_equal(np.load(out), brute_force_nearest(x, c))
    assert "indices written" in capsys.readouterr().out


def test_search_bad_files_exit_2_without_output(tmp_path, capsys):
    out = tmp_path / "idx.npy"
    np.save(tmp_path / "x.npy", np.ones((4, 3)))
    np.save(tmp_path / "c4.npy", np.ones((5, 4)))
    nan = np.ones((5, 3))
    nan[1, 1] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    base = ["search", "--vectors", str(tmp_path / "x.npy"), "--out", str(out), "--codebook"]
    assert "dimension 3" in _error(capsys, [*base, str(tmp_path / "c4.npy")])
    assert "NaN" in _error(capsys, [*base, str(tmp_path / "nan.npy")])
    assert "does not exist" in _error(capsys, [*base, str(tmp_path / "missing.npy")])
    np.save(tmp_path / "empty.npy", np.ones((0, 3)))
    assert "--codebook is empty" in _error(capsys, [*base, str(tmp_path / "empty.npy")])
    assert "--chunk-size" in _error(capsys, [*base, str(tmp_path / "c4.npy"), "--chunk-size", "0"])
    (tmp_path / "junk.npy").write_text("junk")
    assert "not a readable" in _error(capsys, [*base, str(tmp_path / "junk.npy")])
    assert not out.exists()


def test_train_digits_prints_diagnostics_and_writes_json(tmp_path, capsys):
    out, idx = tmp_path / "r.json", tmp_path / "idx.npy"
    argv = ["train", "--data", "digits", "--quantizer", "asvq", "--codebook-size", "64", "--steps", "5"]
    assert main([*argv, "--quiet", "--out", str(out), "--indices-out", str(idx)]) == 0
    text = capsys.readouterr().out
    assert "utilisation (train)" in text and "perplexity" in text and "quantizer parameters 16" in text
    rep = json.loads(out.read_text())
    assert rep["quantizer"] == "asvq" and rep["codebook_size"] == 64 and len(rep["dead_codes"]) >= 1
    assert np.load(idx).shape == (297, 4)


def test_train_errors(capsys):
    assert "known quantizers: asvq, vq" in _error(capsys, ["train", "--quantizer", "lfq", "--steps", "1"])
    assert "--codebook-size" in _error(capsys, ["train", "--codebook-size", "1", "--steps", "1"])
    assert "--lr" in _error(capsys, ["train", "--lr", "-1", "--steps", "1"])
    assert "--batch-size" in _error(capsys, ["train", "--batch-size", "0", "--steps", "1"])
    _error(capsys, ["train", "--data", "cifar"])


def test_speech_without_espeak_says_how_to_install(capsys, monkeypatch):
    # hide espeak-ng (and espeak) from PATH lookups, so this runs whether or not it is installed
    monkeypatch.setattr(data.shutil, "which", lambda name: None)
    assert espeak_binary() is None
    err = _error(capsys, ["train", "--data", "speech", "--steps", "1"])
    assert "espeak-ng is not installed" in err and "apt-get install espeak-ng" in err
    assert len(err.splitlines()) == 1


def test_subprocess_smoke():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "asvq.cli", "--version"],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip().startswith("asvq ")
