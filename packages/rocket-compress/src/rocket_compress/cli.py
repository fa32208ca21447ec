"""The ``rocket-compress`` command line: compress, profile, eval, demo, bench, reproduce."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from papershelf.cli import App, arg
from papershelf.errors import InputError, check_int, check_number
from rocket_compress import __version__

app = App(
    "rocket-compress",
    __version__,
    "ROCKET: training-free LLM compression by knapsack allocation and single-step sparse factorization.",
)

MODEL_ARG = arg(
    "--model",
    default=None,
    help="a local HF causal-LM folder, or a testbed checkpoint name (default: tiny-m if shipped, "
    "else tiny-s)",
)
CALIB_ARGS = [
    arg(
        "--calib", default=None, metavar="FILE", help="calibration text file (default: the testbed's corpus)"
    ),
    arg("--calib-n", type=int, default=32, help="calibration windows (default 32)"),
    arg("--calib-len", type=int, default=512, help="tokens per calibration window (default 512)"),
    arg("--threads", type=int, default=1, help="torch CPU threads (default 1)"),
]
GRID_ARGS = [
    arg("--ratios", type=float, nargs="+", default=None, help="profiled compression levels"),
    arg("--ks", type=float, nargs="+", default=None, help="profiled rank/non-zero ratios ks (>= 1)"),
]


def _threads(n):
    import torch

    torch.set_num_threads(check_int("--threads", n, low=1))


def _config(args, **kw):
    from rocket_compress.pipeline import CompressConfig

    cfg = CompressConfig(**kw)
    if getattr(args, "ratios", None):
        cfg.ratios = tuple(args.ratios)
    if getattr(args, "ks", None):
        cfg.ks_grid = tuple(args.ks)
    cfg.validate()
    return cfg


def _model_name(args) -> str:
    if args.model:
        return args.model
    from rocket_compress.experiments import default_model

    return default_model()


def _calib_text(args) -> bytes | str:
    if args.calib:
        p = Path(args.calib)
        if not p.is_file():
            raise InputError(f"--calib {args.calib!r} is not a file")
        return p.read_text(encoding="utf-8", errors="replace")
    from rocket_compress.experiments import corpus_text

    return corpus_text("train")


def _calib_batches(args, tok):
    from rocket_compress.data import text_windows

    n = check_int("--calib-n", args.calib_n, low=1)
    length = check_int("--calib-len", args.calib_len, low=2)
    return text_windows(tok, _calib_text(args), n, length, seed=args.seed)


# ---- compress -----------------------------------------------------------------------------------------
@app.command(
    "compress",
    help="compress a causal LM folder with ROCKET and save it (safetensors + config)",
    args=[
        MODEL_ARG,
        arg("--ratio", type=float, required=True, help="parameter reduction in (0, 1)"),
        arg("--allocation", choices=("knapsack", "uniform"), default="knapsack"),
        *CALIB_ARGS,
        *GRID_ARGS,
        arg("--overwrite", action="store_true", help="replace an existing --out folder"),
    ],
    common=("out", "seed"),
)
def _compress(args: argparse.Namespace) -> None:
    from rocket_compress.experiments import load_any
    from rocket_compress.io import save_compressed
    from rocket_compress.pipeline import compress

    check_number("--ratio", args.ratio, low=0, high=1, low_open=True, high_open=True)
    if not args.out:
        raise InputError("--out DIR is required: the folder to write the compressed model to")
    if Path(args.out).exists() and any(Path(args.out).iterdir()) and not args.overwrite:
        raise InputError(
            f"--out {args.out} exists and is not empty", hint="choose a new folder or --overwrite"
        )
    _threads(args.threads)
    cfg = _config(args, allocation=args.allocation)
    name = _model_name(args)
    model, tok, _ = load_any(name)
    batches = _calib_batches(args, tok)
    model, report = compress(model, batches, args.ratio, cfg)
    source = Path(name) if Path(name).is_dir() else None
    out = save_compressed(
        model,
        args.out,
        report=report.to_dict(),
        source=source,
        tokenizer=tok if source is None else None,
        overwrite=args.overwrite,
    )
    print(report.summary())
    print("time: " + ", ".join(f"{k} {v:.1f}s" for k, v in report.seconds.items()))
    print(f"wrote {out}")


# ---- profile ------------------------------------------------------------------------------------------
@app.command(
    "profile",
    help="per-layer whitened error versus (ratio, ks); JSON with every option",
    args=[MODEL_ARG, *CALIB_ARGS, *GRID_ARGS],
    common=("out", "seed"),
)
def _profile(args: argparse.Namespace) -> None:
    from papershelf.repro import atomic_write_json
    from rocket_compress.experiments import load_any
    from rocket_compress.factorize import best_per_ratio
    from rocket_compress.pipeline import calibrate, profile

    _threads(args.threads)
    cfg = _config(args)
    model, tok, label = load_any(_model_name(args))
    t = time.perf_counter()
    profiles = profile(model, (cal := calibrate(model, _calib_batches(args, tok), cfg)), cfg)
    ratios = sorted(cfg.ratios)
    print(f"{label}: {len(profiles)} layers, {cal.tokens} calibration tokens, {time.perf_counter() - t:.1f}s")
    print("best relative whitened error (best ks) per ratio:")
    print("layer".ljust(34) + "".join(f"{r:>12g}" for r in ratios))
    for lp in profiles:
        best = best_per_ratio(lp.options)
        cells = [f"{best[r].rel_error:.4f}@{best[r].ks:g}" if r in best else "-" for r in ratios]
        print(lp.name[-34:].ljust(34) + "".join(c.rjust(12) for c in cells))
    if args.out:
        data = {
            "model": label,
            "calib_tokens": cal.tokens,
            "layers": [
                {
                    "name": lp.name,
                    "d_in": lp.d_in,
                    "d_out": lp.d_out,
                    "options": [o.__dict__ for o in lp.options],
                }
                for lp in profiles
            ],
        }
        atomic_write_json(args.out, data)
        print(f"wrote {args.out}")


# ---- eval ---------------------------------------------------------------------------------------------
@app.command(
    "eval",
    help="perplexity (and testbed needle tasks) of a dense or compressed model folder",
    args=[
        MODEL_ARG,
        arg(
            "--text",
            default=None,
            metavar="FILE",
            help="evaluation text (default: the testbed's validation corpus)",
        ),
        arg("--n", type=int, default=16, help="windows (default 16)"),
        arg("--length", type=int, default=512, help="tokens per window (default 512)"),
        arg(
            "--tasks",
            nargs="*",
            default=[],
            choices=("passkey", "niah"),
            help="testbed needle tasks (testbed tokenizer only)",
        ),
        arg("--task-length", type=int, default=1024),
        arg("--task-n", type=int, default=20),
        arg("--threads", type=int, default=1),
    ],
    common=("seed", "out"),
)
def _eval(args: argparse.Namespace) -> None:
    from papershelf.repro import atomic_write_json
    from rocket_compress.data import text_windows
    from rocket_compress.experiments import _is_testbed_vocab, corpus_text, evaluate, load_any
    from rocket_compress.pipeline import count_params

    _threads(args.threads)
    task_n = check_int("--task-n", args.task_n, low=1)
    task_length = check_int("--task-length", args.task_length, low=64)
    model, tok, label = load_any(_model_name(args))
    if args.text:
        if not Path(args.text).is_file():
            raise InputError(f"--text {args.text!r} is not a file")
        text = Path(args.text).read_text(encoding="utf-8", errors="replace")
    else:
        text = corpus_text("validation")
    windows = text_windows(
        tok,
        text,
        check_int("--n", args.n, low=1),
        check_int("--length", args.length, low=2),
        seed=args.seed + 1,
    )
    if args.tasks and not _is_testbed_vocab(model):
        raise InputError("--tasks need a model with the testbed tokenizer")
    res = evaluate(model, windows, args.tasks, task_length, task_n)
    res["params"] = count_params(model)
    print(
        f"{label}: "
        + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v:,}" for k, v in res.items())
    )
    if args.out:
        atomic_write_json(args.out, {"model": label, **res})


# ---- demo ---------------------------------------------------------------------------------------------
@app.command(
    "demo",
    help="a random 2-layer Llama compressed by every method at 30%%: output error vs dense",
    common=("seed",),
)
def _demo(args: argparse.Namespace) -> None:
    import copy

    import torch

    from rocket_compress.baselines import magnitude_prune, svd_llm, truncated_svd
    from rocket_compress.data import random_batches, random_llama
    from rocket_compress.pipeline import CompressConfig, allocate, apply, calibrate, profile

    torch.set_num_threads(1)
    model = random_llama(hidden=64, layers=2, intermediate=128, vocab=128, seed=args.seed)
    with torch.no_grad():  # give the random weights a decaying spectrum, as trained weights have
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear) and mod is not model.lm_head:
                U, s, Vh = torch.linalg.svd(mod.weight, full_matrices=False)
                mod.weight.copy_(U @ torch.diag(s * torch.linspace(1, 0.05, len(s)) ** 2) @ Vh)
    calib = random_batches(128, 16, 128, seed=args.seed)
    held = torch.cat(random_batches(128, 4, 128, seed=args.seed + 1))
    with torch.no_grad():
        ref = model(input_ids=held).logits
    cfg = CompressConfig()
    cal = calibrate(model, calib, cfg)
    prof = profile(model, cal, cfg, extra_ratios=(0.3,))
    print("random Llama (hidden 64, 2 layers), 2048 calibration tokens, 30% fewer linear-layer parameters")
    print(f"{'method':>15}  {'params':>7}  {'mean layer err':>14}  {'logit rel. err':>14}")
    for method in ("rocket", "rocket-uniform", "svd-llm", "truncated-svd", "magnitude"):
        m = copy.deepcopy(model)
        if method.startswith("rocket"):
            rep = apply(
                m, cal, allocate(prof, 0.3, "knapsack" if method == "rocket" else "uniform"), 0.3, cfg
            )
        elif method == "svd-llm":
            rep = svd_llm(m, cal, 0.3)
        elif method == "truncated-svd":
            rep = truncated_svd(m, 0.3)
        else:
            rep = magnitude_prune(m, 0.3)
        with torch.no_grad():
            err = float((m(input_ids=held).logits - ref).norm() / ref.norm())
        mean = sum(r["rel_error"] for r in rep.layers) / len(rep.layers)
        print(f"{method:>15}  {rep.params:>7}  {mean:>14.4f}  {err:>14.4f}")
    print("(layer err: whitened for ROCKET/SVD-LLM, weight-space for truncated SVD and magnitude)")


# ---- bench / reproduce --------------------------------------------------------------------------------
EXP_ARGS = [
    MODEL_ARG,
    arg("--calib-n", type=int, default=32),
    arg("--calib-len", type=int, default=512),
    arg("--eval-n", type=int, default=16),
    arg("--eval-len", type=int, default=512),
    arg("--task-n", type=int, default=20),
    arg("--task-length", type=int, default=1024),
    arg("--threads", type=int, default=1, help="torch CPU threads (default 1)"),
    *GRID_ARGS,
]


def _run(args, ratios, quick):
    from rocket_compress.experiments import comparison

    _threads(args.threads)
    cfg = _config(args)
    return comparison(
        "" if quick else _model_name(args),
        ratios=ratios,
        calib_n=check_int("--calib-n", args.calib_n, low=1),
        calib_len=check_int("--calib-len", args.calib_len, low=2),
        eval_n=check_int("--eval-n", args.eval_n, low=1),
        eval_len=check_int("--eval-len", args.eval_len, low=2),
        task_n=check_int("--task-n", args.task_n, low=1),
        task_length=check_int("--task-length", args.task_length, low=64),
        config=cfg,
        seed=args.seed,
        quick=quick,
    )


def _print_targets(result):
    from rocket_compress.experiments import table, targets

    print()
    print(table(result))
    print()
    print("timing: " + ", ".join(f"{k} {v:.1f}" for k, v in result["timing"].items()))
    tg = targets(result)
    for t in tg:
        bound = (
            ""
            if t["bound"] is None
            else f" (target {'<=' if t['better'] == 'lower' else '>='} {t['bound']:g})"
        )
        met = {True: "met", False: "MISSED", None: "reported"}[t["met"]]
        print(f"{t['name']}: {t['value']:.4g}{bound}: {met}")
    return tg


@app.command(
    "bench",
    help="ROCKET vs SVD-LLM/SVD/magnitude at 30%% on the testbed: ΔPPL ratio, tasks, time",
    args=[*EXP_ARGS, arg("--quick", action="store_true", help="random tiny model, seconds")],
    common=("out", "seed"),
)
def _bench(args: argparse.Namespace) -> None:
    from papershelf.bench import record, write_records

    result = _run(args, (0.3,), args.quick)
    tg = _print_targets(result)
    suffix = "-quick" if args.quick else ""
    setting = {
        "model": result["model"],
        "ratio": 0.3,
        "calib_tokens": result["calib_tokens"],
        "threads": args.threads,
        "tasks": result["tasks"],
    }
    rows = {r["method"]: r for r in result["rows"]}
    d = result["dense"]["ppl"]
    recs = [
        record(
            package="rocket-compress",
            version=__version__,
            benchmark="dppl-30" + suffix,
            setting=setting,
            metric="perplexity increase over dense at 30% fewer parameters",
            better="lower",
            candidate="rocket",
            candidate_value=rows["rocket"]["ppl"] - d,
            baseline="svd-llm",
            baseline_value=rows["svd-llm"]["ppl"] - d,
            repeats=1,
            target=None if args.quick else 0.7,
        ),
        record(
            package="rocket-compress",
            version=__version__,
            benchmark="allocation-30" + suffix,
            setting=setting,
            metric="perplexity, knapsack vs uniform allocation",
            better="lower",
            candidate="rocket-knapsack",
            candidate_value=rows["rocket"]["ppl"],
            baseline="rocket-uniform",
            baseline_value=rows["rocket-uniform"]["ppl"],
            repeats=1,
            target=None if args.quick else 1.0,
        ),
    ]
    for b in ("truncated-svd", "magnitude"):
        recs.append(
            record(
                package="rocket-compress",
                version=__version__,
                benchmark=f"ppl-vs-{b}-30" + suffix,
                setting=setting,
                metric="perplexity at 30% fewer parameters",
                better="lower",
                candidate="rocket",
                candidate_value=rows["rocket"]["ppl"],
                baseline=b,
                baseline_value=rows[b]["ppl"],
                repeats=1,
                target=None if args.quick else 1.0,
            )
        )
    if result["tasks"]:
        tasks = result["tasks"]
        recs.append(
            record(
                package="rocket-compress",
                version=__version__,
                benchmark="task-retention-30",
                setting=setting,
                metric=f"mean accuracy over {'+'.join(tasks)}",
                better="higher",
                candidate="rocket",
                candidate_value=sum(rows["rocket"][t] for t in tasks) / len(tasks),
                baseline="dense",
                baseline_value=sum(result["dense"][t] for t in tasks) / len(tasks),
                repeats=1,
                target=0.9,
            )
        )
    t = next(x for x in tg if x["name"] == "compress-end-to-end-cpu-s-0.3")
    recs.append(
        record(
            package="rocket-compress",
            version=__version__,
            benchmark="compress-time-30" + suffix,
            setting=setting,
            metric="end-to-end compression CPU seconds, 1 thread (calibrate+profile+allocate+apply)",
            better="lower",
            candidate="rocket",
            candidate_value=t["value"],
            baseline="2-minute bound",
            baseline_value=120.0,
            repeats=1,
            target=None if args.quick else 1.0,
        )
    )
    if args.out:
        write_records(args.out, recs)
        print(f"wrote {args.out}")


@app.command(
    "reproduce",
    help="every method at 20/30/50%% on the testbed: table, targets, JSON, plot",
    args=[*EXP_ARGS, arg("--plot", default=None, metavar="FILE.png")],
    common=("out", "seed"),
)
def _reproduce(args: argparse.Namespace) -> None:
    from papershelf.repro import atomic_write_json, run_manifest
    from rocket_compress.experiments import plot

    result = _run(args, (0.2, 0.3, 0.5), False)
    tg = _print_targets(result)
    if args.out:
        atomic_write_json(args.out, {"result": result, "targets": tg, "manifest": run_manifest()})
        print(f"wrote {args.out}")
    if args.plot:
        print(
            f"wrote {args.plot}" if plot(result, args.plot) else "plot skipped: matplotlib is not installed"
        )


def main(argv=None) -> int:
    if argv is None:
        app.run()
    return app.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
