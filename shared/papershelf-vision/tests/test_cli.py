import json
import os
import subprocess
import sys

import pytest
from papershelf_vision.cli import main


def test_info_lists_presets_with_feature_shapes(capsys):
    assert main(["info"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    vit = next(r for r in rows if r.get("preset") == "vit-tiny")
    assert vit["features"][0] == [65, 192] and vit["embed_dim"] == 192
    shipped = {r["checkpoint"]: r for r in rows if "checkpoint" in r}
    resnet = shipped["resnet-s"]  # 1000 dense fine-tuning steps on top of the 2000-step InfoNCE run
    assert resnet["method"] == "simclr-infonce-dense-rerender" and resnet["step"] == 1000
    assert shipped["vit-tiny"]["method"] == "distill-resnet-s-rerender"
    ssl = shipped["vit-tiny-ssl"]  # the second, 1500-step cosine cycle of its own InfoNCE run
    assert ssl["method"] == "simclr-infonce-rerender" and ssl["step"] == 1500
    assert ssl["eval"]["pretrained"]["heldout_knn"] > ssl["eval_random_init"]["random-init"]["heldout_knn"]


@pytest.mark.parametrize("kind", ["scene", "ir", "corruptions"])
def test_sample_writes_pngs(kind, tmp_path, capsys):
    assert main(["sample", kind, "--dir", str(tmp_path), "-n", "1", "--size", "32"]) == 0
    paths = capsys.readouterr().out.split()
    assert paths and all((tmp_path / p.split("/")[-1]).is_file() for p in paths)
    from PIL import Image

    png = next(p for p in paths if p.endswith(".png"))
    with Image.open(png) as im:
        assert im.size == (32, 32)


def test_bad_input_exits_2_with_one_line(capsys, tmp_path):
    assert main(["train", "--preset", "vit-huge", "--out", str(tmp_path)]) == 2
    assert "unknown preset 'vit-huge'; known presets: vit-tiny" in capsys.readouterr().err
    assert main(["eval", "no-such-checkpoint"]) == 2
    assert "shipped checkpoints:" in capsys.readouterr().err
    assert main(["eval", "vit-tiny", "--random", "--n-test", "3"]) == 2
    assert "--n-test must be an integer in [10, 1000000]" in capsys.readouterr().err
    assert main(["sample", "scene", "--dir", str(tmp_path), "-n", "0"]) == 2
    cfg = tmp_path / "c.json"
    cfg.write_text('{"stepz": 3}')
    assert main(["train", "--preset", "micro-vit", "--out", str(tmp_path / "r"), "--config", str(cfg)]) == 2
    assert "unknown field(s) ['stepz']" in capsys.readouterr().err


def test_version_subprocess():
    out = subprocess.run([sys.executable, "-m", "papershelf_vision.cli", "--version"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "papershelf-vision 0.0.1"


def test_eval_cli_on_a_model_folder_reports_pretrained_and_random_init(tmp_path, capsys):
    from papershelf_vision.models import build, save_model

    save_model(build("micro-resnet", seed=1), tmp_path / "m")
    out = tmp_path / "eval.json"
    sizes = ["-n", "20", "--n-test", "10", "--seg-train", "10", "--seg-test", "10"]
    argv = ["eval", str(tmp_path / "m"), *sizes]
    assert main([*argv, "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert set(rows["results"]) == {"pretrained", "random-init"}
    for res in rows["results"].values():
        assert set(res) == {"heldout_linear", "heldout_knn", "digits_linear", "digits_knn", "seg_miou"}
        assert all(0.0 <= v <= 1.0 for v in res.values())
    ref = rows["seg_reference"]  # micro-resnet at 16 px: stage 3 is a 4x4 grid
    assert 0 < ref["all_background"] < ref["true_token_labels"] < 1
    text = capsys.readouterr().out
    assert "random-init" in text and "seg_miou references at the 4x4 token grid" in text


def test_outputs_and_threads_are_refused_before_any_work(tmp_path, capsys):
    from papershelf_vision.models import build, save_model

    model = tmp_path / "m"
    save_model(build("micro-resnet"), model)
    before = (model / "config.json").read_bytes()
    small = ["--no-baseline", "-n", "10", "--n-test", "10", "--seg-train", "10", "--seg-test", "10"]
    assert main(["eval", str(model), *small, "--out", str(model / "config.json")]) == 2
    assert "inside the model folder" in capsys.readouterr().err
    assert (model / "config.json").read_bytes() == before
    assert main(["eval", str(model), *small, "--out", str(tmp_path)]) == 2  # a directory: refused up front
    assert main(["eval", str(model), *small, "--threads", "100000"]) == 2
    assert "--threads" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    for out in ("afile", "afile/run"):
        assert main(["train", "--preset", "micro-resnet", "--out", str(tmp_path / out)]) == 2
        assert "--out" in capsys.readouterr().err


def test_the_evaluate_name_is_always_the_module():
    """``papershelf_vision.evaluate`` is the submodule (a package-level function of the same name flipped
    between function and module depending on import order); the function is ``evaluate.evaluate``."""
    import papershelf_vision as pv
    from papershelf_vision import evaluate as E

    assert callable(E.evaluate) and pv.evaluate is E


def test_sample_refuses_bad_sizes_and_folders_without_leaving_one(tmp_path, capsys):
    out = tmp_path / "new"
    for argv, word in ((["scene", "--size", "0"], "--size"), (["sparse", "--size", "64"], "--size")):
        assert main(["sample", *argv, "--dir", str(out)]) == 2
        assert word in capsys.readouterr().err
    assert not out.exists()
    assert main(["sample", "scene", "--dir", ""]) == 2


def test_sample_refuses_dirs_that_cannot_be_written(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    for folder in ("/proc/x", "/proc/x/y", str(tmp_path / "afile"), str(tmp_path / "afile" / "sub")):
        assert main(["sample", "scene", "-n", "1", "--dir", folder]) == 2, folder
        err = capsys.readouterr().err
        assert err.startswith("error: --dir") and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize(
    ("preset", "patch", "word"),
    [
        ("micro-vit", {"dim": 0}, "dim"),
        ("micro-vit", {"heads": 0}, "heads"),
        ("micro-vit", {"mlp_ratio": -1}, "mlp_ratio"),
        ("micro-vit", {"depth": "x"}, "depth"),
        ("micro-resnet", {"widths": [0, 16, 16, 32]}, "widths[0]"),
        ("micro-resnet", {"blocks": [1, 1]}, "blocks"),
    ],
)
def test_eval_refuses_an_invalid_config_before_any_module(tmp_path, capsys, recwarn, preset, patch, word):
    from papershelf_vision.models import build, save_model

    save_model(build(preset), tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**cfg, **patch}))
    assert main(["eval", str(tmp_path / "m"), "--no-baseline", "-n", "10", "--n-test", "10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and word in err and len(err.strip().splitlines()) == 1, err
    assert not [w for w in recwarn if "zero-element" in str(w.message)]


def test_sample_seed_is_the_first_items_index_for_indexed_kinds(tmp_path):
    """`--seed S -n 1` writes item S of the `--seed 0 -n S+1` run (documented in --help)."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["sample", "digits", "--dir", str(a), "-n", "3", "--size", "16"]) == 0
    assert main(["sample", "digits", "--dir", str(b), "-n", "1", "--size", "16", "--seed", "2"]) == 0
    (third,) = sorted(b.glob("digit0_*.png"))
    (same,) = sorted(a.glob("digit2_*.png"))
    assert third.name.split("_")[1] == same.name.split("_")[1]
    assert third.read_bytes() == same.read_bytes()


@pytest.mark.parametrize(
    ("kind", "size", "high"), [("scene", 1025, 1024), ("photos", 428, 427), ("ir", 2049, 2048)]
)
def test_sample_size_above_the_generator_range_names_the_flag(tmp_path, capsys, kind, size, high):
    assert main(["sample", kind, "--dir", str(tmp_path / "s"), "-n", "1", "--size", str(size)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --size must be an integer in [{8 if kind != 'ir' else 16}, {high}], got {size}\n"
    assert not (tmp_path / "s").exists()


def test_eval_out_may_not_replace_a_shipped_checkpoints_weights_or_config(capsys, monkeypatch):
    from papershelf_vision import models
    from papershelf_vision.models import CHECKPOINTS

    def refuse(name):  # without the check, fail here: before minutes of evaluation and the overwrite
        raise AssertionError("the --out check must come before load")

    monkeypatch.setattr(models, "load", refuse)
    for file in ("config.json", "model.safetensors"):
        target = CHECKPOINTS / "vit-tiny" / file
        before = target.read_bytes()
        assert main(["eval", "vit-tiny", "--no-baseline", "--out", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --out") and "shipped checkpoint 'vit-tiny'" in err, err
        assert target.read_bytes() == before


def test_eval_out_may_not_replace_any_shipped_checkpoints_files_with_random_or_another_model(
    capsys, monkeypatch
):
    """`eval vit-tiny --random --out .../vit-tiny/config.json` replaced the shipped config (the guard
    skipped --random), and `eval resnet-s --out .../vit-tiny/...` another checkpoint's files."""
    from papershelf_vision import models
    from papershelf_vision.models import CHECKPOINTS

    def refuse(*args, **kwargs):  # without the check: minutes of evaluation, then the overwrite
        raise AssertionError("the --out check must come before any model is built or loaded")

    monkeypatch.setattr(models, "load", refuse)
    monkeypatch.setattr(models, "build", refuse)
    for argv, file in (
        (["vit-tiny", "--random"], "config.json"),
        (["resnet-s", "--random"], "model.safetensors"),
        (["resnet-s", "--no-baseline"], "config.json"),
    ):
        target = CHECKPOINTS / "vit-tiny" / file
        before = target.read_bytes()
        assert main(["eval", *argv, "--out", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --out") and "shipped checkpoint 'vit-tiny'" in err, err
        assert len(err.strip().splitlines()) == 1 and target.read_bytes() == before


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs a folder that takes no files")
def test_outputs_in_a_folder_that_takes_no_file_are_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """As root, `os.access` calls /proc writable: `eval --out /proc/x.json` failed only after the whole
    evaluation (naming no flag), `train --out /proc/run` was a FileNotFoundError traceback."""
    from papershelf_vision import models, train

    def refuse(*args, **kwargs):
        raise AssertionError("the --out check must come before any work")

    monkeypatch.setattr(models, "load", refuse)
    monkeypatch.setattr(train, "train", refuse)
    for argv in (
        ["eval", "vit-tiny", "--out", "/proc/papershelf-vision-x.json"],
        ["eval", "vit-tiny", "--out", "/proc/papershelf-vision-x/eval.json"],
        ["train", "--preset", "micro-vit", "--out", "/proc/papershelf-vision-run"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"error: --out {argv[-1]!r} cannot be written"), err
        assert len(err.strip().splitlines()) == 1, err
    assert not os.path.exists("/proc/papershelf-vision-run")
