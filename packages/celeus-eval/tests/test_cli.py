"""The CLI: a labelling campaign reproduces `run` exactly; hostile input gives one line and exit 2."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from celeus_eval.cli import main
from celeus_eval.data import synthetic_pool


@pytest.fixture
def pool_csv(tmp_path):
    pool = synthetic_pool(1500, seed=3)
    path = tmp_path / "pool.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "judge", "proxy", "label"])
        for i in range(pool.size):
            writer.writerow([f"item-{i}", pool.surrogate[i], pool.proxy[i], pool.losses[i]])
    return path, pool


def _labels_file(path, ids, pool):
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "label"])
        for item in ids:
            writer.writerow([item, pool.losses[int(item.split("-")[1])]])


def test_campaign_reproduces_run_exactly(tmp_path, pool_csv, capsys):
    path, pool = pool_csv
    common = ["--alpha", "0.05", "--width", "0.1", "--seed", "7"]
    out = tmp_path / "run.json"
    assert (
        main(
            [
                "run",
                "--pool",
                str(path),
                "--surrogate-col",
                "judge",
                "--proxy-col",
                "proxy",
                *common,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    expected = json.loads(out.read_text())

    state = tmp_path / "state.json"
    assert (
        main(
            [
                "init",
                "--pool",
                str(path),
                "--surrogate-col",
                "judge",
                "--proxy-col",
                "proxy",
                "--state",
                str(state),
                *common,
            ]
        )
        == 0
    )
    capsys.readouterr()
    for round_ in range(200):
        assert main(["next", "--state", str(state), "-k", "25"]) == 0
        ids = capsys.readouterr().out.split()
        if not ids:
            break
        _labels_file(tmp_path / f"labels{round_}.csv", ids, pool)
        assert main(["update", "--state", str(state), "--labels", str(tmp_path / f"labels{round_}.csv")]) == 0
        capsys.readouterr()
    assert main(["status", "--state", str(state), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["reached"] and expected["reached"]
    for key in ("n_labels", "lower", "upper", "estimate"):
        assert status[key] == expected[key], key


def test_next_is_idempotent_and_labels_can_arrive_out_of_order(tmp_path, pool_csv, capsys):
    path, pool = pool_csv
    state = tmp_path / "s.json"
    main(["init", "--pool", str(path), "--surrogate-col", "judge", "--state", str(state), "--seed", "1"])
    capsys.readouterr()
    main(["next", "--state", str(state), "-k", "5"])
    first = capsys.readouterr().out.split()
    main(["next", "--state", str(state), "-k", "5"])
    assert capsys.readouterr().out.split() == first
    _labels_file(tmp_path / "l.csv", first[::-1][:2], pool)  # the last two drawn only
    assert main(["update", "--state", str(state), "--labels", str(tmp_path / "l.csv")]) == 0
    capsys.readouterr()
    main(["status", "--state", str(state), "--json"])
    status = json.loads(capsys.readouterr().out)
    assert status["n_labels"] == 0 and status["labels_received"] == 2 and status["pending"] == 3


def _run_error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error:") or err.startswith("usage:"), err
    assert "Traceback" not in err
    return err


def test_bad_inputs_exit_2_with_one_line(tmp_path, pool_csv, capsys):
    path, _ = pool_csv
    bad = tmp_path / "bad.csv"
    bad.write_text("id,judge\na,0.5\nb,nan\n")
    err = _run_error(
        capsys, ["init", "--pool", str(bad), "--surrogate-col", "judge", "--state", str(tmp_path / "x")]
    )
    assert "judge" in err and "row 3" in err and len(err.splitlines()) == 1
    bad.write_text("id,judge\na,0.5\nb,1.7\n")
    assert "outside" in _run_error(
        capsys, ["init", "--pool", str(bad), "--surrogate-col", "judge", "--state", str(tmp_path / "x")]
    )
    bad.write_text("id,judge\na,0.5\na,0.2\n")
    assert "duplicate id" in _run_error(
        capsys, ["init", "--pool", str(bad), "--surrogate-col", "judge", "--state", str(tmp_path / "x")]
    )
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert "empty" in _run_error(
        capsys, ["init", "--pool", str(empty), "--surrogate-col", "judge", "--state", str(tmp_path / "x")]
    )
    assert "no column" in _run_error(
        capsys, ["init", "--pool", str(path), "--surrogate-col", "nope", "--state", str(tmp_path / "x")]
    )
    for flag, value in (("--alpha", "0"), ("--alpha", "1.5"), ("--width", "-0.1"), ("--beta", "2")):
        err = _run_error(
            capsys,
            [
                "init",
                "--pool",
                str(path),
                "--surrogate-col",
                "judge",
                "--state",
                str(tmp_path / "x"),
                flag,
                value,
            ],
        )
        assert flag.strip("-").replace("width", "target_width") in err
    assert not (tmp_path / "x").exists()  # nothing half-written by any failed init


def test_bad_labels_and_corrupt_state_leave_the_state_untouched(tmp_path, pool_csv, capsys):
    path, pool = pool_csv
    state = tmp_path / "s.json"
    main(["init", "--pool", str(path), "--surrogate-col", "judge", "--state", str(state), "--seed", "2"])
    main(["next", "--state", str(state), "-k", "3"])
    ids = capsys.readouterr().out.split()[-3:]
    before = state.read_bytes()
    labels = tmp_path / "l.csv"
    unrequested = next(f"item-{i}" for i in range(pool.size) if f"item-{i}" not in ids)
    cases = {
        "not in the pool": f"id,label\n{ids[0]},1\nghost,0\n",
        "duplicate label": f"id,label\n{ids[0]},1\n{ids[0]},0\n",
        "outside": f"id,label\n{ids[0]},3\n",
        "not requested": f"id,label\n{unrequested},1\n",
        "not a number": f"id,label\n{ids[0]},yes\n",
    }
    for match, text in cases.items():
        labels.write_text(text)
        assert match in _run_error(capsys, ["update", "--state", str(state), "--labels", str(labels)])
        assert state.read_bytes() == before, match
    labels.write_text(f"id,label\n{ids[0]},1\n")
    assert main(["update", "--state", str(state), "--labels", str(labels)]) == 0
    assert "already has a label" in _run_error(
        capsys, ["update", "--state", str(state), "--labels", str(labels)]
    )
    # corruption: truncated file, edited file, a file of another kind
    good = state.read_text()
    state.write_text(good[: len(good) // 2])
    assert "corrupted" in _run_error(capsys, ["status", "--state", str(state)])
    data = json.loads(good)
    data["labels"][ids[0]] = 0.0
    state.write_text(json.dumps(data))
    assert "checksum" in _run_error(capsys, ["status", "--state", str(state)])
    state.write_text("[1, 2]")
    assert "not a celeus-eval campaign" in _run_error(capsys, ["status", "--state", str(state)])
    assert "does not exist" in _run_error(capsys, ["status", "--state", str(tmp_path / "missing.json")])
    # init refuses to clobber an existing state without --force
    assert "already exists" in _run_error(
        capsys, ["init", "--pool", str(path), "--surrogate-col", "judge", "--state", str(state)]
    )


def test_run_from_npy_files_and_bad_npy(tmp_path, capsys):
    pool = synthetic_pool(800, seed=1)
    np.save(tmp_path / "y.npy", pool.losses)
    np.save(tmp_path / "s.npy", pool.surrogate)
    assert (
        main(
            [
                "run",
                "--losses",
                str(tmp_path / "y.npy"),
                "--surrogate",
                str(tmp_path / "s.npy"),
                "--width",
                "0.2",
            ]
        )
        == 0
    )
    assert "interval" in capsys.readouterr().out
    np.save(tmp_path / "short.npy", pool.surrogate[:10])
    assert "800" in _run_error(
        capsys, ["run", "--losses", str(tmp_path / "y.npy"), "--surrogate", str(tmp_path / "short.npy")]
    )
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    assert "cannot read" in _run_error(
        capsys, ["run", "--losses", str(tmp_path / "junk.npy"), "--surrogate", str(tmp_path / "s.npy")]
    )
    assert "either --pool" in _run_error(capsys, ["run"])


def test_version_help_and_subprocess_smoke():
    assert main(["--version"]) == 0
    assert main(["--help"]) == 0
    proc = subprocess.run(
        [sys.executable, "-m", "celeus_eval.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "celeus" in proc.stdout and "uniform betting CS" in proc.stdout


def test_reproduce_quick(tmp_path, capsys):
    out = tmp_path / "rep.json"
    assert main(["reproduce", "--quick", "--reps", "1", "--out", str(out), "--quiet"]) == 0
    rows = json.loads(out.read_text())["rows"]
    methods = {r["method"] for r in rows}
    assert {
        "celeus",
        "uniform-betting",
        "cer-eval",
        "clt-peeking",
        "M2-fixed-bounds",
        "M3-no-surrogate",
    } <= methods
