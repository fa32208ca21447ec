"""The ``papershelf-lm`` command: train a preset, evaluate a run, print task samples, list presets."""

from __future__ import annotations

import argparse
import json
import sys

from papershelf.cli import App, arg
from papershelf.errors import InputError
from papershelf_lm import __version__
from papershelf_lm.model import PRESETS, preset_summary
from papershelf_lm.tasks import TASKS, generate
from papershelf_lm.tokenizer import decode_bytes

app = App(
    "papershelf-lm", __version__, "The papershelf LM testbed: tiny Llama models and long-context tasks."
)


@app.command(
    "train",
    help="train (or resume) a preset into a run folder",
    args=[
        arg("--preset", required=True, help=f"one of {', '.join(PRESETS)}"),
        arg("--out", required=True, help="run folder (resumed when it holds a state)"),
        arg("--config", default=None, help="JSON file of TrainConfig fields overriding the defaults"),
        arg("--max-minutes", type=float, default=None, help="stop after this long (resume later)"),
        arg("--threads", type=int, default=None, help="CPU threads (default: all; 1 on a busy machine)"),
    ],
    common=["quiet"],
)
def _train(args: argparse.Namespace) -> None:
    from papershelf_lm.model import get_preset
    from papershelf_lm.train import TrainConfig, train

    get_preset(args.preset)
    overrides = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as handle:
                overrides = json.load(handle)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"--config: {exc}") from None
    if not isinstance(overrides, dict):
        kind = type(overrides).__name__
        raise InputError(f"--config must hold a JSON object of TrainConfig fields, got {kind}")
    try:
        config = TrainConfig(preset=args.preset, **overrides)
    except TypeError as exc:
        raise InputError(f"--config: {exc}") from None
    print(
        json.dumps(
            train(config, args.out, max_minutes=args.max_minutes, threads=args.threads, quiet=args.quiet)
        )
    )


@app.command(
    "eval",
    help="task accuracy by length and validation bits per byte of a model folder",
    args=[
        arg("model", help="a shipped checkpoint name (see info) or a model folder written by train"),
        arg("--tasks", nargs="+", default=list(TASKS), choices=TASKS),
        arg("--lengths", nargs="+", type=int, default=[256, 512, 1024]),
        arg("-n", type=int, default=20, help="samples per task and length"),
        arg(
            "--yarn",
            type=float,
            default=None,
            metavar="F",
            help="stretch RoPE to F x the trained context with YaRN, no training (extend_context)",
        ),
    ],
    common=["out"],
)
def _eval(args: argparse.Namespace) -> None:
    from papershelf.errors import check_number
    from papershelf.repro import atomic_write_json
    from papershelf_lm.corpus import corpus_id
    from papershelf_lm.evaluate import bits_per_byte, task_accuracy
    from papershelf_lm.model import extend_context, load

    if args.n < 1:
        raise InputError(f"-n must be at least 1, got {args.n}")
    if min(args.lengths) < 16:
        raise InputError(f"--lengths must be at least 16 tokens, got {min(args.lengths)}")
    if args.yarn is not None:
        check_number("--yarn", args.yarn, low=1)
    model, _ = load(args.model)
    trained = model.config.max_position_embeddings
    if args.yarn is not None:
        extend_context(model, args.yarn)
    context = model.config.max_position_embeddings
    if max(args.lengths) > 8 * context:  # checked before any work, so nothing is half-done
        raise InputError(f"--lengths: {max(args.lengths)} is far beyond the model's context of {context}")
    rows = {"model": args.model, "corpus": corpus_id(), "n": args.n, "yarn": args.yarn,
            "bits_per_byte": bits_per_byte(model), "accuracy": {}}  # fmt: skip
    print(f"validation bits per byte: {rows['bits_per_byte']:.3f}")
    rows["longest_length_at_80"] = {}
    for task in args.tasks:
        for length in sorted(args.lengths):
            acc = task_accuracy(model, task, length, n=args.n)
            rows["accuracy"][f"{task}@{length}"] = acc
            how = f"YaRN x{args.yarn:g}" if args.yarn and args.yarn > 1 else "RoPE extrapolation"
            beyond = f"  (beyond the trained context: {how})" if length > trained else ""
            print(f"{task:<10}{length:>7}{acc:>8.3f}{beyond}")
        # the longest evaluated length up to which every evaluated length retrieves >= 80%
        failing = [n for n in sorted(args.lengths) if rows["accuracy"][f"{task}@{n}"] < 0.8]
        ok = [n for n in sorted(args.lengths) if not failing or n < failing[0]]
        rows["longest_length_at_80"][task] = ok[-1] if ok else None
        print(f"{task:<10} longest length with >= 80%: {ok[-1] if ok else 'none'}")
    if args.out:
        atomic_write_json(args.out, rows)


@app.command(
    "ship",
    help="copy a finished run's model into the package as a named checkpoint, with its loss summary",
    args=[
        arg("run", help="a run folder whose training finished (it holds model.safetensors)"),
        arg("--name", required=True, help="checkpoint name, e.g. tiny-s"),
    ],
)
def _ship(args: argparse.Namespace) -> None:
    from papershelf_lm.model import ship

    folder = ship(args.run, args.name)
    print(f"shipped {args.run} as {args.name} in {folder}")


@app.command(
    "tasks",
    help="print one sample of a task",
    args=[arg("task", choices=TASKS), arg("--length", type=int, default=256)],
    common=["seed"],
)
def _tasks(args: argparse.Namespace) -> None:
    sample = generate(args.task, args.length, args.seed)
    print(decode_bytes(sample.ids[: sample.prompt_length]).decode("utf-8", errors="replace"))
    print(f"--- answer(s): {', '.join(sample.answers)}")


@app.command("info", help="the presets, the shipped checkpoints, their sizes and scores")
def _info(args: argparse.Namespace) -> None:
    from papershelf_lm.model import CHECKPOINTS, checkpoint_names

    for name in PRESETS:
        print(json.dumps({"preset": name, **preset_summary(name)}))
    for name in checkpoint_names():
        folder = CHECKPOINTS / name
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        scores = folder / "eval.json"
        entry = {"checkpoint": name, "megabytes": round(size / 2**20, 2)}
        if scores.is_file():
            entry["eval"] = json.loads(scores.read_text())
        print(json.dumps(entry))


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
