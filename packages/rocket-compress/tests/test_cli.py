"""The CLI through main(argv), one subprocess smoke test, and bad input at the command line."""

import json
import subprocess
import sys

import pytest
from rocket_compress import __version__
from rocket_compress.cli import main

TEXT = "def f(x):\n    return x * 2 + 1  # a line of code\n" * 400


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    pytest.importorskip("papershelf_lm")
    from papershelf_lm.tokenizer import byte_tokenizer
    from rocket_compress.data import random_llama

    root = tmp_path_factory.mktemp("models")
    model = random_llama(hidden=32, layers=1, intermediate=48, vocab=263, seed=0)
    model.save_pretrained(root / "dense")
    byte_tokenizer().save_pretrained(root / "dense")
    (root / "text.txt").write_text(TEXT)
    return root


def test_compress_then_eval(folder, capsys):
    out = folder / "small"
    args = [
        "compress",
        "--model",
        str(folder / "dense"),
        "--ratio",
        "0.3",
        "--out",
        str(out),
        "--calib",
        str(folder / "text.txt"),
        "--calib-n",
        "4",
        "--calib-len",
        "64",
        "--ratios",
        "0.2",
        "0.4",
        "--ks",
        "1",
        "2",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "reduction 0.3" in printed and (out / "model.safetensors").is_file()
    report = json.loads((out / "rocket_report.json").read_text())
    assert report["params"] <= report["budget"]
    assert (
        main(
            [
                "eval",
                "--model",
                str(out),
                "--text",
                str(folder / "text.txt"),
                "--n",
                "2",
                "--length",
                "64",
                "--out",
                str(folder / "eval.json"),
            ]
        )
        == 0
    )
    assert json.loads((folder / "eval.json").read_text())["ppl"] > 1
    prof = ["profile", "--model", str(folder / "dense"), *args[7:], "--out", str(folder / "profile.json")]
    assert main(prof) == 0
    layers = json.loads((folder / "profile.json").read_text())["layers"]
    assert len(layers) == 7 and all(opt["params"] > 0 for lay in layers for opt in lay["options"])
    assert main(args) == 2  # the output folder now exists: refused, untouched
    assert "exists" in capsys.readouterr().err


def test_bad_input_exits_2_and_writes_nothing(folder, capsys, tmp_path):
    base = ["--calib", str(folder / "text.txt"), "--calib-n", "4", "--calib-len", "64"]
    cases = [
        ["compress", "--model", str(folder / "dense"), "--ratio", "1.5", "--out", str(tmp_path / "a"), *base],
        ["compress", "--model", str(folder / "dense"), "--ratio", "0", "--out", str(tmp_path / "a"), *base],
        [
            "compress",
            "--model",
            str(tmp_path / "nowhere"),
            "--ratio",
            "0.3",
            "--out",
            str(tmp_path / "a"),
            *base,
        ],
        [
            "compress",
            "--model",
            str(folder / "dense"),
            "--ratio",
            "0.3",
            "--out",
            str(tmp_path / "a"),
            "--calib",
            str(folder / "text.txt"),
            "--calib-n",
            "1",
            "--calib-len",
            "16",
        ],  # too few tokens
    ]
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), err
        assert not (tmp_path / "a").exists()
    notlm = tmp_path / "bert"
    notlm.mkdir()
    for cfg in ({"model_type": "bert", "architectures": ["BertForMaskedLM"]}, {"model_type": "vit"}):
        (notlm / "config.json").write_text(json.dumps(cfg))
        assert main(["eval", "--model", str(notlm), "--text", str(folder / "text.txt")]) == 2
        assert "not a causal LM" in capsys.readouterr().err
    for flag in ("--task-n", "--task-length"):  # checked even without --tasks (were silently accepted)
        assert main(["eval", "--model", str(folder / "dense"), flag, "-1"]) == 2
        assert flag in capsys.readouterr().err
    # a config.json that does not belong to its weights is refused before from_pretrained allocates it
    import shutil

    huge = tmp_path / "huge"
    shutil.copytree(folder / "dense", huge)
    cfg = json.loads((huge / "config.json").read_text())
    (huge / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 10**9}))
    assert main(["eval", "--model", str(huge), "--text", str(folder / "text.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "weights hold 1 layers" in err[0], err


def test_version_and_subprocess_smoke():
    proc = subprocess.run(
        [sys.executable, "-m", "rocket_compress.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"rocket-compress {__version__}"
