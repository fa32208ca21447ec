"""The ``fair-class-matching`` command line: ``run`` an algorithm on an instance file, ``generate``
instances, ``sweep`` γ, print the ``bounds``, and ``demo`` / ``bench`` / ``reproduce``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fair_class_matching import __version__, bounds, metrics
from fair_class_matching.data import (
    FAMILIES,
    PARTITIONS,
    block_classes,
    random_gnp,
    ride_sharing,
    upper_triangular,
)
from fair_class_matching.instance import load
from fair_class_matching.matching import PHASE1_RULES
from papershelf.bench import format_table, write_records
from papershelf.cli import App, arg
from papershelf.errors import InputError, check_int, check_number
from papershelf.repro import atomic_write_json, run_manifest

app = App(
    "fair-class-matching",
    __version__,
    "γ-threshold algorithms for fair (class envy-free) and efficient online bipartite matching.",
)


def _gamma(args: argparse.Namespace) -> float:
    return check_number("gamma", args.gamma, low=0, high=1)


def _print_rows(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> None:
    """Print rows as an aligned table; ``columns`` = (key, header, format); text columns align left."""
    cells = [
        [r.get(k, "") if isinstance(r.get(k, ""), str) else format(r[k], fmt) for k, _, fmt in columns]
        for r in rows
    ]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    text = [isinstance(rows[0].get(k, ""), str) if rows else False for k, _, _ in columns]

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) if t else v.rjust(w) for v, w, t in zip(values, widths, text)).rstrip()

    print(line([h for _, h, _ in columns]))
    for c in cells:
        print(line(c))


# ---- run -------------------------------------------------------------------------------------------
@app.command(
    "run",
    help="run one online algorithm on an instance file (.json or .npz) and report CEF, USW and OPT",
    args=[
        arg("--instance", required=True, help="instance file (.json or .npz; see `generate`)"),
        arg("--gamma", type=float, default=0.5, help="threshold γ in [0, 1] (default 0.5)"),
        arg(
            "--algorithm",
            choices=None,
            default="threshold",
            help="threshold (default), threshold-indivisible, water-filling, equal-filling, ranking, greedy",
        ),
        arg(
            "--phase1", choices=PHASE1_RULES, default="equal", help="phase-1 rule of the divisible algorithm"
        ),
        arg("--check-lp", action="store_true", help="also compute the class values by LP and compare"),
    ],
    common=["seed", "out"],
)
def _run(args: argparse.Namespace) -> None:
    from fair_class_matching.experiments import ALGORITHMS, run_algorithm

    gamma = _gamma(args)
    if args.algorithm not in ALGORITHMS:
        raise InputError(f"--algorithm must be one of {', '.join(ALGORITHMS)}; got {args.algorithm!r}")
    inst = load(args.instance)
    alloc = run_algorithm(args.algorithm, inst, gamma=gamma, seed=args.seed, phase1=args.phase1, audit=True)
    result = metrics.evaluate(alloc)
    print(inst.describe())
    print(f"algorithm      {alloc.algorithm}")
    print(f"USW            {result['usw']:.6g}   (OPT {result['opt']:.6g}, ratio {result['usw_ratio']:.4f})")
    print(f"CEF            {result['cef']:.4f}")
    if args.algorithm in ("threshold", "threshold-indivisible"):
        cef_g = bounds.alg_cef(gamma) if args.algorithm == "threshold" else bounds.indivisible_cef(gamma)
        kind = "" if args.algorithm == "threshold" else " (ex ante, over the randomness)"
        print(
            f"guarantees     CEF >= {cef_g:.4f}{kind}, USW/OPT >= {bounds.alg_usw(gamma):.4f}"
            + ("" if inst.unit_values else "  [stated for unit item values]")
        )
    audit = alloc.audit
    print(f"non-wasteful   {'yes' if audit.ok else 'NO'} after every one of {audit.arrivals} arrivals")
    for v in audit.violations[:5]:
        print(f"  {v}")
    names = inst.class_names
    print("class values v_i(X_j) (row i = class, column j = bundle):")
    for i, row in enumerate(result["class_values"]):
        print(f"  {names[i]:>12}  " + "  ".join(f"{v:9.4f}" for v in row))
    if args.check_lp:
        lp = metrics.class_values(alloc, method="lp")
        diff = float(np.abs(lp - np.array(result["class_values"])).max())
        print(f"max |max-flow - LP| over class values: {diff:.2e}")
    if args.out:
        atomic_write_json(
            args.out,
            {
                **result,
                "instance": str(args.instance),
                "gamma": gamma,
                "seed": args.seed,
                "loads": alloc.loads.tolist(),
                "assignments": [
                    [[int(a), float(x)] for a, x in zip(*_split(alloc, t))] for t in range(inst.n_items)
                ],
                "manifest": run_manifest(),
            },
        )


def _split(alloc, t: int):
    a = alloc.assignment(t)
    return a.agents.tolist(), a.amounts.tolist()


# ---- generate --------------------------------------------------------------------------------------
@app.command(
    "generate",
    help="write a generated instance to a .json or .npz file",
    args=[
        arg("--family", choices=FAMILIES, default="upper-triangular"),
        arg("--n", type=int, default=50, help="number of agents (and items)"),
        arg("--classes", type=int, default=2, help="number of classes (default 2)"),
        arg("--partition", choices=PARTITIONS, default="blocks", help="upper-triangular class partition"),
        arg("--p", type=float, default=None, help="edge probability of gnp (default 3/n)"),
        arg("--fares", action="store_true", help="ride-sharing: item values = 1 + trip length"),
        arg("--out", required=True, metavar="FILE", help="instance file to write (.json or .npz)"),
    ],
    common=["seed"],
)
def _generate(args: argparse.Namespace) -> None:
    n = check_int("--n", args.n, low=2)
    k = check_int("--classes", args.classes, low=1, high=n)
    if Path(args.out).suffix not in (".json", ".npz"):
        raise InputError(f"--out must end in .json or .npz, got {args.out!r}")
    if args.family == "upper-triangular":
        inst = upper_triangular(n, k, partition=args.partition, seed=args.seed)
    elif args.family == "gnp":
        inst = random_gnp(n, n, 3.0 / n if args.p is None else args.p, k=k, seed=args.seed)
    elif args.family == "block":
        inst = block_classes(k, max(1, n // k), seed=args.seed)
    else:
        inst = ride_sharing(n, n, k=k, fares=args.fares, seed=args.seed)
    inst.save(args.out)
    print(f"wrote {inst.describe()} to {args.out}")


# ---- sweep -----------------------------------------------------------------------------------------
@app.command(
    "sweep",
    help="the divisible γ-threshold algorithm over a γ grid on one family: CEF and USW/OPT vs guarantees",
    args=[
        arg("--family", choices=FAMILIES, default="upper-triangular"),
        arg("--n", type=int, default=100, help="instance size (default 100)"),
        arg(
            "--classes", type=int, default=None, help="number of classes (default: drawn from the seed, 2-4)"
        ),
        arg("--partition", choices=PARTITIONS, default=None, help="upper-triangular class partition"),
        arg("--instances", type=int, default=1, help="instances (seeds seed, seed+1, ...) per γ (default 1)"),
        arg("--gammas", default="0,0.25,0.5,0.75,1", help="comma-separated γ values"),
        arg("--phase1", choices=PHASE1_RULES, default="equal", help="phase-1 rule (default equal)"),
    ],
    common=["seed", "out"],
)
def _sweep(args: argparse.Namespace) -> None:
    from fair_class_matching.experiments import parse_gammas, sweep

    gammas = parse_gammas(args.gammas)
    n = check_int("--n", args.n, low=2, high=100_000)
    reps = check_int("--instances", args.instances, low=1)
    options: dict[str, Any] = {}
    if args.classes is not None:
        options["k"] = check_int("--classes", args.classes, low=1, high=n)
    if args.partition is not None:
        if args.family != "upper-triangular":
            raise InputError("--partition applies to --family upper-triangular only")
        options["partition"] = args.partition
    rows = sweep(args.family, n, gammas, instances=reps, seed=args.seed, options=options, phase1=args.phase1)
    print(
        f"family {args.family}, n = {n}, {reps} instance(s) per γ (seed {args.seed}), phase 1 {args.phase1!r}"
    )
    _print_rows(
        rows,
        [
            ("gamma", "γ", ".2f"),
            ("min_cef", "min CEF", ".4f"),
            ("cef_bound", "1-e^-γ", ".4f"),
            ("min_usw_ratio", "min USW/OPT", ".4f"),
            ("usw_bound", "1-e^(γ-1)/(γ+1)", ".4f"),
        ],
    )
    if args.out:
        atomic_write_json(args.out, {"family": args.family, "n": n, "rows": rows, "manifest": run_manifest()})


# ---- bounds ----------------------------------------------------------------------------------------
@app.command(
    "bounds",
    help="print the guarantees and the impossibility frontier for a γ grid",
    args=[arg("--gammas", default="0,0.25,0.5,0.75,1", help="comma-separated γ values")],
)
def _bounds(args: argparse.Namespace) -> None:
    from fair_class_matching.experiments import parse_gammas

    rows = bounds.guarantee_table(parse_gammas(args.gammas))
    _print_rows(
        rows,
        [
            ("gamma", "γ", ".2f"),
            ("cef", "CEF 1-e^-γ", ".4f"),
            ("usw", "USW", ".4f"),
            ("indivisible_cef", "indiv. CEF γ/2", ".4f"),
            ("upper_usw_at_cef", "frontier(α=CEF)", ".4f"),
            ("prior_upper_usw_at_cef", "1/(1+α)", ".4f"),
        ],
    )


# ---- demo / bench / reproduce ----------------------------------------------------------------------
@app.command("demo", help="a few-second tour: every algorithm on two built-in instances", common=["seed"])
def _demo(args: argparse.Namespace) -> None:
    from fair_class_matching.experiments import compare_algorithms

    for inst in (
        upper_triangular(80, 2, partition="blocks", seed=args.seed),
        ride_sharing(60, 60, k=3, seed=args.seed),
    ):
        print(inst.describe())
        rows = compare_algorithms(inst, gammas=(0.0, 0.5, 1.0), seeds=10)
        _print_rows(
            rows, [("algorithm", "algorithm", ""), ("cef", "CEF", ".3f"), ("usw_ratio", "USW/OPT", ".3f")]
        )
        print()
    print(
        f"guarantees at γ = 0.5: CEF >= {bounds.alg_cef(0.5):.3f}, USW/OPT >= {bounds.alg_usw(0.5):.3f} "
        f"(divisible); CEF >= {bounds.indivisible_cef(0.5):.3f} ex ante (indivisible)"
    )


@app.command(
    "bench",
    help="γ = 0.5 against EQUAL-FILLING on upper-triangular n = 200, throughput, max-flow vs LP",
    args=[arg("--quick", action="store_true", help="tiny sizes, seconds")],
    common=["seed", "out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    from fair_class_matching.experiments import bench

    records = bench(quick=args.quick, seed=args.seed, quiet=args.quiet)
    print(format_table(records))
    for r in records:
        if "candidate_cef" in r:
            print(
                f"{r['benchmark']}: CEF {r['candidate']} {r['candidate_cef']:.4f}, "
                f"{r['baseline']} {r['baseline_cef']:.4f}"
            )
        if "items_per_second" in r:
            rate, count = r["items_per_second"], r["arrivals_timed"]
            print(f"{r['benchmark']}: {rate:,.0f} arrivals/s over {count:,} arrivals")
            print(
                f"{r['benchmark']}: the event simulation of the same rule takes "
                f"{r['event_simulation_ratio']:.2f}x the closed form's time "
                f"({r['event_simulation_items']:,} items)"
            )
        if "max_abs_difference" in r:
            print(f"{r['benchmark']}: max |max-flow - LP| = {r['max_abs_difference']:.2e}")
    if args.out:
        write_records(args.out, records)


@app.command(
    "reproduce",
    help="guarantees over ≥ 200 generated instances per γ, indivisible ex-ante CEF, upper-triangular table",
    args=[
        arg("--quick", action="store_true", help="a few instances per family"),
        arg("--plot", default=None, help="PNG of (CEF, USW/OPT) points against the guarantee and frontier"),
    ],
    common=["seed", "out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from fair_class_matching.experiments import reproduce

    if args.plot and Path(args.plot).suffix.lower() != ".png":
        raise InputError(f"--plot must end in .png, got {args.plot!r}")
    out = reproduce(quick=args.quick, seed=args.seed, quiet=args.quiet)
    div = out["divisible"]
    print(
        f"divisible γ-threshold on {out['settings']['instances_per_gamma']} instances per γ "
        f"({', '.join(out['settings']['families'])}; sizes {out['settings']['sizes']})"
    )
    _print_rows(
        div["rows"],
        [
            ("gamma", "γ", ".2f"),
            ("min_cef", "min CEF", ".4f"),
            ("cef_bound", "1-e^-γ", ".4f"),
            ("cef_violations", "viol.", "d"),
            ("min_usw_ratio", "min USW/OPT", ".4f"),
            ("usw_bound", "bound", ".4f"),
            ("usw_violations", "viol.", "d"),
        ],
    )
    print(f"non-wasteful after every arrival: {'yes' if div['non_wasteful_every_arrival'] else 'NO'}")
    print("baselines (same instances):")
    _print_rows(
        div["baselines"],
        [
            ("algorithm", "algorithm", ""),
            ("min_cef", "min CEF", ".4f"),
            ("min_usw_ratio", "min USW/OPT", ".4f"),
        ],
    )
    s = out["settings"]
    print(
        f"\nindivisible γ-threshold (ex-ante CEF over {s['indivisible_seeds']} seeds, "
        f"{s['indivisible_instances']} instances; the worst re-run with "
        f"{out['indivisible'][0]['confirm_seeds']} fresh seeds)"
    )
    _print_rows(
        out["indivisible"],
        [
            ("gamma", "γ", ".2f"),
            ("min_ex_ante_cef", "min ex-ante CEF", ".4f"),
            ("its_se", "SE", ".4f"),
            ("confirmed_cef", "confirmed", ".4f"),
            ("confirmed_se", "SE", ".4f"),
            ("cef_bound", "γ/2", ".4f"),
            ("below_bound_beyond_3se", "below-3SE", "d"),
            ("min_mean_usw_ratio", "min E[USW]/OPT", ".4f"),
            ("usw_bound", "bound", ".4f"),
        ],
    )
    for name, rows in out["comparisons"].items():
        print(f"\n{name}")
        _print_rows(
            rows, [("algorithm", "algorithm", ""), ("cef", "CEF", ".4f"), ("usw_ratio", "USW/OPT", ".4f")]
        )
    if args.out:
        atomic_write_json(args.out, {**out, "quick": args.quick, "manifest": run_manifest()})
    if args.plot:
        _plot(out, args.plot)


def _plot(out: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "matplotlib is not installed: no plot (pip install 'fair-class-matching[plots]')", file=sys.stderr
        )
        return
    from papershelf.repro import atomic_path

    fig, ax = plt.subplots(figsize=(9, 4.8))
    g = np.linspace(0, 1, 201)
    ax.plot(bounds.alg_cef(g), bounds.alg_usw(g), "k-", label="guarantee (1-e^-γ, 1-e^(γ-1)/(γ+1))")
    ax.plot(g, bounds.upper_usw(g), "r--", label="frontier (1+α-e^(α-1))/(1+α)")
    ax.plot(g, np.minimum(bounds.prior_upper_usw(g), 1.0), "r:", alpha=0.6, label="prior bound 1/(1+α)")
    colours = plt.get_cmap("viridis")
    for idx, row in enumerate(out["divisible"]["rows"]):
        pts = np.array(out["points"][f"threshold(γ={row['gamma']:g})"])
        c = colours(idx / max(len(out["divisible"]["rows"]) - 1, 1))
        ax.scatter(pts[:, 0], pts[:, 1], s=4, color=c, alpha=0.25)
        ax.scatter(
            [row["min_cef"]],
            [row["min_usw_ratio"]],
            s=60,
            color=c,
            edgecolor="k",
            label=f"γ={row['gamma']:g}: worst (CEF, USW/OPT)",
        )
    for row, marker in zip(out["divisible"]["baselines"], ("s", "D", "^")):
        ax.scatter(
            [row["min_cef"]],
            [row["min_usw_ratio"]],
            marker=marker,
            s=50,
            facecolor="none",
            edgecolor="k",
            label=f"{row['algorithm']}: worst",
        )
    ax.set(xlabel="CEF", ylabel="USW / OPT", xlim=(-0.02, 1.02), ylim=(0.4, 1.02))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    with atomic_path(path, mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=120)
    plt.close(fig)
    print(f"plot written to {path}")


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
