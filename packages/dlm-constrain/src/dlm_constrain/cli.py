"""The ``dlm-constrain`` command line: sample, demo, bench, reproduce, train."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from dlm_constrain import __version__
from dlm_constrain.automaton import TokenDFA
from papershelf.bench import format_table, write_records
from papershelf.cli import App, arg, read_npy, read_text
from papershelf.errors import InputError, check_int
from papershelf.repro import (
    atomic_write_json,
    atomic_write_text,
    check_output_path,
    check_outputs,
    run_manifest,
    seed_everything,
)

app = App(
    "dlm-constrain",
    __version__,
    "Exact constrained sampling from diffusion-LM mean-field posteriors under finite automata.",
)
RESULTS = Path("results")  # relative to the current directory (the package folder in this repo)


def _read_vocab(path: str | None, V: int) -> list[str]:
    if path is None:
        raise InputError(
            f"--vocab is required: a JSON list of the {V} token strings (or a {{token: id}} object)"
        )
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--vocab: no such file {path!r}")
    try:
        vocab = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"--vocab: {path!r} is not JSON ({type(exc).__name__})") from None
    if not isinstance(vocab, list | dict):
        raise InputError("--vocab must hold a JSON list of token strings or a {token: id} object")
    if isinstance(vocab, dict) and not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in vocab.values()
    ):
        raise InputError("--vocab: a {token: id} object needs non-negative integer ids")
    return vocab


def _read_schema(text: str) -> str:
    """``--schema``: inline JSON (starts with ``{``) or the path of a JSON file."""
    if text.lstrip().startswith("{"):
        return text
    if not Path(text).is_file():
        raise InputError(f"--schema: no such file {text!r} (inline JSON must start with '{{')")
    return read_text(text, "--schema")


def _read_probs(path: str) -> np.ndarray:
    return read_npy(path, "--probs")


@app.command(
    "sample",
    help="exact samples (or the MAP string) from per-position probabilities under a regex or JSON schema",
    args=[
        arg("--probs", required=True, help=".npy file of shape [positions, vocab] (rows are normalised)"),
        arg("--vocab", default=None, help="JSON file: list of token strings, or {token: id}"),
        arg("--regex", default=None, help="constraint as a regular expression (whole-string match)"),
        arg("--schema", default=None, help="constraint as a JSON schema (a file path or inline JSON)"),
        arg(
            "--schema-backend",
            choices=("papershelf", "outlines"),
            default="papershelf",
            help="JSON schema to regex: papershelf (compact JSON, integer bounds; default) or outlines "
            "(outlines-core: optional spaces, $ref; needs outlines-core)",
        ),
        arg("--eos-id", type=int, default=None, help="end/padding token id (allows shorter strings)"),
        arg("--num-samples", type=int, default=1),
        arg("--method", choices=("sequential", "scan", "bisect"), default="sequential"),
        arg("--greedy", action="store_true", help="the most probable accepted string (max-product)"),
        arg("--strict", action="store_true", help="reject rows that do not sum to 1 instead of normalising"),
    ],
    common=["seed", "out"],
)
def _sample(args: argparse.Namespace) -> None:
    from dlm_constrain.inference import check_probs, log_partition, sample

    if (args.regex is None) == (args.schema is None):
        raise InputError("give exactly one of --regex and --schema")
    check_outputs({"--out": args.out}, {"--probs": args.probs, "--vocab": args.vocab})
    probs = _read_probs(args.probs)
    V = probs.shape[-1] if probs.ndim >= 1 else 0
    vocab = _read_vocab(args.vocab, V)
    num = check_int("--num-samples", args.num_samples, low=1, high=1_000_000)
    if args.regex is not None:
        dfa = TokenDFA.from_regex(args.regex, vocab, args.eos_id).renamed(f"--regex {args.regex!r}")
    else:
        schema = _read_schema(args.schema)
        dfa = TokenDFA.from_json_schema(schema, vocab, args.eos_id, backend=args.schema_backend)
        dfa = dfa.renamed("--schema " + dfa.name.removeprefix("JSON schema "))
    gen = torch.Generator().manual_seed(args.seed)
    try:  # checked here first so that errors name the flag (--probs)
        probs = check_probs(probs, dfa, name="--probs", normalize=not args.strict)
        x = sample(
            probs, dfa, num, method=args.method, greedy=args.greedy, generator=gen, normalize=not args.strict
        )
    except InputError as exc:  # the library's advice names its keyword; here the switch is the flag
        raise InputError(
            str(exc).replace("pass normalize=True to rescale", "drop --strict to rescale")
        ) from None
    lz = log_partition(probs, dfa, normalize=not args.strict)
    texts = [dfa.decode(row) for row in x.tolist()]
    print(f"automaton: {dfa.num_states} states, vocabulary {dfa.vocab_size}; log Z = {lz:.6g}")
    for t in texts[: 1 if args.greedy else num]:
        print(t)
    if args.out:
        atomic_write_json(
            args.out,
            {
                "tokens": x.tolist(),
                "texts": texts,
                "log_partition": lz,
                "greedy": args.greedy,
                "method": args.method,
                "manifest": run_manifest(),
            },
        )


@app.command(
    "demo",
    help="JSON records from the shipped tiny DLM: every strategy side by side (~20 s)",
    args=[arg("--count", type=int, default=12)],
    common=["seed", "quiet"],
)
def _demo(args: argparse.Namespace) -> None:
    from dlm_constrain.experiments import demo

    count = check_int("--count", args.count, low=1, high=1000)
    seed_everything(args.seed)
    rows = demo(count, args.seed)
    print(f"tiny masked-diffusion LM, JSON task, {count} prompts, 34 positions, 8 steps, stochastic")
    print(f"{'strategy':14s} {'validity':>9s} {'accuracy':>9s}")
    for r in rows:
        print(f"{r['strategy']:14s} {r['validity']:9.3f} {r['accuracy']:9.3f}")


@app.command(
    "bench",
    help="constraint overhead, log-depth vs sequential samplers, tiny-DLM accuracy",
    args=[arg("--quick", action="store_true", help="tiny sizes, seconds")],
    common=["seed", "out"],
)
def _bench(args: argparse.Namespace) -> None:
    from dlm_constrain.experiments import bench

    seed_everything(args.seed)
    torch.set_num_threads(1)
    records = bench(quick=args.quick, seed=args.seed)
    print(format_table(records))
    if args.out:
        write_records(args.out, records)


def _parse_steps_list(text: str) -> tuple[int, ...]:
    if text.strip() == "":
        return ()
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise InputError(
            f"--sweep must be comma-separated step counts such as 16,8,4,2, got {text!r}"
        ) from None
    return tuple(check_int("--sweep", v, low=1, high=34) for v in vals)


@app.command(
    "reproduce",
    help="the headline experiment: validity and accuracy of every strategy on 3 tasks, over seeds",
    args=[
        arg("--count", type=int, default=60, help="instances per task and seed (default 60)"),
        arg("--steps", type=int, default=8, help="denoising steps over 34 positions (default 8)"),
        arg("--seeds", type=int, default=3, help="seeds --seed .. --seed+N-1 (default 3)"),
        arg(
            "--level",
            choices=("format", "rules"),
            default="format",
            help="Sudoku constraint: row rule + givens (default) or the full rules (pins the answer)",
        ),
        arg("--sweep", default="16,8,4,2", help="step counts for the tokens-per-step table ('' = none)"),
        arg(
            "--confidence",
            choices=("model", "marginal"),
            default="model",
            help="remasking score of ours: model probability (default) or constrained marginal",
        ),
    ],
    common=["seed", "out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from dlm_constrain.experiments import reproduce

    count = check_int("--count", args.count, low=1, high=10_000)
    steps = check_int("--steps", args.steps, low=1, high=34)
    seeds = check_int("--seeds", args.seeds, low=1, high=100)
    sweep = _parse_steps_list(args.sweep)
    check_output_path(Path(args.out) if args.out else RESULTS / "reproduce.json")
    seed_everything(args.seed)
    res = reproduce(
        count,
        args.seed,
        quiet=args.quiet,
        steps=steps,
        seeds=seeds,
        level=args.level,
        sweep=sweep,
        confidence=args.confidence,
    )
    res["manifest"] = run_manifest(
        command=f"dlm-constrain reproduce --count {count} --steps {steps} --seeds {seeds} "
        f"--level {args.level} --sweep '{args.sweep}' --confidence {args.confidence} --seed {args.seed}"
    )
    print(
        f"{steps} steps, level {args.level}, confidence {args.confidence}, {count} prompts per task x "
        f"{seeds} seeds (mean +- std over seeds)"
    )
    print(f"{'setting':28s} {'validity':>15s} {'accuracy':>15s}   json / sudoku / countdown accuracy")
    for key, m in res["summary"].items():
        if "validity" not in m:
            print(f"{key:28s} {m['mean']:.3f} +- {m['std']:.3f} (min {m['min']:.3f}, max {m['max']:.3f})")
            continue
        per_task = " / ".join(f"{m[f'{t}_accuracy']['mean']:.3f}" for t in ("json", "sudoku", "countdown"))
        print(
            f"{key:28s} {m['validity']['mean']:.3f} +- {m['validity']['std']:.3f} "
            f"{m['accuracy']['mean']:.3f} +- {m['accuracy']['std']:.3f}   {per_task}"
        )
    if res["sweep"]:
        print(
            "stochastic, tokens-per-step sweep "
            "(accuracy mean +- std over seeds; ratio = exact / unconstrained)"
        )
        print(
            f"{'steps':>5s} {'tok/step':>8s} {'level':>6s} {'uncon. valid':>12s} {'uncon. acc':>15s} "
            f"{'exact acc':>15s} {'ratio':>15s}   exact json / sudoku / countdown"
        )
        for e in res["sweep"]:
            per_task = " / ".join(
                f"{e[f'exact_{t}_accuracy']['mean']:.3f}" for t in ("json", "sudoku", "countdown")
            )
            print(
                f"{e['steps']:5d} {e['tokens_per_step']:8.1f} {e['level']:>6s} "
                f"{e['unconstrained_validity']['mean']:12.3f} "
                f"{e['unconstrained_accuracy']['mean']:.3f} +- {e['unconstrained_accuracy']['std']:.3f} "
                f"{e['exact_accuracy']['mean']:.3f} +- {e['exact_accuracy']['std']:.3f} "
                f"{e['ratio']['mean']:.3f} +- {e['ratio']['std']:.3f}   {per_task}"
            )
    out = Path(args.out) if args.out else RESULTS / "reproduce.json"
    atomic_write_json(out, res)
    print(f"wrote {out}")


@app.command(
    "train",
    help="train the tiny masked-diffusion LM on the synthetic tasks (CPU, minutes)",
    args=[
        arg("--steps", type=int, default=800),
        arg("--lr", type=float, default=3e-3),
        arg("--threads", type=int, default=1),
    ],
    common=["seed", "out", "quiet"],
)
def _train(args: argparse.Namespace) -> None:
    from dlm_constrain import model as M

    steps = check_int("--steps", args.steps, low=1)
    threads = check_int("--threads", args.threads, low=1)
    if not (args.lr > 0 and np.isfinite(args.lr)):
        raise InputError(f"--lr must be a positive number, got {args.lr}")
    if args.out is None:
        raise InputError("--out is required (the shipped weights are in src/dlm_constrain/weights/)")
    # both outputs (the weights and their loss log) are checked before minutes of training
    check_outputs({"--out": args.out, "--out's loss log": str(args.out) + ".log.json"})
    torch.set_num_threads(threads)
    net, log = M.train(steps=steps, lr=args.lr, seed=args.seed, quiet=args.quiet)
    M.save(net, args.out, {"steps": steps, "lr": args.lr, "seed": args.seed, "log": log})
    atomic_write_text(str(args.out) + ".log.json", json.dumps(log, indent=1))
    print(f"wrote {args.out}")


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    app.run()
