import json
import os
import random

import numpy as np
import pytest

from papershelf.device import resolve_backend, resolve_device, triton_mode
from papershelf.errors import InputError, check_choice, check_int, check_number
from papershelf.progress import progress
from papershelf.repro import atomic_path, atomic_write_json, run_manifest, seed_everything
from papershelf.testing import assert_close, assert_rate_above, assert_rate_at_most, rate_upper_bound


def test_atomic_json_leaves_no_partial_file_when_serialisation_fails(tmp_path):
    path = tmp_path / "out.json"
    path.write_text('{"old": true}')
    with pytest.raises(TypeError):
        atomic_write_json(path, {"ok": 1, "bad": object()})
    assert json.loads(path.read_text()) == {"old": True}
    assert os.listdir(tmp_path) == ["out.json"]  # no temp file left behind
    with pytest.raises(ValueError):
        atomic_write_json(tmp_path / "nan.json", {"x": float("nan")})
    assert not (tmp_path / "nan.json").exists()


def test_atomic_path_rolls_back_on_error_and_writes_numpy(tmp_path):
    path = tmp_path / "sub" / "f.txt"
    with pytest.raises(RuntimeError), atomic_path(path) as handle:
        handle.write("partial")
        raise RuntimeError("crash mid-write")
    assert not path.exists() and os.listdir(tmp_path / "sub") == []
    atomic_write_json(path, {"a": np.arange(3), "b": np.float64(1.5)})
    assert json.loads(path.read_text()) == {"a": [0, 1, 2], "b": 1.5}


def test_atomic_write_gives_normal_permissions(tmp_path):
    path = tmp_path / "f.json"
    atomic_write_json(path, [1])
    assert path.stat().st_mode & 0o777 == 0o666 & ~_current_umask()
    os.chmod(path, 0o640)
    atomic_write_json(path, [2])  # an existing file keeps its mode
    assert path.stat().st_mode & 0o777 == 0o640


def _current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_seed_and_manifest():
    seed_everything(3)
    a = (random.random(), np.random.rand())  # noqa: NPY002
    seed_everything(3)
    assert a == (random.random(), np.random.rand())  # noqa: NPY002
    manifest = run_manifest(note="x")
    assert manifest["note"] == "x" and manifest["python"] and "numpy" in manifest["libraries"]


def test_validators_name_the_argument():
    assert check_number("alpha", "0.5", low=0, high=1) == 0.5
    with pytest.raises(InputError, match=r"alpha must be in \(0, 1\), got 1"):
        check_number("alpha", 1, low=0, high=1, low_open=True, high_open=True)
    with pytest.raises(InputError, match="alpha must be finite"):
        check_number("alpha", float("nan"))
    with pytest.raises(InputError, match="must be a number"):
        check_number("alpha", "abc")
    with pytest.raises(InputError, match="must be a number"):
        check_number("alpha", True)
    assert check_int("k", np.int64(4), low=1) == 4
    assert check_int("k", 4.0) == 4
    with pytest.raises(InputError, match="k must be an integer"):
        check_int("k", 4.5)
    with pytest.raises(InputError, match=r"\[1, inf\]"):
        check_int("k", 0, low=1)
    with pytest.raises(InputError, match="single integer"):
        check_int("k", np.arange(3))
    with pytest.raises(InputError, match="mode must be one of a, b"):
        check_choice("mode", "c", ("a", "b"))


def test_device_resolution_on_this_machine():
    from papershelf.device import cuda_available

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in ("cpu", "cuda")
    with pytest.raises(InputError):
        resolve_device("tpu")
    if not cuda_available():
        with pytest.raises(InputError, match="cuda"):
            resolve_device("cuda")
    assert triton_mode() in ("cuda", "interpret", "none")
    assert resolve_backend("torch") == "torch"
    with pytest.raises(InputError):
        resolve_backend("magic")


def test_progress_is_silent_when_quiet(capsys):
    assert list(progress(range(3), quiet=True)) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_testing_helpers():
    assert_close(np.float32([1.0]), np.float64([1.0 + 1e-7]))
    with pytest.raises(AssertionError):
        assert_close(np.float64([1.0]), np.float64([1.0 + 1e-6]))
    assert rate_upper_bound(0.05, 100) == pytest.approx(0.05 + 3 * (0.05 * 0.95 / 100) ** 0.5)
    assert_rate_at_most(5, 100, 0.05)
    with pytest.raises(AssertionError):
        assert_rate_at_most(20, 100, 0.05)
    assert_rate_above(20, 100, 0.05)
    with pytest.raises(AssertionError):
        assert_rate_above(6, 100, 0.05)


def test_atomic_path_refuses_unwritable_outputs_with_an_input_error(tmp_path):
    from papershelf.errors import InputError

    with pytest.raises(InputError, match="is a directory"), atomic_path(tmp_path):
        raise AssertionError("the block must not run")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot write output path"), atomic_path(blocker / "out.json"):
        raise AssertionError("the block must not run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing half-written


def test_check_output_path_refuses_before_any_work(tmp_path):
    from papershelf.errors import InputError
    from papershelf.repro import check_output_path

    check_output_path(tmp_path / "new" / "deeper" / "r.json")  # a folder still to be made is fine
    check_output_path(None)
    with pytest.raises(InputError, match=r"--plot .* is a directory"):
        check_output_path(tmp_path, "--plot")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="cannot be written"):
        check_output_path(tmp_path / "file" / "r.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_check_outputs_refuses_clashes_with_each_other_and_with_inputs(tmp_path):
    from papershelf.errors import InputError
    from papershelf.repro import check_outputs

    a, b = tmp_path / "a.json", tmp_path / "b.png"
    check_outputs({"--out": a, "--plot": b, "--log": None}, {"--data": tmp_path / "x.npy"})
    with pytest.raises(InputError, match="--out and --plot name the same file"):
        check_outputs({"--out": a, "--plot": tmp_path / "." / "a.json"})
    with pytest.raises(InputError, match="--out would overwrite the input --data"):
        check_outputs({"--out": a}, {"--data": a})
    with pytest.raises(InputError, match=r"--plot .* is a directory"):
        check_outputs({"--out": a, "--plot": tmp_path})
    assert list(tmp_path.iterdir()) == []
