"""The CLI through main(argv), one subprocess smoke test, and one-line errors with exit code 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compact_attn.cli import main


def test_demo_prints_the_table(capsys):
    assert main(["demo", "--n", "1024"]) == 0
    out = capsys.readouterr().out
    for word in (
        "compact-antidiag",
        "compact-meanpool",
        "compact-tail",
        "quoka",
        "per-head",
        "dense",
        "recall",
    ):
        assert word in out


def test_bench_quick_writes_records(tmp_path, capsys, monkeypatch):
    import compact_attn.experiments as experiments

    built = []  # the selector options the timed methods were really built with
    real = experiments.methods_for
    monkeypatch.setattr(experiments, "methods_for", lambda *a, **kw: built.append(kw) or real(*a, **kw))
    out = tmp_path / "b.json"
    argv = [
        "bench",
        "--quick",
        "--no-per-head",
        "--rule",
        "mass",
        "--sink",
        "1",
        "--pool",
        "max",
        "--queries",
        "4",
    ]
    assert main([*argv, "--out", str(out)]) == 0
    recs = json.loads(out.read_text())
    names = {r["candidate"] for r in recs}
    assert {"compact-antidiag", "compact-meanpool", "compact-bound", "compact-tail", "quoka"} <= names
    assert all(r["baseline"].startswith("dense") for r in recs)
    assert "speedup" in capsys.readouterr().out
    assert [(b["rule"], b["sink"], b["pool"], b["queries"]) for b in built] == [("mass", 1, "max", 4)]
    settings = {tuple(r["setting"][k] for k in ("rule", "sink", "pool", "queries")) for r in recs}
    assert settings == {("mass", 1, "max", 4)}


def test_the_stride_rule_binds_the_antidiagonal_selector_only():
    import argparse

    from compact_attn.cli import _check_sel

    from papershelf.errors import InputError

    kw = dict(budget=0.25, block=3, stride=8, chunk=512, rule="max", pool="mean", alloc="head", sink=0,
              queries=8)  # fmt: skip
    _check_sel(argparse.Namespace(selector="meanpool", **kw))  # meanpool has no stride, no tail queries
    with pytest.raises(InputError, match="--stride"):
        _check_sel(argparse.Namespace(selector="antidiagonal", **kw))
    with pytest.raises(InputError, match="--queries"):
        _check_sel(argparse.Namespace(selector="tail", **kw))
    with pytest.raises(InputError, match="--stride"):  # bench / reproduce run every selector
        _check_sel(argparse.Namespace(**kw))


@pytest.mark.parametrize(
    "argv, word",
    [
        (["demo", "--n", "10"], "--n"),
        (["bench", "--quick", "--budget", "0"], "--budget"),
        (["bench", "--quick", "--block", "60"], "--stride"),
        (["bench", "--quick", "--threads", "0"], "--threads"),
        (["bench", "--quick", "--alloc", "global"], "--alloc"),
        (["eval", "--model", "/no/such/folder"], "--model"),
        (["bench", "--quick", "--n", "4096"], "--quick"),  # not silently run at the quick size
        (["bench", "--quick", "--accuracy"], "--accuracy"),
        (["eval", "--model", "/no/such/folder", "--decode", "sparse"], "--decode"),
        (["reproduce", "--task-protocol", "answer-only", "--lengths"], "--task-protocol"),
        (["reproduce", "--task-yarn", "0.5", "--lengths"], "--task-yarn"),
        (["eval", "--model", "/no/such/folder", "--selector", "oracle"], "--selector"),
        (["bench", "--quick", "--queries", "0"], "--queries"),
        (["bench", "--quick", "--queries", "65"], "--queries"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, word, capsys, tmp_path):
    out = tmp_path / "never.json"
    assert main([*argv, "--out", str(out)] if argv[0] == "bench" else argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and word in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_eval_needs_an_existing_prompt_file(tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path), "--prompt-file", str(tmp_path / "none.txt")]) == 2
    assert "--prompt-file" in capsys.readouterr().err


def test_subprocess_error_exit_code():
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": src}
    cmd = [sys.executable, "-m", "compact_attn.cli"]
    bad = subprocess.run([*cmd, "demo", "--n", "3"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --n")


def test_eval_refuses_a_corrupt_weights_file(tmp_path, capsys):
    pytest.importorskip("papershelf_lm")
    import shutil

    from papershelf_lm.model import CHECKPOINTS

    folder = tmp_path / "model"
    shutil.copytree(CHECKPOINTS / "tiny-s", folder)
    (folder / "model.safetensors").write_bytes(b"garbage")
    (tmp_path / "p.txt").write_text("hello")
    assert main(["eval", "--model", str(folder), "--prompt-file", str(tmp_path / "p.txt")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error:") and "not a loadable Hugging Face model" in err and len(err.splitlines()) == 1
    )
    # a config that does not belong to its weights: refused before from_pretrained builds 10^9 layers
    shutil.copy(CHECKPOINTS / "tiny-s" / "model.safetensors", folder / "model.safetensors")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 10**9}))
    assert main(["eval", "--model", str(folder), "--prompt-file", str(tmp_path / "p.txt")]) == 2
    err = capsys.readouterr().err
    assert "weights hold 4 layers" in err and len(err.splitlines()) == 1, err


def test_eval_takes_a_testbed_name(tmp_path, capsys):
    pytest.importorskip("papershelf_lm")
    pytest.importorskip("transformers")
    (tmp_path / "p.txt").write_text("def add(a, b):\n    return a + b\n" * 8)
    argv = ["eval", "--model", "tiny-s", "--prompt-file", str(tmp_path / "p.txt"), "--new-tokens", "2"]
    assert main(argv) == 0
    assert "KV fraction" in capsys.readouterr().out
    assert main(["eval", "--model", "tiny-q"]) == 2
    err = capsys.readouterr().err
    assert "'tiny-q' is not a folder" in err and "tiny-s" in err and len(err.splitlines()) == 1


def test_reproduce_plot_without_matplotlib_is_refused_before_the_run(monkeypatch, tmp_path, capsys):
    pytest.importorskip("papershelf_lm")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the [plots] extra were not installed
    argv = ["reproduce", "--lengths", "--task-lengths", "1024", "--tasks", "passkey", "--samples", "1"]
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    assert main([*argv, "--plot", str(plot), "--out", str(out)]) != 0
    captured = capsys.readouterr()
    assert "matplotlib" in captured.err and "passkey" not in captured.out  # nothing ran
    assert not out.exists() and not plot.exists()
