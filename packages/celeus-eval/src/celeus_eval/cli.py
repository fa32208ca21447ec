"""The ``celeus-eval`` command line: a labelling campaign (init / next / update / status), a retrospective
``run``, and ``demo`` / ``bench`` / ``reproduce``."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from celeus_eval import __version__
from celeus_eval.campaign import Campaign
from celeus_eval.celeus import BOUNDS, ESTIMANDS, Celeus, check_vector
from celeus_eval.io import read_labels_csv, read_pool_csv, read_vector
from celeus_eval.signal import SAMPLING_RULES
from papershelf.bench import write_records
from papershelf.cli import App, arg, seed_value
from papershelf.errors import InputError
from papershelf.repro import atomic_write_json, run_manifest

app = App(
    "celeus-eval",
    __version__,
    "Certifiable, label-efficient evaluation: anytime-valid intervals for a model's mean loss on a pool.",
)


def _loss_range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH (e.g. 0,1), got {text!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise argparse.ArgumentTypeError(f"expected finite LOW < HIGH, got {text!r}")
    return low, high


METHOD_ARGS = [
    arg(
        "--alpha", type=float, default=0.05, help="miscoverage allowed over the whole sequence (default 0.05)"
    ),
    arg("--width", type=float, default=0.05, help="stop once the interval's full width is at most this"),
    arg("--sampling", choices=[s for s in SAMPLING_RULES if s != "oracle"], default="uncertainty"),
    arg("--beta", type=float, default=0.4, help="sampling floor: q >= beta/N (default 0.4)"),
    arg(
        "--loss-range", type=_loss_range, default=(0.0, 1.0), metavar="LOW,HIGH", help="range of a loss (0,1)"
    ),
    arg("--estimand", choices=ESTIMANDS, default="pool", help="pool mean, or population (paper protocol)"),
    arg("--bounds", choices=BOUNDS, default="adaptive"),
    arg("--max-labels", type=int, default=None, help="label budget"),
]
POOL_ARGS = [
    arg("--pool", required=True, help="CSV with one row per item"),
    arg("--id-col", default="id", help="column of item ids (default: id)"),
    arg("--surrogate-col", required=True, help="column of surrogate predictions of each loss"),
    arg("--proxy-col", default=None, help="column of the label-free proxy loss for sampling (optional)"),
]


def _method_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "alpha": args.alpha,
        "target_width": args.width,
        "sampling": args.sampling,
        "beta": args.beta,
        "loss_range": args.loss_range,
        "estimand": args.estimand,
        "bounds": args.bounds,
    }


def _print_status(status: dict[str, Any]) -> None:
    reached = "yes" if status["reached"] else "no"
    print(f"estimate      {status['estimate']:.4f}")
    print(f"interval      [{status['lower']:.4f}, {status['upper']:.4f}]")
    print(f"width         {status['width']:.4f} (target {status['target_width']:g})")
    print(f"labels used   {status['n_labels']}")
    if "pending" in status:
        print(f"pending       {status['pending']}")
    print(f"target met    {reached}")


# ---- campaign ----------------------------------------------------------------------------------
@app.command(
    "init",
    help="start a labelling campaign on a pool CSV and write its state file",
    args=[
        *POOL_ARGS,
        *METHOD_ARGS,
        arg("--state", required=True, help="state file to create"),
        arg("--force", action="store_true", help="overwrite an existing state file"),
        arg(
            "--seed", type=seed_value, default=None, help="random seed (default: fresh, stored in the state)"
        ),
    ],
)
def _init(args: argparse.Namespace) -> None:
    if Path(args.state).exists() and not args.force:
        raise InputError(f"state file {args.state!r} already exists", hint="pass --force to start over")
    options = _method_options(args)
    pool = read_pool_csv(
        args.pool,
        id_col=args.id_col,
        numeric={"surrogate": args.surrogate_col, "proxy": args.proxy_col},
        loss_range=args.loss_range,
    )
    campaign = Campaign.new(
        pool.ids,
        pool.columns["surrogate"],
        pool.columns.get("proxy"),
        seed=args.seed,
        max_labels=args.max_labels,
        **options,
    )
    campaign.save(args.state)
    print(f"campaign of {len(pool.ids)} items written to {args.state} (seed {campaign.config['seed']})")
    print(f"next: celeus-eval next --state {args.state} -k 20")


@app.command(
    "next",
    help="print the ids of the next items to label, one per line",
    args=[arg("--state", required=True), arg("-k", type=int, default=20, help="how many ids (default 20)")],
)
def _next(args: argparse.Namespace) -> None:
    campaign = Campaign.load(args.state)
    items = campaign.next_items(args.k)
    campaign.save(args.state)
    if not items:
        reason = "the target width is reached" if campaign.engine.reached else "the label budget is spent"
        print(f"nothing to label: {reason}", file=sys.stderr)
    for item in items:
        print(item)


@app.command(
    "update",
    help="feed labels (a CSV of id,label) back into the campaign",
    args=[
        arg("--state", required=True),
        arg("--labels", required=True, help="CSV with the labelled items"),
        arg("--id-col", default="id"),
        arg("--label-col", default="label", help="column of the loss/label of each item (default: label)"),
    ],
)
def _update(args: argparse.Namespace) -> None:
    campaign = Campaign.load(args.state)
    labels = read_labels_csv(
        args.labels,
        id_col=args.id_col,
        label_col=args.label_col,
        loss_range=tuple(campaign.config["loss_range"]),
    )
    count = campaign.add_labels(labels)
    campaign.save(args.state)
    print(f"recorded {count} label(s)")
    _print_status(campaign.status())


@app.command(
    "status",
    help="estimate, interval, width, labels used and whether the target is met",
    args=[arg("--state", required=True), arg("--json", action="store_true")],
)
def _status(args: argparse.Namespace) -> None:
    status = Campaign.load(args.state).status()
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        _print_status(status)


# ---- retrospective -----------------------------------------------------------------------------
@app.command(
    "run",
    help="evaluate retrospectively on a pool whose labels are all known (CSV, or .npy arrays)",
    args=[
        arg("--pool", default=None, help="CSV with one row per item (or use --losses/--surrogate .npy)"),
        arg("--id-col", default="id"),
        arg("--label-col", default="label", help="CSV column of each item's loss/label"),
        arg("--surrogate-col", default="surrogate"),
        arg("--proxy-col", default=None),
        arg("--losses", default=None, help=".npy file of the N losses"),
        arg("--surrogate", default=None, help=".npy file of the N surrogate predictions"),
        arg("--proxy", default=None, help=".npy file of the N proxy losses (optional)"),
        arg("--trace", action="store_true", help="include the per-label trace in --out"),
        *METHOD_ARGS,
    ],
    common=["seed", "out"],
)
def _run(args: argparse.Namespace) -> None:
    if args.pool is not None:
        pool = read_pool_csv(
            args.pool,
            id_col=args.id_col,
            numeric={"losses": args.label_col, "surrogate": args.surrogate_col, "proxy": args.proxy_col},
            loss_range=args.loss_range,
        )
        losses, surrogate, proxy = (
            pool.columns["losses"],
            pool.columns["surrogate"],
            pool.columns.get("proxy"),
        )
    elif args.losses is not None and args.surrogate is not None:
        losses, surrogate = read_vector(args.losses, "losses"), read_vector(args.surrogate, "surrogate")
        proxy = None if args.proxy is None else read_vector(args.proxy, "proxy")
    else:
        raise InputError("give either --pool CSV or both --losses and --surrogate .npy files")
    engine = Celeus(surrogate, proxy, seed=args.seed, **_method_options(args))
    result = engine.run(_checked_losses(losses, engine), max_labels=args.max_labels)
    status = {**result.as_dict(), "target_width": args.width}
    _print_status(status)
    print(f"pool mean     {float(np.mean(losses)):.4f} (known here: retrospective run)")
    if args.out:
        atomic_write_json(args.out, {**result.as_dict(with_trace=args.trace), "manifest": run_manifest()})


def _checked_losses(losses: np.ndarray, engine: Celeus) -> np.ndarray:
    return check_vector("losses", losses, engine.n_pool, engine.low, engine.high)


# ---- demo / bench / reproduce ------------------------------------------------------------------
@app.command("demo", help="a quick tour (about a second) on a built-in synthetic pool", common=["seed"])
def _demo(args: argparse.Namespace) -> None:
    from celeus_eval.baselines import clt_peeking, uniform_betting
    from celeus_eval.data import synthetic_pool

    pool = synthetic_pool(10_000, seed=args.seed)
    print(f"pool: {pool.size} items, true error rate {pool.risk:.4f}, surrogate AUC {pool.auc():.3f}")
    print("goal: a 95% anytime-valid interval of full width <= 0.05\n")
    print(f"{'method':<28}{'labels':>8}{'interval':>22}{'covers truth':>14}")
    runs = [
        ("celeus", lambda s: Celeus(pool.surrogate, pool.proxy, seed=s).run(pool.losses)),
        ("uniform betting CS", lambda s: uniform_betting(pool.losses, seed=s)),
        ("CLT, peeking (invalid)", lambda s: clt_peeking(pool.losses, seed=s)),
    ]
    for name, fn in runs:
        res = fn(args.seed)
        covers = "yes" if res.lower <= pool.risk <= res.upper else "NO"
        print(f"{name:<28}{res.n_labels:>8}{f'[{res.lower:.4f}, {res.upper:.4f}]':>22}{covers:>14}")


@app.command(
    "bench",
    help="labels-to-precision versus the uniform betting CS, same pools, same run (needs [bench])",
    args=[
        arg("--quick", action="store_true", help="tiny sizes, seconds"),
        arg("--reps", type=int, default=None, help="repetitions per method (default 200; quick: 4)"),
    ],
    common=["seed", "out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    from celeus_eval.experiments import bench
    from papershelf.bench import format_table

    if args.reps is not None and args.reps < 1:
        raise InputError("--reps must be at least 1")
    records = bench(quick=args.quick, reps=args.reps, seed=args.seed, quiet=args.quiet)
    print(format_table(records))
    for r in records:
        if "candidate_coverage" in r:
            print(
                f"{r['benchmark']}: coverage at stop celeus {r['candidate_coverage']:.3f}, "
                f"uniform {r['baseline_coverage']:.3f} over {r['repeats']} runs"
            )
    if args.out:
        write_records(args.out, records)


@app.command(
    "reproduce",
    help="every method and ablation on both pools: labels, savings, coverage (needs [bench])",
    args=[
        arg("--quick", action="store_true", help="small pools, few repetitions"),
        arg("--reps", type=int, default=None, help="repetitions per method (default 50; quick: 3)"),
        arg("--plot", default=None, help="PNG of interval width against labels (needs matplotlib)"),
    ],
    common=["seed", "out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from celeus_eval.experiments import reproduce

    reps = args.reps if args.reps is not None else (3 if args.quick else 50)
    if reps < 1:
        raise InputError("--reps must be at least 1")
    out = reproduce(reps=reps, seed=args.seed, quick=args.quick, quiet=args.quiet)
    print(f"{'pool':<24}{'method':<28}{'median labels':>14}{'vs uniform':>12}{'coverage':>10}")
    for row in out["rows"]:
        ratio = f"{row['ratio_to_uniform']:.2f}" if "ratio_to_uniform" in row else "—"
        pool = row["pool"] + (" (pop.)" if row.get("estimand") == "population" else "")
        print(
            f"{pool:<24}{row['method']:<28}{row['median_labels']:>14.0f}{ratio:>12}{row['coverage']:>10.3f}"
        )
    if args.out:
        atomic_write_json(args.out, {**out, "reps": reps, "manifest": run_manifest()})
    if args.plot:
        _plot(out["width_traces"], args.plot)


def _plot(traces: dict[str, dict[str, list[float]]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'celeus-eval[plots]')", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, len(traces), figsize=(5 * len(traces), 3.5), squeeze=False)
    for ax, (pool, curves) in zip(axes[0], traces.items()):
        for name, widths in curves.items():
            ax.plot(np.arange(1, len(widths) + 1), widths, label=name)
        ax.axhline(0.05, color="grey", linestyle=":")
        ax.set(title=pool, xlabel="labels", ylabel="interval width", yscale="log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
