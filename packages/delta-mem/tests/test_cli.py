import json
import subprocess
import sys

from delta_mem import __version__
from delta_mem.cli import main


def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "zero corrections" in out and "chunked" in out
    line = next(s for s in out.splitlines() if "decode logits" in s)
    assert float(line.split()[-1]) < 1e-4  # the C step (or, without a compiler, the twin) agrees


def test_bench_quick_writes_records(tmp_path, capsys):
    out, full = tmp_path / "b.json", tmp_path / "full.json"
    # a random tiny model recalls nothing: ratios over a zero baseline must still be finite, valid JSON
    # --window 64 is too short for a real run, but --quick replaces it with its own (it was refused)
    saved = tmp_path / "adapters"
    argv = ["bench", "--quick", "--window", "64", "--out", str(out), "--result", str(full)]
    assert main([*argv, "--save-adapters", str(saved)]) == 0
    ratios = json.loads(full.read_text())["result"]["ratios_per_seed"]
    assert all(isinstance(v, float) for values in ratios.values() for v in values)
    recs = json.loads(out.read_text())
    assert {r["benchmark"] for r in recs} >= {
        "recall-vs-frozen-quick",
        "recall-vs-bm25-quick",
        "in-window-ppl-quick",
    }
    assert all(r["package"] == "delta-mem" for r in recs)
    from delta_mem.experiments import random_llama
    from delta_mem.io import load_adapter

    assert [p.name for p in saved.iterdir()] == ["delta-mem-seed0.safetensors"]
    load_adapter(random_llama(0), saved / "delta-mem-seed0.safetensors")  # the quick run's backbone
    assert main(["bench", "--quick", "--save-adapters", str(out), "--out", str(tmp_path / "c.json")]) == 2
    assert "--save-adapters" in capsys.readouterr().err


def test_bad_input_exits_2(capsys, tmp_path):
    assert main(["train", "--model", "tiny-s"]) == 2  # no --out
    assert "--out" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "a"), "--granularity", "word"]) == 2
    assert "write_granularity" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "a"), "--rank", "0"]) == 2
    assert main(["train", "--out", str(tmp_path / "a"), "--lm-batch", "0"]) == 2
    assert "--lm-batch" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "a"), "--lm-loss", "mse"]) == 2
    assert "--lm-loss" in capsys.readouterr().err
    assert main(["eval", "--adapter", str(tmp_path / "none.safetensors")]) == 2
    assert "is not a file" in capsys.readouterr().err
    assert main(["bench", "--quick", "--model", "tiny-m", "--out", str(tmp_path / "b.json")]) == 2
    assert "--quick runs a random tiny model" in capsys.readouterr().err  # not silently ignored
    for flag in ("--n-eval", "--n-ppl", "--decode-steps"):  # checked under --quick too
        assert main(["bench", "--quick", flag, "0", "--out", str(tmp_path / "b.json")]) == 2
        assert flag in capsys.readouterr().err
    empty = tmp_path / "empty-model"
    empty.mkdir()
    assert main(["train", "--model", str(empty), "--out", str(tmp_path / "a.safetensors")]) == 2
    assert "not a loadable causal-LM folder" in capsys.readouterr().err
    (empty / "config.json").write_text('{"hidden_size": 8, "num_hidden_layers": 1000000000, "vocab_size": 8}')
    (empty / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")  # no tensors
    assert main(["train", "--model", str(empty), "--out", str(tmp_path / "a.safetensors")]) == 2
    assert "does not belong to these weights" in capsys.readouterr().err  # before building 10^9 layers
    assert main(["train", "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["empty-model"]


def test_version_subprocess():
    r = subprocess.run([sys.executable, "-m", "delta_mem.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"delta-mem {__version__}"


def test_outputs_never_overwrite_inputs(capsys, tmp_path):
    res = tmp_path / "res.json"
    res.write_text("{}")
    assert main(["bench", "--merge", str(res), "--out", str(res)]) == 2
    assert "would overwrite the input --merge" in capsys.readouterr().err
    assert (
        main(["bench", "--quick", "--out", str(tmp_path / "a.json"), "--result", str(tmp_path / "a.json")])
        == 2
    )
    assert "name the same file" in capsys.readouterr().err
    adapter = tmp_path / "ad.safetensors"
    adapter.write_bytes(b"x")
    assert main(["eval", "--model", "tiny-s", "--adapter", str(adapter), "--out", str(adapter)]) == 2
    assert "would overwrite the input --adapter" in capsys.readouterr().err
    assert res.read_text() == "{}" and adapter.read_bytes() == b"x"


def test_hostile_people_and_merge_files_are_one_error_line(capsys, tmp_path):
    assert main(["train", "--out", str(tmp_path / "a.safetensors"), "--people", "12"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --people") and err.count("\n") == 1
    for i, text in enumerate(('{"result": {"rows": []}}', '{"result": 5}', '{"result": {"rows": [{}]}}')):
        bad = tmp_path / f"r{i}.json"
        bad.write_text(text)
        assert main(["bench", "--merge", str(bad)]) == 2  # were KeyError / TypeError tracebacks
        err = capsys.readouterr().err
        assert err.startswith("error: --merge") and err.count("\n") == 1


def test_diagnose_is_seeded(capsys):
    import torch

    lines = []
    for global_seed in (1, 2):  # the memory used to be drawn from whatever the global RNG held
        torch.manual_seed(global_seed)
        argv = ["diagnose", "--model", "tiny-s", "--window", "96", "--people", "2", "--batch", "1"]
        assert main([*argv, "--after", "1", "--layers", "0"]) == 0
        lines.append([ln for ln in capsys.readouterr().out.splitlines() if "grad norm" in ln][:4])
    assert lines[0] == lines[1] and any(ln.split()[-1] != "0" for ln in lines[0])


def test_decode_only_times_a_random_backbone_at_a_named_shape(tmp_path, capsys, monkeypatch):
    """`bench --decode-only --model <shape>` builds a random-weight Llama of that shape (the real preset
    is Llama-3.2-1B's, 5 GB: too big for a test, so a tiny entry stands in for it)."""
    from delta_mem import experiments

    small = {**experiments.TIMING_SHAPES["llama-1b-shape"], "vocab_size": 300, "hidden_size": 32}
    small.update(intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    monkeypatch.setitem(experiments.TIMING_SHAPES, "tiny-shape", {**small, "head_dim": 8})
    out = tmp_path / "d.json"
    args = ["bench", "--decode-only", "--model", "tiny-shape", "--decode-steps", "2", "--out", str(out)]
    assert main(args) == 0
    (rec,) = json.loads(out.read_text())
    assert rec["benchmark"] == "decode-time-per-token-tiny-shape" and rec["baseline_value"] > 0
    assert "tiny-shape: decode per token backbone" in capsys.readouterr().out


def test_a_window_too_short_is_refused_before_any_work(tmp_path, capsys):
    # train: 64 tokens hold two people's facts but not the update line, so a run used to train until
    # its first dialogue with an update and die there, mid-run, without naming a flag
    out = tmp_path / "a.safetensors"
    assert main(["train", "--out", str(out), "--window", "64", "--people", "2", "--steps", "50"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --window 64 / --people 2: window 64 is too short") and err.count("\n") == 1
    # eval: BM25 retrieval does not fit a 64-token window; it used to fail after every other score
    adapter = tmp_path / "ad.safetensors"
    adapter.write_bytes(b"x")  # never read: the window is refused before any model is loaded
    argv = ["eval", "--adapter", str(adapter), "--window", "64", "--people", "1", "--update-prob", "0"]
    assert main([*argv, "--n", "2", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --window 64: window 64 is too short for BM25") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ad.safetensors"]


def test_reproduce_refuses_one_file_for_out_and_plot(tmp_path, capsys):
    """bench refused it; reproduce checked the two paths one by one and would write both to one file."""
    same = str(tmp_path / "r.json")
    assert main(["reproduce", "--out", same, "--plot", same]) == 2
    assert "name the same file" in capsys.readouterr().err
