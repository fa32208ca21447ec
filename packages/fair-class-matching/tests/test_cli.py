"""The CLI through main(argv), its bad-input handling (one line, exit 2), and a subprocess smoke test."""

import json
import subprocess
import sys

from fair_class_matching.cli import main


def _error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(("error:", "usage:")), err
    assert "Traceback" not in err
    return err


def test_generate_run_and_out(tmp_path, capsys):
    inst = tmp_path / "inst.json"
    assert (
        main(["generate", "--family", "upper-triangular", "--n", "40", "--classes", "2", "--out", str(inst)])
        == 0
    )
    capsys.readouterr()
    out = tmp_path / "result.json"
    assert main(["run", "--instance", str(inst), "--gamma", "0.5", "--out", str(out), "--check-lp"]) == 0
    text = capsys.readouterr().out
    assert "CEF" in text and "non-wasteful   yes" in text and "OPT 40" in text
    res = json.loads(out.read_text())
    assert res["opt"] == 40 and res["non_wasteful"] and len(res["assignments"]) == 40
    assert res["cef"] >= 0.3934 and res["usw_ratio"] >= 0.5956
    assert abs(sum(x for item in res["assignments"] for _, x in item) - res["usw"]) < 1e-9
    npz = tmp_path / "inst.npz"
    assert main(["generate", "--family", "gnp", "--n", "30", "--classes", "3", "--out", str(npz)]) == 0
    for algo in ("threshold-indivisible", "water-filling", "equal-filling", "ranking", "greedy"):
        assert main(["run", "--instance", str(npz), "--algorithm", algo, "--gamma", "1"]) == 0
    assert "algorithm      ranking" in capsys.readouterr().out


def test_sweep_and_bounds(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert (
        main(
            [
                "sweep",
                "--family",
                "block",
                "--n",
                "20",
                "--instances",
                "2",
                "--gammas",
                "0,1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert [r["gamma"] for r in rows] == [0.0, 1.0]
    assert all(r["min_usw_ratio"] >= r["usw_bound"] - 1e-6 for r in rows)
    assert main(["bounds", "--gammas", "0.5"]) == 0
    assert "0.3935" in capsys.readouterr().out
    # the normalised phase-1 rule breaks the CEF bound on this instance; the default rule does not
    assert (
        main(
            [
                "sweep",
                "--family",
                "gnp",
                "--n",
                "17",
                "--seed",
                "25",
                "--gammas",
                "0.5",
                "--phase1",
                "normalized",
            ]
        )
        == 0
    )
    assert "0.1736" in capsys.readouterr().out
    assert main(["sweep", "--family", "gnp", "--n", "17", "--seed", "25", "--gammas", "0.5"]) == 0
    assert "0.8000" in capsys.readouterr().out


def test_bad_inputs_exit_2(tmp_path, capsys):
    inst = tmp_path / "inst.json"
    main(["generate", "--n", "10", "--out", str(inst)])
    capsys.readouterr()
    assert "gamma must be in [0, 1]" in _error(capsys, ["run", "--instance", str(inst), "--gamma", "1.5"])
    assert "gamma" in _error(capsys, ["sweep", "--gammas", "0,-1"])
    assert "comma-separated" in _error(capsys, ["sweep", "--gammas", "a,b"])
    assert "upper-triangular only" in _error(capsys, ["sweep", "--family", "gnp", "--partition", "blocks"])
    assert "algorithm" in _error(capsys, ["run", "--instance", str(inst), "--algorithm", "magic"])
    cases = {
        "unknown agent 7": {"agent_class": [0, 1], "items": [[0, 7]]},
        "positive": {"agent_class": [0, 1], "items": [[0], [1]], "values": [1, -1]},
        "no agents": {"agent_class": [0, 2], "items": [[0]]},
        "lacks 'items'": {"agent_class": [0, 1]},
    }
    bad = tmp_path / "bad.json"
    for match, data in cases.items():
        bad.write_text(json.dumps(data))
        err = _error(capsys, ["run", "--instance", str(bad)])
        assert match in err and len(err.splitlines()) == 1, err
    bad.write_text('{"agent_class": [0, 1], "items": [[0]')
    assert "not valid JSON" in _error(capsys, ["run", "--instance", str(bad)])
    assert "does not exist" in _error(capsys, ["run", "--instance", str(tmp_path / "nope.json")])
    out = tmp_path / "x.csv"
    assert ".json or .npz" in _error(capsys, ["generate", "--out", str(out)])
    assert not out.exists()
    assert "--n" in _error(capsys, ["generate", "--n", "1", "--out", str(tmp_path / "y.json")])
    assert "required: --instance" in _error(capsys, ["run"])
    assert ".png" in _error(capsys, ["reproduce", "--quick", "--plot", str(tmp_path / "p.pdf")])


def test_reproduce_quick_writes_json_and_plot(tmp_path, capsys):
    out, plot = tmp_path / "rep.json", tmp_path / "rep.png"
    assert main(["reproduce", "--quick", "--out", str(out), "--plot", str(plot), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert all(r["cef_violations"] == 0 and r["usw_violations"] == 0 for r in data["divisible"]["rows"])
    assert data["divisible"]["non_wasteful_every_arrival"]
    assert len(data["indivisible"]) == 5 and "ef-trap(n=40)" in data["comparisons"]
    text = capsys.readouterr()
    assert plot.exists() or "matplotlib is not installed" in text.err


def test_version_help_and_subprocess_smoke():
    assert main(["--version"]) == 0
    assert main(["--help"]) == 0
    proc = subprocess.run(
        [sys.executable, "-m", "fair_class_matching.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "threshold(γ=0.5)" in proc.stdout and "equal-filling" in proc.stdout
