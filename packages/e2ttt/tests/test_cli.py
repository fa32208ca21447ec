"""The CLI through main(argv), a subprocess smoke test, bad input at the command line."""

import json
import subprocess
import sys

import pytest
from e2ttt import __version__
from e2ttt.cli import main

from papershelf.errors import InputError


def test_bench_quick_writes_records(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["bench", "--quick", "--out", str(out)]) == 0
    recs = json.loads(out.read_text())
    assert {r["benchmark"] for r in recs} == {
        "chunk-update-vs-loop-quick",
        "chunk-update-vs-reference-quick",
        "layer-train-vs-chunkavg-quick",
    }
    assert all(r["ratio"] > 0 for r in recs)
    loop = next(r for r in recs if r["benchmark"] == "chunk-update-vs-loop-quick")
    # the bound is loop time over the factor stage alone (part of the loop's work, so > 1 in a real run;
    # one --quick repeat of a few ms is timing noise under load, so only the identity is asserted here)
    assert loop["bound_vs_loop"] == pytest.approx(loop["loop_ms"] / loop["factor_stage_ms"])
    assert loop["bound_vs_loop"] > 0 and loop["factor_stage_ms"] > 0
    assert "closed form" in capsys.readouterr().out


def test_train_and_reproduce_tiny(tmp_path, capsys):
    pytest.importorskip("papershelf_lm")
    # length 134 with 8 MQAR pairs leaves no filler, so the test never reads the testbed's corpus
    tiny = [
        "--d-model",
        "16",
        "--layers",
        "1",
        "--steps",
        "2",
        "--batch",
        "2",
        "--n-eval",
        "1",
        "--factor",
        "1",
        "--train-len",
        "134",
    ]
    assert main(["train", *tiny, "--tasks", "mqar", "--out", str(tmp_path / "m")]) == 0
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (
        cfg["rule"] == "e2ttt"
        and "mqar@134" in cfg["eval"]
        and (tmp_path / "m" / "model.safetensors").is_file()
    )
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "reproduce",
                *tiny,
                "--tasks",
                "mqar",
                "--rules",
                "e2ttt",
                "swa",
                "--seeds",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert set(res["result"]["summary"]) == {"e2ttt", "swa"} and len(res["targets"]) == 2
    assert "mqar@134" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--train-len", "16"],
        ["train", "--d-model", "10", "--heads", "3"],
        ["train", "--base-lr", "-1"],
        ["train", "--steps", "0"],
        ["reproduce", "--jobs", "0"],
        ["reproduce", "--seeds", "0", "-1"],
        ["bench", "--repeat", "0"],
        ["train", "--rule", "mamba"],
        ["train", "--tasks", "mqar", "--train-len", "32", "--chunk", "16"],  # too short for MQAR's 8 pairs
        ["train", "--tasks", "passkey-mini", "--train-len", "100000", "--factor", "8"],  # memory blow-up
        ["reproduce", "--tasks", "passkey-mini", "--train-len", "64", "--factor", "100000"],
        ["train", "--tasks", "passkey-mini", "--train-len", "64", "--chunk", "64"],  # memory never updated
    ],
)
def test_bad_input_exits_2(argv, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (err and err[-1].startswith(("error:", "usage:", "e2ttt"))) or "invalid choice" in err[-1]
    assert not (tmp_path / "x").exists()


def test_train_refuses_an_output_folder_under_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["train", "--steps", "1", "--out", str(tmp_path / "f" / "run")]) == 2
    assert "cannot be written" in capsys.readouterr().err


def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "buffered decoding" in out and "closed form" in out


def test_version_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "e2ttt.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"e2ttt {__version__}"


def test_far_questions_are_out_of_the_window():
    pytest.importorskip("papershelf_lm")
    from e2ttt.experiments import far_questions
    from papershelf_lm.tasks import mqar

    s = mqar(134, 3, pairs=8)  # 134 tokens with 8 pairs: no corpus filler
    far = far_questions(s, 12)
    assert far.shape == (s.n_questions,) and far.any() and not far.all()
    for k in range(s.n_questions):
        key_pos = int((s.question == k).nonzero()[0][0]) - 2
        assert s.ids[key_pos + 1] == s.ids[int((s.question == 0).nonzero()[0][0]) - 1]  # the <val> marker
        recent = s.ids[max(0, key_pos - 12) : key_pos]
        assert far[k] == (s.ids[key_pos] not in recent)
    assert far_questions(s, 1000).sum() == 0  # everything is "near" when the window covers the sequence


def test_passkey_mini_layout():
    pytest.importorskip("papershelf_lm")
    from e2ttt.data import passkey_mini, task_batch
    from papershelf_lm.tokenizer import KEY, QUERY

    for length, seed in ((64, 0), (512, 1), (9, 2)):
        s = passkey_mini(length, seed, digits=2)
        ids = s.ids
        assert ids.shape == (length,) and s.n_questions == 1
        key_at = int((ids == KEY).nonzero()[0][0])
        assert ids[-3] == QUERY and (s.question == 0).sum() == 2 and s.question[-2:].tolist() == [0, 0]
        assert ids[key_at + 1 : key_at + 3].tolist() == ids[-2:].tolist()
        assert all(ord("0") <= c <= ord("9") for c in ids[-2:])
    depths = {int((passkey_mini(128, s).ids == KEY).nonzero()[0][0]) for s in range(40)}
    assert len(depths) > 20  # the needle's depth is random
    ids, w = task_batch(("passkey-mini", "mqar"), 64, 4, 0)
    assert ids.shape == w.shape == (4, 64) and w[0].sum() == 1
    with pytest.raises(InputError, match="too short"):
        passkey_mini(6, 0, digits=2)


def test_bench_checks_out_before_running(tmp_path, capsys, monkeypatch):
    """A bad --out is refused before the benchmark runs (it used to fail only after the whole run)."""
    import e2ttt.experiments

    def boom(**kw):
        raise AssertionError("the benchmark ran before --out was checked")

    monkeypatch.setattr(e2ttt.experiments, "chunk_update_throughput", boom)
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f" / "b.json", tmp_path):
        assert main(["bench", "--quick", "--out", str(out)]) == 2
        assert capsys.readouterr().err.startswith("error: --out")


def test_reproduce_refuses_one_file_for_out_and_plot(tmp_path, capsys):
    """--out and --plot naming one file: the PNG used to overwrite the JSON after the run."""
    same = tmp_path / "r.json"
    assert main(["reproduce", "--steps", "1", "--out", str(same), "--plot", str(same)]) == 2
    assert "same file" in capsys.readouterr().err
    assert not same.exists()


def test_reproduce_runs_each_seed_once(tmp_path, monkeypatch):
    """--seeds 0 0 1 trains seeds 0 and 1 (a repeated seed would count one run twice in mean ± std)."""
    import e2ttt.experiments

    seen = {}

    def fake(rules, seeds, **kw):
        seen.update(rules=rules, seeds=seeds)
        raise InputError("stop")

    monkeypatch.setattr(e2ttt.experiments, "extrapolation", fake)
    argv = ["reproduce", "--tasks", "mqar", "--train-len", "134", "--factor", "1"]
    assert main([*argv, "--seeds", "0", "0", "1", "--rules", "swa", "e2ttt", "swa"]) == 2
    assert seen == {"rules": ("swa", "e2ttt"), "seeds": (0, 1)}


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--train-len", "100000", "--factor", "8"], "--factor 8 x --train-len 100000"),
        (["--train-len", "64", "--chunk", "64"], "--chunk 64 must be < --train-len 64"),
        (["--train-len", "64", "--chunk", "80", "--rule", "swa"], None),  # no memory: allowed
    ],
)
def test_lengths_are_checked_before_training(argv, match, capsys, monkeypatch):
    import e2ttt.experiments

    def stop(*a, **kw):
        raise InputError("training started")

    monkeypatch.setattr(e2ttt.experiments, "train", stop)
    assert main(["train", "--tasks", "passkey-mini", *argv]) == 2
    assert (match or "training started") in capsys.readouterr().err
