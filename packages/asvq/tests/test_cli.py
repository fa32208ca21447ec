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
    assert "no such file" in _error(capsys, [*base, str(tmp_path / "missing.npy")])
    np.save(tmp_path / "empty.npy", np.ones((0, 3)))
    assert "--codebook is empty" in _error(capsys, [*base, str(tmp_path / "empty.npy")])
    assert "--chunk-size" in _error(capsys, [*base, str(tmp_path / "c4.npy"), "--chunk-size", "0"])
    (tmp_path / "junk.npy").write_text("junk")
    assert "cannot read" in _error(capsys, [*base, str(tmp_path / "junk.npy")])
    (tmp_path / "zero.npy").write_bytes(b"")
    assert "cannot read" in _error(capsys, [*base, str(tmp_path / "zero.npy")])
    np.savez(tmp_path / "arch.npz", a=np.ones((5, 3)))
    assert ".npz archive" in _error(capsys, [*base, str(tmp_path / "arch.npz")])
    assert not out.exists()
    np.save(tmp_path / "c3.npy", np.ones((5, 3)))
    argv = ["search", "--vectors", str(tmp_path / "x.npy"), "--codebook", str(tmp_path / "c3.npy")]
    assert "is a directory" in _error(capsys, [*argv, "--out", str(tmp_path)])


def test_search_is_exact_far_from_the_origin_and_at_huge_scales(tmp_path, capsys):
    """float32 inputs whose ‖x‖² − 2x·c + ‖c‖² would cancel (+1000 shift) or overflow (1e20 scale)."""
    rng = np.random.default_rng(1)
    x, c = rng.normal(size=(300, 12)), rng.normal(size=(50, 12))
    for shift, scale in ((1000.0, 1.0), (0.0, 1e20)):
        xs, cs = ((x + shift) * scale).astype(np.float32), ((c + shift) * scale).astype(np.float32)
        np.save(tmp_path / "x.npy", xs)
        np.save(tmp_path / "c.npy", cs)
        out = tmp_path / "idx.npy"
        argv = ["search", "--vectors", str(tmp_path / "x.npy"), "--codebook", str(tmp_path / "c.npy")]
        assert main([*argv, "--out", str(out)]) == 0
        want = brute_force_nearest(xs.astype(np.float64), cs.astype(np.float64))
        assert (np.load(out) == want).mean() >= 0.99, (shift, scale)
    capsys.readouterr()


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
    assert "known quantizers: asvq, vq" in _error(capsys, ["train", "--quantizer", "lfq", "--steps", "2"])
    assert "--codebook-size" in _error(capsys, ["train", "--codebook-size", "1", "--steps", "2"])
    assert "--lr" in _error(capsys, ["train", "--lr", "-1", "--steps", "2"])
    assert "--batch-size" in _error(capsys, ["train", "--batch-size", "0", "--steps", "2"])
    _error(capsys, ["train", "--data", "cifar"])


def test_train_refuses_bad_outputs_before_training(tmp_path, capsys):
    argv = ["train", "--steps", "2", "--codebook-size", "8", "--save", str(tmp_path / "m.pt")]
    assert "--indices-out" in _error(capsys, [*argv, "--indices-out", str(tmp_path)])
    assert "name the same file" in _error(capsys, [*argv, "--out", str(tmp_path / "m.pt")])
    assert list(tmp_path.iterdir()) == []  # nothing written by the refused runs


def test_speech_without_espeak_says_how_to_install(capsys, monkeypatch):
    # hide espeak-ng (and espeak) from PATH lookups, so this runs whether or not it is installed
    monkeypatch.setattr(data.shutil, "which", lambda name: None)
    assert espeak_binary() is None
    err = _error(capsys, ["train", "--data", "speech", "--steps", "2"])
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


def test_outputs_are_checked_against_each_other_and_the_inputs_before_work(tmp_path, capsys):
    x, c = tmp_path / "x.npy", tmp_path / "c.npy"
    np.save(x, np.zeros((4, 2))), np.save(c, np.ones((3, 2)))
    assert _error(capsys, ["search", "--vectors", str(x), "--codebook", str(c), "--out", str(x)])
    assert np.load(x).shape == (4, 2)  # the input is untouched
    err = _error(capsys, ["reproduce", "--quick", "--plot", str(tmp_path / "p.png"), "--out", str(tmp_path)])
    assert "is a directory" in err and not (tmp_path / "p.png").exists()
    assert "--steps" in _error(capsys, ["train", "--steps", "1"])


def test_search_refuses_dtypes_and_shapes_it_cannot_score(tmp_path, capsys):
    c = tmp_path / "c.npy"
    np.save(c, np.ones((3, 2)))
    for name, arr, word in (("ld.npy", np.ones((4, 2), dtype=np.longdouble), "dtype"),
                            ("td.npy", np.ones((4, 2), dtype="timedelta64[s]"), "dtype"),
                            ("zero.npy", np.ones((4, 0)), "empty")):  # fmt: skip
        np.save(tmp_path / name, arr)
        argv = [
            "search",
            "--vectors",
            str(tmp_path / name),
            "--codebook",
            str(c),
            "--out",
            str(tmp_path / "i.npy"),
        ]
        assert word in _error(capsys, argv)
    assert "--scale" in _error(capsys, ["train", "--quantizer", "vq", "--scale", "scalar", "--steps", "2"])


def test_reproduce_without_espeak_skips_speech_with_install_hint(capsys, monkeypatch, tmp_path):
    """The reproduce path when espeak-ng is absent: the other experiments run, speech is recorded as
    skipped with the install command, exit 0. The trainings are stubbed so this takes well under a
    second; what is tested is the control flow around load_speech."""
    from asvq import experiments

    monkeypatch.setattr(data.shutil, "which", lambda name: None)
    trained = []

    def fake_compare(dataset, *args, **kwargs):
        trained.append(dataset)
        return []

    monkeypatch.setattr(experiments, "compare_quantizers", fake_compare)
    monkeypatch.setattr(experiments, "collapse_run", lambda *a, **k: {"utilization": 1.0, "perplexity": 1.0})
    tiny = (np.zeros((4, 12), np.float32), np.zeros((2, 12), np.float32))
    monkeypatch.setattr(experiments, "load_patches", lambda *a, **k: tiny)
    monkeypatch.setattr(experiments, "vqp_available", lambda: False)
    out = tmp_path / "rep.json"
    assert main(["reproduce", "--quick", "--quiet", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "speech: skipped: espeak-ng is not installed" in text and "apt-get install espeak-ng" in text
    assert trained == ["digits", "patches8", "patches16"]  # the image experiments still ran, speech not
    rep = json.loads(out.read_text())
    assert "apt-get install espeak-ng" in rep["speech"]["skipped"]
