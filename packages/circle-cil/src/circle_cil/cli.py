"""The ``circle-cil`` command line: ``run`` a class-incremental stream, ``ablate`` CIRCLE's parts,
``make-data`` (write GlyphCIL / digits to .npz), and ``demo`` / ``bench`` / ``reproduce``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from circle_cil import __version__
from papershelf.bench import format_table, write_records
from papershelf.cli import App, arg, seed_value
from papershelf.errors import InputError, check_int
from papershelf.repro import atomic_path, atomic_write_json, run_manifest

app = App(
    "circle-cil",
    __version__,
    "CIRCLE: fixed random BiRC2D reservoir features + streaming LDA for cold-start class-incremental "
    "learning.",
)

_DATA_ARGS = [
    arg(
        "--dataset",
        default="glyph",
        help="digits, glyph (GlyphCIL, generated) or a .npz file (see make-data)",
    ),
    arg("--classes", type=int, default=200, help="GlyphCIL classes (default 200, at most 221)"),
    arg("--per-class", type=int, default=24, help="GlyphCIL images per class (2/3 train, default 24)"),
]


def _load(args: argparse.Namespace):
    from circle_cil.data import Dataset, load_dataset

    name = args.dataset
    if name.endswith(".npz"):
        path = Path(name)
        if not path.is_file():
            raise InputError(f"--dataset file {name!r} does not exist")
        keys = ("X_train", "y_train", "X_test", "y_test")
        try:
            z = np.load(path, allow_pickle=False)
            files = z.files
        except (OSError, ValueError) as exc:
            raise InputError(f"--dataset {name!r} is not a readable .npz file ({exc})") from None
        missing = [k for k in keys if k not in files]
        if missing:
            raise InputError(
                f"--dataset {name!r} lacks array(s) {', '.join(missing)}; expected {', '.join(keys)}"
            )
        try:
            parts = [z[k] for k in keys]
        except (OSError, ValueError) as exc:
            raise InputError(f"--dataset {name!r} is not a readable .npz file ({exc})") from None
        from circle_cil.reservoir import as_images
        from circle_cil.slda import as_labels

        X_tr, X_te = (
            as_images(parts[i], f"--dataset {k}").numpy() for i, k in ((0, "X_train"), (2, "X_test"))
        )
        y_tr, y_te = as_labels(parts[1], len(X_tr), "y_train"), as_labels(parts[3], len(X_te), "y_test")
        if X_tr.shape[1:] != X_te.shape[1:]:
            raise InputError("--dataset X_train and X_test have different image shapes")
        return Dataset(path.stem, X_tr.astype(np.float32), y_tr, X_te.astype(np.float32), y_te)
    if name not in ("digits", "glyph"):
        raise InputError(f"--dataset must be digits, glyph or a .npz file, got {name!r}")
    n = check_int("--classes", args.classes, low=2, high=221)
    per = check_int("--per-class", args.per_class, low=3)
    return load_dataset(name, seed=args.seed, n_classes=n, per_class=per)


def _print_rows(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> None:
    def fmt(v, f):
        if v is None:
            return "—"
        return v if isinstance(v, str) else format(v, f)

    cells = [[fmt(r.get(k), f) for k, _, f in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    print("  ".join(h.ljust(w) for (_, h, _), w in zip(columns, widths)).rstrip())
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip())


_COLS = [
    ("method", "method", ""),
    ("n_tasks", "tasks", "d"),
    ("final_acc", "final acc", ".4f"),
    ("avg_inc_acc", "avg inc acc", ".4f"),
    ("train_seconds", "train s", ".2f"),
    ("train_cpu_seconds", "train CPU s", ".2f"),
]


# ---- run ------------------------------------------------------------------------------------------------
@app.command(
    "run",
    help="run CIRCLE (or a baseline) over a class-incremental stream and print final/average accuracy",
    args=[
        *_DATA_ARGS,
        arg("--tasks", type=int, default=50, help="number of tasks (default 50)"),
        arg("--method", default="CIRCLE", help="CIRCLE (default), LwF, frozen, random-conv, joint"),
        arg("--reservoirs", type=int, default=8, help="M: random reservoirs (default 8)"),
        arg("--groups", type=int, default=4, help="G: feature groups / SLDA heads (default 4)"),
        arg("--units", type=int, default=128, help="units per reservoir, divisible by 4 (default 128)"),
        arg("--pooling", default="pyramid", help="mean, meanmax, grid, pyramid (default), flatten"),
        arg("--cov-update", default="hayes_kanan", help="hayes_kanan (published, default) or exact"),
        arg("--order-seed", type=seed_value, default=1993, help="class-order seed (default 1993)"),
    ],
    common=["seed", "out", "quiet"],
)
def _run(args: argparse.Namespace) -> None:
    import torch

    from circle_cil.experiments import METHODS, run_stream

    if args.method not in METHODS:
        raise InputError(f"--method must be one of {', '.join(METHODS)}; got {args.method!r}")
    tasks = check_int("--tasks", args.tasks, low=1)
    ckw = dict(
        n_reservoirs=check_int("--reservoirs", args.reservoirs, low=1),
        n_groups=check_int("--groups", args.groups, low=1),
        units=args.units,
        pooling=args.pooling,
        cov_update=args.cov_update,
    )
    if ckw["n_groups"] > ckw["n_reservoirs"]:
        raise InputError(f"--groups {args.groups} must be at most --reservoirs {args.reservoirs}")
    data = _load(args)
    torch.set_num_threads(1)
    print(data.describe())
    r = run_stream(
        data, tasks, args.method, seed=args.seed, order_seed=args.order_seed, circle_kw=ckw, quiet=args.quiet
    )
    _print_rows([r], _COLS)
    if args.out:
        atomic_write_json(
            args.out, {**r, "dataset": data.describe(), "circle": ckw, "manifest": run_manifest()}
        )


# ---- ablate ---------------------------------------------------------------------------------------------
@app.command(
    "ablate",
    help="CIRCLE's parts one at a time: G for fixed M, head (SLDA modes, NCM), activation, pooling, scaling",
    args=[
        *_DATA_ARGS[:1],
        arg("--classes", type=int, default=100, help="GlyphCIL classes (default 100)"),
        arg("--per-class", type=int, default=30, help="GlyphCIL images per class (default 30)"),
        arg("--tasks", type=int, default=50, help="number of tasks (default 50)"),
    ],
    common=["seed", "out", "quiet"],
)
def _ablate(args: argparse.Namespace) -> None:
    import torch

    from circle_cil.experiments import run_stream

    data = _load(args)
    tasks = check_int("--tasks", args.tasks, low=1)
    torch.set_num_threads(1)
    print(data.describe(), f"— {tasks} tasks")
    small = data.image_shape[1] < 16
    base: dict[str, Any] = dict(n_reservoirs=8, n_groups=4, units=32 if small else 128)
    variants = [
        ("default (M=8, G=4, SLDA hayes_kanan, leaky-ReLU, pyramid)", {}),
        ("G=1 (one head, all features)", dict(n_groups=1)),
        ("G=2", dict(n_groups=2)),
        ("G=8 (one head per reservoir)", dict(n_groups=8)),
        ("M=1, G=1 (single reservoir)", dict(n_reservoirs=1, n_groups=1)),
        ("head: exact (Welford) SLDA", dict(cov_update="exact")),
        ("head: NCM (shrinkage = 1)", dict(shrinkage=1.0)),
        ("activation tanh", dict(activation="tanh")),
        ("rescale to spectral norm 0.95", dict(rescale="spectral_norm")),
        ("pooling mean", dict(pooling="mean")),
        ("pooling grid", dict(pooling="grid")),
        ("pooling meanmax", dict(pooling="meanmax")),
    ]
    rows = []
    for name, kw in variants:
        r = run_stream(data, tasks, "CIRCLE", seed=args.seed, circle_kw={**base, **kw})
        rows.append({"variant": name, **r})
        if not args.quiet:
            print(f"  {name}: final {r['final_acc']:.4f}", flush=True)
    r = run_stream(data, tasks, "random-conv", seed=args.seed)
    rows.append({"variant": "extractor: random conv + SLDA (hayes_kanan)", **r})
    _print_rows(
        rows,
        [
            ("variant", "variant", ""),
            ("final_acc", "final acc", ".4f"),
            ("avg_inc_acc", "avg inc", ".4f"),
            ("train_seconds", "train s", ".2f"),
        ],
    )
    if args.out:
        atomic_write_json(
            args.out, {"dataset": data.describe(), "tasks": tasks, "rows": rows, "manifest": run_manifest()}
        )


# ---- make-data ------------------------------------------------------------------------------------------
@app.command(
    "make-data",
    help="write GlyphCIL or digits to a .npz file (X_train, y_train, X_test, y_test, class_names)",
    args=[*_DATA_ARGS, arg("--to", required=True, metavar="FILE.npz", help="output file")],
    common=["seed"],
)
def _make_data(args: argparse.Namespace) -> None:
    if Path(args.to).suffix != ".npz":
        raise InputError(f"--to must end in .npz, got {args.to!r}")
    data = _load(args)
    with atomic_path(args.to, mode="wb") as fh:
        np.savez_compressed(
            fh,
            X_train=data.X_train,
            y_train=data.y_train,
            X_test=data.X_test,
            y_test=data.y_test,
            class_names=np.array(data.class_names),
        )
    print(f"wrote {data.describe()} to {args.to}")


# ---- demo / bench / reproduce ---------------------------------------------------------------------------
@app.command(
    "demo",
    help="digits in 5 tasks and GlyphCIL-40 in 20 tasks: CIRCLE vs the baselines (~20 s)",
    common=["seed"],
)
def _demo(args: argparse.Namespace) -> None:
    import torch

    from circle_cil.data import load_dataset
    from circle_cil.experiments import Budget, run_stream

    torch.set_num_threads(1)
    for data, tasks, ckw, budget in (
        (
            load_dataset("digits", seed=args.seed),
            5,
            dict(n_reservoirs=4, n_groups=2, units=32),
            Budget(lwf_epochs=2, frozen_epochs=5, inc_per_class=10**6),
        ),
        (
            load_dataset("glyph", n_classes=40, per_class=15, seed=args.seed),
            20,
            dict(n_reservoirs=4, n_groups=2),
            Budget(lwf_epochs=2, frozen_epochs=5),
        ),
    ):
        print(f"{data.describe()} — {tasks} tasks, cold start, no replay")
        rows = [
            run_stream(data, tasks, m, seed=args.seed, budget=budget, circle_kw=ckw)
            for m in ("CIRCLE", "frozen", "random-conv", "LwF")
        ]
        _print_rows(rows, _COLS)
        print()


@app.command(
    "bench",
    help="the targets in one run: CIRCLE vs LwF and frozen at 50/100 tasks, time ratio, streaming rate",
    args=[
        arg("--quick", action="store_true", help="tiny sizes, seconds"),
        arg("--splits", type=int, nargs="+", default=None, help="task splits (default 50 100)"),
        arg("--no-rate", action="store_true", help="skip the streaming-rate measurement"),
    ],
    common=["seed", "out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    from circle_cil.experiments import bench

    if args.splits and min(args.splits) < 1:
        raise InputError(f"--splits must be positive task counts, got {args.splits}")
    records = bench(
        quick=args.quick, seed=args.seed, quiet=args.quiet, splits=args.splits, rate=not args.no_rate
    )
    print(format_table(records))
    for r in records:
        if "margin_points" in r:
            print(
                f"{r['benchmark']}: CIRCLE - {r['baseline']} = {r['margin_points']:+.2f} points "
                f"(target >= {r['margin_target_points']:+.0f}: {'met' if r['margin_met'] else 'NOT met'}); "
                f"avg inc acc {r['candidate_avg_inc']:.4f} vs {r['baseline_avg_inc']:.4f}"
            )
        if "per_sample_met" in r:
            print(
                f"{r['benchmark']}: {r['baseline_value']:.0f} samples per CPU-second one at a time, "
                f"{r['candidate_value']:.0f} in chunks of 64 (target >= 1000); wall-clock "
                f"{r['baseline_wall_rate']:.0f} and {r['candidate_wall_rate']:.0f} samples/s"
            )
    if args.out:
        write_records(args.out, records)


@app.command(
    "reproduce",
    help="final / average incremental accuracy vs tasks (GlyphCIL-200, digits), the G sweep, training time",
    args=[
        arg("--quick", action="store_true", help="small sizes (under a minute)"),
        arg("--plot", default=None, help="PNG: final accuracy vs number of tasks, and the G sweep"),
    ],
    common=["seed", "out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from circle_cil.experiments import reproduce

    if args.plot and Path(args.plot).suffix.lower() != ".png":
        raise InputError(f"--plot must end in .png, got {args.plot!r}")
    out = reproduce(quick=args.quick, seed=args.seed, quiet=args.quiet)
    print(out["settings"]["dataset"])
    _print_rows(out["glyph"], _COLS)
    print(out["settings"]["digits"])
    _print_rows(out["digits"], _COLS)
    print(f"G sweep at {out['settings']['sweep_tasks']} tasks (final accuracy, mean ± sd over seeds)")
    _print_rows(
        out["g_sweep"], [("M", "M", "d"), ("G", "G", "d"), ("mean", "mean", ".4f"), ("sd", "sd", ".4f")]
    )
    times = {}
    for r in out["glyph"]:
        times.setdefault(r["n_tasks"], {})[r["method"]] = r["train_cpu_seconds"]
    for n, t in times.items():
        if "LwF" in t and "CIRCLE" in t:
            print(f"train CPU time at {n} tasks: LwF / CIRCLE = {t['LwF'] / t['CIRCLE']:.1f}x")
    if args.out:
        atomic_write_json(args.out, {**out, "quick": args.quick, "manifest": run_manifest()})
    if args.plot:
        _plot(out, args.plot)


def _plot(out: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is a dependency (fonts)
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    methods = sorted({r["method"] for r in out["glyph"]})
    for m in methods:
        rows = [r for r in out["glyph"] if r["method"] == m]
        if m == "joint":
            a1.axhline(rows[0]["final_acc"], color="k", ls=":", label="joint (upper bound)")
            continue
        a1.plot([r["n_tasks"] for r in rows], [r["final_acc"] for r in rows], "o-", label=m)
    a1.set(
        xscale="log", xlabel="number of tasks", ylabel="final accuracy", title=out["settings"]["dataset"][:40]
    )
    a1.legend(fontsize=8)
    g = out["g_sweep"]
    a2.errorbar([r["G"] for r in g], [r["mean"] for r in g], yerr=[r["sd"] for r in g], fmt="o-")
    a2.set(
        xscale="log",
        xlabel=f"G (groups) for M = {g[0]['M']}",
        ylabel="final accuracy",
        title="bias-variance sweep",
    )
    fig.tight_layout()
    with atomic_path(path, mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)
    print(f"plot written to {path}")


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
