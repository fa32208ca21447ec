"""The ``papershelf-vision`` command: train a preset, evaluate a checkpoint, write samples, list presets."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from papershelf.cli import App, arg, seed_value
from papershelf.errors import InputError, check_int
from papershelf.repro import check_output_path, check_outputs
from papershelf_vision import __version__
from papershelf_vision.presets import PRESETS

app = App(
    "papershelf-vision",
    __version__,
    "The papershelf vision testbed: procedural images with dense labels and small self-supervised backbones.",
)


def _check_threads(threads: int | None) -> int | None:
    """``--threads``: None (torch's default) or 1..the machine's CPU count (far more crashes torch)."""
    cpus = os.cpu_count() or 1
    if threads is not None and not 1 <= threads <= cpus:
        raise InputError(f"--threads must be in 1..{cpus} (this machine's CPUs), got {threads}")
    return threads


def _check_writable(path: Path, flag: str, shown: Path | None = None) -> None:
    """Refuse ``path`` when its nearest existing folder takes no file (``/proc``, ``/sys``, a read-only
    mount: ``os.access`` says yes there for root), before any work; creates and leaves nothing."""
    import tempfile

    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:
        with tempfile.TemporaryFile(dir=parent, prefix=".probe."):
            pass
    except OSError as exc:
        raise InputError(f"{flag} {str(shown or path)!r} cannot be written ({exc.strerror or exc})") from None


SAMPLE_KINDS = ("scene", "objects", "digits", "photos", "ir", "sparse", "corruptions")


@app.command(
    "train",
    help="train (or resume) a preset into a run folder: DINO-style multi-crop self-distillation, or SimCLR's "
    'InfoNCE with {"objective": "infonce"} in the --config file (as in configs/*-simclr.json; a per-token '
    'term with "dense_weight", configs/resnet-s-dense.json), or distillation from a frozen checkpoint with '
    '{"objective": "distill"} (configs/vit-tiny-distill.json); "init_from" starts from saved weights',
    args=[
        arg("--preset", required=True, help=f"one of {', '.join(PRESETS)}"),
        arg("--out", required=True, help="run folder (resumed when it holds a state.pt)"),
        arg("--config", default=None, help="JSON file of TrainConfig fields overriding the defaults"),
        arg("--max-minutes", type=float, default=None, help="stop (and checkpoint) after this long"),
        arg(
            "--threads", type=int, default=None, help="torch CPU threads (default: all; 1 on a busy machine)"
        ),
    ],
    common=["quiet"],
)
def _train(args: argparse.Namespace) -> None:
    from papershelf_vision.models import get_preset
    from papershelf_vision.train import config_from_file, train

    get_preset(args.preset)
    if args.max_minutes is not None and not args.max_minutes > 0:  # NaN too
        raise InputError(f"--max-minutes must be positive, got {args.max_minutes}")
    _check_threads(args.threads)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {args.out!r} is a file; give a run folder")
    check_output_path(out / "state.pt", "--out")  # a folder that can be made, under no file
    _check_writable(out / "state.pt", "--out", shown=out)
    config = config_from_file(args.preset, args.config)
    print(json.dumps(train(config, args.out, max_minutes=args.max_minutes, threads=args.threads,
                           quiet=args.quiet)))  # fmt: skip


@app.command(
    "eval",
    help="linear-probe / k-NN accuracy (held-out classes, digits) and token-probe mIoU, vs random init",
    args=[
        arg("model", help="a shipped checkpoint name (see info), a model folder, or a preset with --random"),
        arg("--random", action="store_true", help="MODEL names a preset: evaluate it at random init only"),
        arg("--no-baseline", action="store_true", help="skip the random-init baseline"),
        arg("-n", "--n-train", type=int, default=2000, help="held-out-class training images (default 2000)"),
        arg("--n-test", type=int, default=1000, help="held-out-class test images (default 1000)"),
        arg("--seg-train", type=int, default=200, help="scenes to fit the token probe (default 200)"),
        arg("--seg-test", type=int, default=100, help="scenes to score the token probe (default 100)"),
        arg("--threads", type=int, default=None, help="torch CPU threads"),
    ],
    common=["out", "seed"],
)
def _eval(args: argparse.Namespace) -> None:
    import torch

    from papershelf.repro import atomic_write_json
    from papershelf_vision.evaluate import default_seg_layer, evaluate, segmentation_reference
    from papershelf_vision.models import CHECKPOINTS, build, checkpoint_names, get_preset, load, n_params

    check_outputs({"--out": args.out})
    if args.out:
        _check_writable(Path(args.out), "--out")
    model_dir = Path(args.model)
    if args.out and not args.random and model_dir.is_dir():
        if model_dir.resolve() in Path(args.out).resolve().parents:
            raise InputError(
                f"--out {args.out!r} is inside the model folder {args.model!r}; write it elsewhere"
            )
    if args.out:  # eval.json beside a shipped checkpoint is fine, the files load reads are not (whatever
        for name in checkpoint_names():  # MODEL is: --random, or another checkpoint's files)
            shipped = CHECKPOINTS / name
            if Path(args.out).resolve() in {
                (shipped / f).resolve() for f in ("config.json", "model.safetensors")
            }:
                raise InputError(
                    f"--out {args.out!r} would replace a file of the shipped checkpoint {name!r}"
                )
    if _check_threads(args.threads) is not None:
        torch.set_num_threads(args.threads)
    for name in ("n_train", "n_test", "seg_train", "seg_test"):  # flags named, before any model is built
        check_int(f"--{name.replace('_', '-')}", getattr(args, name), low=10, high=1_000_000)
    if args.random:
        models = {"random-init": build(get_preset(args.model), seed=args.seed)}
    else:
        trained = load(args.model)
        models = {"pretrained": trained}
        if not args.no_baseline:
            models["random-init"] = build(trained.config, seed=args.seed)
    sizes = {
        "n_train": args.n_train,
        "n_test": args.n_test,
        "seg_train": args.seg_train,
        "seg_test": args.seg_test,
    }
    rows = {"model": str(args.model), "protocol": sizes, "random_init_seed": args.seed, "results": {}}
    for label, model in models.items():
        rows["results"][label] = evaluate(model, **sizes)
        rows["params"] = n_params(model)
    keys = ["heldout_linear", "heldout_knn", "digits_linear", "digits_knn", "seg_miou"]
    print(f"{'':<14}" + "".join(f"{k:>16}" for k in keys))
    for label, res in rows["results"].items():
        print(f"{label:<14}" + "".join(f"{res[k]:>16.3f}" for k in keys))
    model = next(iter(models.values()))
    size = model.config.image_size
    grid = model.grid(size, size)[default_seg_layer(model)]
    rows["seg_reference"] = ref = segmentation_reference(tuple(grid), args.seg_test, size)
    print(f"seg_miou references at the {grid[0]}x{grid[1]} token grid: all-background "
          f"{ref['all_background']:.3f}, true token labels {ref['true_token_labels']:.3f}")  # fmt: skip
    if args.out:
        atomic_write_json(args.out, rows)


@app.command(
    "sample",
    help="write a few generated images and their masks as PNG files",
    args=[
        arg("kind", choices=SAMPLE_KINDS),
        arg("--dir", required=True, help="output folder (created)"),
        arg(
            "-n", type=int, default=4, help="how many samples (default 4; corruptions: one scene, every kind)"
        ),
        arg("--size", type=int, default=None, help="image side in pixels (default per kind)"),
        arg(
            "--seed",
            type=seed_value,
            default=0,
            help="scene, ir, sparse and digits: the index of the first item (items seed .. seed+n-1, so "
            "each item is the same whatever n); objects, photos and corruptions: the generator's seed "
            "(default 0)",
        ),
    ],
)
def _sample(args: argparse.Namespace) -> None:
    from papershelf_vision.samples import write_samples

    if not 1 <= args.n <= 256:
        raise InputError(f"-n must be in 1..256, got {args.n}")
    for path in write_samples(args.kind, args.dir, args.n, args.seed, args.size):
        print(path)


@app.command(
    "ship",
    help="copy a run's best (or latest) exported backbone (the teacher; the student of infonce/distill "
    "runs) into the package as a named checkpoint",
    args=[
        arg("run", help="a run folder written by train"),
        arg("--name", required=True, help="checkpoint name, e.g. vit-tiny"),
        arg("--which", choices=("best", "model"), default="best", help="best probe (default) or latest"),
    ],
)
def _ship(args: argparse.Namespace) -> None:
    from papershelf_vision.train import ship

    print(f"shipped {args.run} as {args.name} in {ship(args.run, args.name, which=args.which)}")


@app.command("info", help="the presets (parameters, feature shapes), shipped checkpoints and their scores")
def _info(args: argparse.Namespace) -> None:
    from papershelf_vision.models import CHECKPOINTS, checkpoint_names, describe

    for name, config in PRESETS.items():
        print(json.dumps({"preset": name, **describe(config)}))
    for name in checkpoint_names():
        folder = CHECKPOINTS / name
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        entry = {"checkpoint": name, "megabytes": round(size / 2**20, 2)}
        if (folder / "config.json").is_file():  # how it was trained: objective and step
            exported = json.loads((folder / "config.json").read_text())
            entry.update({k: exported[k] for k in ("method", "step") if k in exported})
        for key, file in (("eval", "eval.json"), ("eval_random_init", "eval_random_init.json")):
            if (folder / file).is_file():
                entry[key] = json.loads((folder / file).read_text())["results"]
        print(json.dumps(entry))


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
