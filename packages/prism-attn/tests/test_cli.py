"""The CLI through main(argv), one subprocess smoke test, and one-line errors with exit code 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prism_attn.cli import main


def test_demo_prints_the_table(capsys):
    assert main(["demo", "--n", "1024"]) == 0
    out = capsys.readouterr().out
    for word in ("oracle", "prism", "static", "quest", "dense", "span recall"):
        assert word in out


def test_bench_quick_writes_records(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["bench", "--quick", "--repeat", "1", "--out", str(out)]) == 0
    recs = json.loads(out.read_text())
    assert (
        recs[0]["benchmark"].startswith("decode-stack")
        and recs[0]["baseline_bytes"] > recs[0]["candidate_bytes"]
    )
    assert "speedup" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, word",
    [
        (["demo", "--n", "10"], "--n"),
        (["bench", "--quick", "--kappa", "-1"], "--kappa"),
        (["bench", "--quick", "--radius", "-2"], "--radius"),
        (["bench", "--quick", "--threads", "0"], "--threads"),
        (["bench", "--quick", "--small-threads", "0"], "--small-threads"),
        (["bench", "--quick", "--min-blocks", "-1"], "--min-blocks"),
        (["bench", "--quick", "--global-dtype", "int8"], "--global-dtype"),
        (["bench", "--quick", "--global-min-pages", "-1"], "--global-min-pages"),
        (["bench", "--quick", "--max-candidates", "0.5"], "--max-candidates"),  # the flag, not the field
        (["bench", "--quick", "--anchor-layers", "-1"], "--anchor-layers"),
        (["bench", "--quick", "--kappa", "1.9"], "whole number of tokens"),
        (["bench", "--quick", "--layers", "0"], "--layers"),  # checked under --quick too
        (["bench", "--quick", "--lengths", "-1"], "--lengths"),
        (["eval", "--model", "/no/such/folder", "--prompt-file", "x.txt"], "--model"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, word, capsys, tmp_path):
    out = tmp_path / "never.json"
    assert main([*argv, "--out", str(out)] if argv[0] == "bench" else argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and word in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_eval_needs_a_prompt_file(tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path), "--prompt-file", str(tmp_path / "none.txt")]) == 2
    assert "--prompt-file" in capsys.readouterr().err
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00garbage\xc3")
    assert main(["eval", "--model", str(tmp_path), "--prompt-file", str(tmp_path / "bin.txt")]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_eval_refuses_a_prompt_past_the_models_positions(tmp_path, capsys):
    pytest.importorskip("papershelf_lm")
    from papershelf_lm.model import CHECKPOINTS
    from transformers import AutoConfig

    folder = CHECKPOINTS / "tiny-s"

    limit = AutoConfig.from_pretrained(folder, local_files_only=True).max_position_embeddings
    (tmp_path / "long.txt").write_text("a" * limit)
    assert (
        main(["eval", "--model", str(folder), "--prompt-file", str(tmp_path / "long.txt"), "--threads", "1"])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error:") and f"exceeds the model's {limit} positions" in err


def test_subprocess_error_exit_code():
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": src}
    cmd = [sys.executable, "-m", "prism_attn.cli"]
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


def _tiny_s_copy(tmp_path):
    pytest.importorskip("papershelf_lm")
    import shutil

    from papershelf_lm.model import CHECKPOINTS

    folder = tmp_path / "model"
    shutil.copytree(CHECKPOINTS / "tiny-s", folder)
    (tmp_path / "p.txt").write_text("hello")
    return folder


def test_eval_refuses_a_model_that_is_not_llama_family(tmp_path, capsys):
    folder = _tiny_s_copy(tmp_path)
    cfg = {"model_type": "bert", "vocab_size": 263, "hidden_size": 32, "num_hidden_layers": 1}
    (folder / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 2, "is_decoder": True}))
    assert main(["eval", "--model", str(folder), "--prompt-file", str(tmp_path / "p.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --model") and "'bert'" in err and len(err.strip().splitlines()) == 1, err


def test_eval_refuses_weights_missing_from_the_folder(tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    folder = _tiny_s_copy(tmp_path)
    state = load_file(folder / "model.safetensors")
    del state["model.layers.0.self_attn.q_proj.weight"]  # transformers would initialise it at random
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    assert main(["eval", "--model", str(folder), "--prompt-file", str(tmp_path / "p.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --model") and "q_proj" in err and len(err.strip().splitlines()) == 1, err


def test_eval_refuses_a_config_that_does_not_belong_to_its_weights(tmp_path, capsys):
    # from_pretrained would first build the 10^9-layer model the config describes
    folder = _tiny_s_copy(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 10**9}))
    assert main(["eval", "--model", str(folder), "--prompt-file", str(tmp_path / "p.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --model") and "weights hold 4 layers" in err and len(err.splitlines()) == 1


def test_eval_takes_a_testbed_name(tmp_path, capsys):
    pytest.importorskip("papershelf_lm")
    pytest.importorskip("transformers")
    (tmp_path / "p.txt").write_text("def add(a, b):\n    return a + b\n" * 8)
    argv = ["eval", "--model", "tiny-s", "--prompt-file", str(tmp_path / "p.txt"), "--new-tokens", "2"]
    assert main([*argv, "--threads", "1"]) == 0
    assert capsys.readouterr().out
    assert main(["eval", "--model", "tiny-q", "--prompt-file", str(tmp_path / "p.txt")]) == 2
    err = capsys.readouterr().err
    assert "'tiny-q' is not a folder" in err and "tiny-s" in err and len(err.splitlines()) == 1


def test_eval_calibrates_the_anchors_on_the_prompt_or_a_file(tmp_path, capsys):
    pytest.importorskip("papershelf_lm")
    pytest.importorskip("transformers")
    (tmp_path / "p.txt").write_text("def add(a, b):\n    return a + b\n" * 8)
    (tmp_path / "dev.txt").write_text("x = [i * i for i in range(10)]\n" * 12)
    argv = ["eval", "--model", "tiny-s", "--prompt-file", str(tmp_path / "p.txt"), "--new-tokens", "2"]
    argv += ["--threads", "1", "--calibrate-anchors", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "calibrated anchors (0, " in out and "on the prompt (256 tokens;" in out  # byte tokens
    assert main([*argv, "--calibration-file", str(tmp_path / "dev.txt")]) == 0
    # windows as long as the prompt (256 tokens), at most 4; a tail of <= 32 tokens is dropped
    assert f"on --calibration-file '{tmp_path / 'dev.txt'}' (256/116 tokens;" in capsys.readouterr().out
    for size, windows in ((256 + 20, "(256 tokens;"), (5 * 256, "(256/256/256/256 tokens;")):
        (tmp_path / "long.txt").write_text("ab\n" * (size // 3) + "x" * (size % 3))
        assert main([*argv, "--calibration-file", str(tmp_path / "long.txt")]) == 0
        assert windows in capsys.readouterr().out


def test_calibration_windows_start_with_the_tokenizers_prefix():
    torch = pytest.importorskip("torch")
    from prism_attn.cli import _calibration_windows

    class Tok:  # a tokenizer that puts a BOS (id 1) before a text, like Llama's
        def __call__(self, text, add_special_tokens=True, return_tensors=None):
            ids = ([1] if add_special_tokens else []) + [10 + ord(c) % 50 for c in text]
            return type("Enc", (), {"input_ids": torch.tensor([ids])})()

    windows = _calibration_windows(Tok(), "x" * 200, width=80, where="the prompt")
    assert [w.shape[1] for w in windows] == [80, 80, 43]  # 79 + 79 + 42 text tokens, each after a BOS
    assert all(int(w[0, 0]) == 1 and (w[0, 1:] != 1).all() for w in windows)
    from papershelf.errors import InputError

    with pytest.raises(InputError, match="as long as the prompt"):
        _calibration_windows(Tok(), "x" * 200, width=30, where="the prompt")


@pytest.mark.parametrize(
    "extra, word",
    [
        (["--calibration-file", "dev.txt"], "give both"),
        (["--calibrate-anchors", "0"], "--calibrate-anchors"),
        (["--calibrate-anchors", "2", "--method", "quest"], "--method prism or static"),
        (["--calibrate-anchors", "2", "--anchor-layers", "0", "2"], "drop --anchor-layers"),
        (["--calibrate-anchors", "2", "--anchor-every", "2"], "drop --anchor-every"),
        (["--calibrate-anchors", "2", "--calibration-file", "missing.txt"], "--calibration-file"),
        (["--calibrate-anchors", "2", "--calibration-file", "short.txt"], "has 5 tokens"),
        (["--calibrate-anchors", "5"], "--calibrate-anchors must be"),  # tiny-s has 4 layers
    ],
)
def test_eval_calibration_errors_exit_2_with_one_line(extra, word, tmp_path, capsys, monkeypatch):
    pytest.importorskip("papershelf_lm")
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.txt").write_text("def add(a, b):\n    return a + b\n" * 8)
    (tmp_path / "dev.txt").write_text("x = 1\n" * 20)
    (tmp_path / "short.txt").write_text("x = 1")
    argv = ["eval", "--model", "tiny-s", "--prompt-file", "p.txt", "--new-tokens", "1", "--threads", "1"]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and word in err and len(err.splitlines()) == 1, err


def test_reproduce_refuses_kappa_without_needing_the_testbed(capsys):
    # reproduce sweeps its own budgets: a --kappa would be silently ignored, so it is refused up front
    assert main(["reproduce", "--kappa", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "drop --kappa" in err and len(err.splitlines()) == 1, err


def test_reproduce_checks_its_arguments_before_any_work(tmp_path, capsys):
    pytest.importorskip("papershelf_lm")
    same = str(tmp_path / "r.json")
    small = ["--loss-lengths", "256", "--niah-lengths", "256", "--samples", "1"]
    cases = [
        # small sizes: without the check this ran the whole experiment, then wrote the plot over itself
        (["--out", same, "--plot", same, *small], "--out and --plot name the same file"),
        (["--loss-lengths", "100"], "--loss-lengths"),
        (["--niah-lengths", "99999"], "--niah-lengths"),
        (["--radius", "-1"], "--radius"),
        (["--model", "no-such-model"], "--model"),
        (["--yarn", "0.5"], "--yarn"),
        (["--calibrate-anchors", "0"], "--calibrate-anchors"),
        (["--calibrate-anchors", "2", "--anchor-layers", "0", "4"], "drop --anchor-layers"),
    ]
    for extra, words in cases:
        assert main(["reproduce", *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and words in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.iterdir())
