"""The ``rank-reliability`` command line: analyze, select, cohorts, make-matrix, demo, bench, reproduce."""

from __future__ import annotations

import argparse
import io
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from papershelf.bench import format_table, write_records
from papershelf.cli import App, arg
from papershelf.errors import InputError, check_int
from papershelf.repro import atomic_path, atomic_write_json, atomic_write_text, run_manifest

from . import __version__
from .analysis import analyze, cohort_reliability
from .classical import lambda6_star
from .components import variance_components
from .matrix import check_matrix, read_matrix
from .selection import DEFAULT_METHOD, METHODS, select_items

app = App(
    "rank-reliability",
    __version__,
    "Benchmark reliability as signal-to-noise: variance components, rank concordance, λ★6 item selection.",
)

MATRIX_ARGS = [
    arg("--matrix", required=True, help="models × items scores: .npy (NaN = missing) or .csv"),
    arg("--drop-constant", action="store_true", help="drop items that are constant across models"),
]


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.{digits}f}"


def _positive(name: str, value: int, low: int = 1) -> int:
    return check_int(name, value, low=low)


def _check_out(path: str | None, suffixes: tuple[str, ...]) -> None:
    if path is not None and Path(path).suffix.lower() not in suffixes:
        raise InputError(f"--out {path!r} must end in {' or '.join(suffixes)}")


# ---- analyze -------------------------------------------------------------------------------------
@app.command(
    "analyze",
    help="variance components, SNR/ρ by item count, α/KR-20/λ6/λ★6, split-half concordance",
    args=[*MATRIX_ARGS, arg("--splits", type=int, default=200, help="split-half resamples (default 200)")],
    common=["seed", "out", "quiet"],
)
def _analyze(args: argparse.Namespace) -> None:
    _check_out(args.out, (".json",))
    _positive("--splits", args.splits)
    m = read_matrix(args.matrix)
    rep = analyze(m.values, n_splits=args.splits, seed=args.seed, drop_constant=args.drop_constant)
    d = rep.as_dict()
    vc = rep.components
    print(
        f"matrix        {d['n_models']} models × {d['n_items']} items ({'0/1' if d['binary'] else 'scores'})"
    )
    print(f"components    σ²_M {vc.model:.5g}   σ²_I {vc.item:.5g}   σ²_E {vc.residual:.5g}")
    print(f"reliability   SNR {_fmt(d['snr'], 2)}   ρ {_fmt(d['rho'])}   Φ {_fmt(d['phi'])}")
    print(
        f"E[τ] vs truth {_fmt(d['expected_kendall_true'])}   "
        f"items for ρ = 0.9: {_fmt(d['items_for_rho_0.9'], 1)}"
    )
    c = d["classical"]
    print(
        f"classical     α {_fmt(c['alpha'])}   KR-20 {_fmt(c['kr20'])}   λ6 {_fmt(c['lambda6'])}   "
        f"λ★6 {_fmt(c['lambda6_star_rest'])} (pinv variant {_fmt(c['lambda6_star_pinv'])})"
    )
    s = d["split_half"]
    print(
        f"split-half    τ {s['mean_kendall']:.4f} (predicted {s['predicted_kendall']:.4f})   "
        f"Spearman {s['mean_spearman']:.4f} (predicted {s['predicted_spearman']:.4f})   "
        f"discordant pairs {s['mean_discordance']:.4f} (predicted {s['predicted_discordance']:.4f})"
    )
    if not args.quiet:
        print("\n  items      SNR        ρ     E[τ]  E[Spearman]")
        cur = d["curve"]
        for i, n in enumerate(cur["n_items"]):
            print(
                f"  {n:>5.0f} {_fmt(cur['snr'][i], 2):>8} {cur['rho'][i]:8.4f} {cur['kendall'][i]:8.4f} "
                f"{cur['spearman'][i]:12.4f}"
            )
        for note in d["notes"]:
            print(f"note: {note}")
    if args.out:
        atomic_write_json(args.out, {**d, "matrix": str(args.matrix), "manifest": run_manifest()})


# ---- select --------------------------------------------------------------------------------------
@app.command(
    "select",
    help="choose a fixed budget of items (λ★6 greedy variants, item–rest, random, stratified, IRT info)",
    args=[
        *MATRIX_ARGS,
        arg("--budget", type=int, required=True, help="number of items to keep"),
        arg(
            "--method",
            choices=METHODS,
            default=DEFAULT_METHOD,
            help=f"selection rule (default {DEFAULT_METHOD})",
        ),
    ],
    common=["seed", "out"],
)
def _select(args: argparse.Namespace) -> None:
    _check_out(args.out, (".json", ".npy", ".txt"))
    m = read_matrix(args.matrix)
    arr, _ = check_matrix(m.values, allow_missing=False, drop_constant=args.drop_constant)
    picked = select_items(
        m.values, args.budget, method=args.method, seed=args.seed, drop_constant=args.drop_constant
    )
    names = [m.items[i] for i in picked] if m.items else None
    sub = m.values[:, picked]
    full_vc = variance_components(arr)
    sub_l6 = lambda6_star(sub, drop_constant=True)
    print(f"selected {picked.size} of {arr.shape[1]} items by {args.method}")
    print(f"λ★6 of the subset {sub_l6:.4f}   (all items {lambda6_star(arr):.4f})")
    print(
        f"ρ of a random {picked.size}-item subset, from the components: "
        f"{full_vc.g_coefficient(picked.size):.4f}"
    )
    print("items:", " ".join(names if names else map(str, picked.tolist())))
    if args.out:
        suffix = Path(args.out).suffix.lower()
        if suffix == ".npy":
            with atomic_path(args.out, mode="wb") as handle:
                np.save(handle, picked.astype(np.int64))
        elif suffix == ".txt":
            atomic_write_text(args.out, "\n".join(names if names else map(str, picked.tolist())) + "\n")
        else:
            atomic_write_json(
                args.out,
                {
                    "method": args.method,
                    "budget": int(picked.size),
                    "indices": picked.tolist(),
                    "items": names,
                    "lambda6_star_subset": sub_l6,
                    "matrix": str(args.matrix),
                    "manifest": run_manifest(seed=args.seed),
                },
            )


# ---- cohorts -------------------------------------------------------------------------------------
def _print_cohorts(c: dict[str, Any]) -> None:
    print(
        f"{'cohort':<14}{'models':>7}{'mean':>8}{'σ²_M':>10}{'σ²_E':>9}{'ρ(I)':>9}{'λ★6':>9}"
        f"{'E[τ] half':>11}{'τ half':>9}"
    )
    for name in ("all", "lower", "higher"):
        r = c[name]
        print(
            f"{name:<14}{r['n_models']:>7}{r['mean_score']:>8.3f}{r['components']['model']:>10.5f}"
            f"{r['components']['residual']:>9.4f}{r['rho']:>9.4f}{_fmt(r['lambda6_star']):>9}"
            f"{r['expected_kendall']:>11.4f}{_fmt(r['split_half_kendall']):>9}"
        )
    r = c["random_half"]
    print(
        f"{'random half':<14}{c['lower']['n_models']:>7}{r['mean_score']:>8.3f}"
        f"{r['components']['model']:>10.5f}"
        f"{r['components']['residual']:>9.4f}{r['rho']:>9.4f}{_fmt(r.get('lambda6_star')):>9}"
        f"{r['expected_kendall']:>11.4f}{_fmt(r.get('split_half_kendall')):>9}"
        f"   (mean of {r['n_random']} random halves)"
    )


@app.command(
    "cohorts",
    help="reliability in the lower- and higher-performing halves of the models",
    args=[*MATRIX_ARGS],
    common=["seed", "out"],
)
def _cohorts(args: argparse.Namespace) -> None:
    _check_out(args.out, (".json",))
    m = read_matrix(args.matrix)
    c = cohort_reliability(m.values, seed=args.seed, drop_constant=args.drop_constant)
    _print_cohorts(c)
    if args.out:
        atomic_write_json(args.out, {**c, "matrix": str(args.matrix), "manifest": run_manifest()})


# ---- make-matrix ---------------------------------------------------------------------------------
@app.command(
    "make-matrix",
    help="build a response matrix: ~60 scikit-learn models on digits test items (needs [bench])",
    args=[
        arg("--dataset", choices=("digits",), default="digits"),
        arg("--out", required=True, metavar="FILE", help="output .npy or .csv (models × items, 0/1)"),
        arg("--no-cache", action="store_true", help="rebuild even when a cached copy exists"),
    ],
    common=["quiet"],
)
def _make_matrix(args: argparse.Namespace) -> None:
    from .data import digits_matrix

    _check_out(args.out, (".npy", ".csv"))
    D = digits_matrix(cache=not args.no_cache, quiet=args.quiet)
    if Path(args.out).suffix.lower() == ".npy":
        with atomic_path(args.out, mode="wb") as handle:
            np.save(handle, D.X)
    else:
        buf = io.StringIO()
        buf.write("model," + ",".join(f"item{int(i)}" for i in D.items) + "\n")
        for name, row in zip(D.models, D.X):
            buf.write(f'"{name}",' + ",".join(str(int(v)) for v in row) + "\n")
        atomic_write_text(args.out, buf.getvalue())
    acc = D.X.mean(axis=1)
    print(
        f"digits: {D.X.shape[0]} models × {D.X.shape[1]} items (of {D.n_test} test images; "
        f"{D.n_constant_dropped} answered right by every model dropped); "
        f"accuracy {acc.min():.3f}–{acc.max():.3f}"
    )
    print(f"wrote {args.out}")


# ---- demo / bench / reproduce --------------------------------------------------------------------
@app.command("demo", help="a 10-second tour on a simulated 2PL benchmark (numpy only)", common=["seed"])
def _demo(args: argparse.Namespace) -> None:
    from .data import simulate_2pl, twopl_components
    from .selection import selection_stability

    X = simulate_2pl(60, 600, log_a_sd=0.5, seed=args.seed).X
    X = X[:, X.min(axis=0) < X.max(axis=0)]
    truth = twopl_components(log_a_sd=0.5)
    rep = analyze(X, n_splits=100, seed=args.seed)
    vc = rep.components
    print(f"simulated 2PL benchmark: {X.shape[0]} models × {X.shape[1]} items (right/wrong)\n")
    print(f"{'component':<12}{'estimated':>11}{'generator':>11}")
    for k in ("model", "item", "residual"):
        print(f"{k:<12}{getattr(vc, k):>11.4f}{truth[k]:>11.4f}")
    s = rep.split
    print(
        f"\nreliability ρ({X.shape[1]}) = {vc.g_coefficient():.4f}, α = {rep.classical['alpha']:.4f}, "
        f"λ★6 = {rep.classical['lambda6_star_rest']:.4f} (λ6 undefined: more items than models)"
    )
    print(
        f"split-half Kendall τ {s.mean_kendall:.4f}, "
        f"predicted from the components {s.predicted_kendall:.4f}\n"
    )
    taus = selection_stability(
        X, 60, methods=(DEFAULT_METHOD, "lambda6_star", "random", "irt_info"), n_draws=5, seed=args.seed
    )
    print("60-item subsets, rank agreement with held-out items (5 draws):")
    print(f"{'method':<18}{'Kendall τ':>10}{'discordant pairs':>18}")
    for name, t in taus.items():
        print(f"{name:<18}{np.mean(t):>10.4f}{np.mean((1 - t) / 2):>18.4f}")


@app.command(
    "bench",
    help="issue targets: λ★6 vs random / IRT selection on digits (budget 100), 100×10,000 analysis time",
    args=[
        arg("--quick", action="store_true", help="tiny simulated sizes, seconds"),
        arg("--draws", type=int, default=None, help="random draws (default 100; quick: 3)"),
    ],
    common=["seed", "out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    from .experiments import bench

    _check_out(args.out, (".json",))
    if args.draws is not None:
        _positive("--draws", args.draws)
    records = bench(quick=args.quick, draws=args.draws, seed=args.seed, quiet=args.quiet)
    print(format_table(records))
    if args.out:
        write_records(args.out, records)


@app.command(
    "reproduce",
    help="components vs concordance, cohorts, selection at budgets 50/100/150 (needs [bench])",
    args=[
        arg("--quick", action="store_true", help="smaller simulator, one budget"),
        arg("--draws", type=int, default=20, help="random draws per setting (default 20)"),
        arg("--plot", default=None, metavar="FILE.png", help="figure (needs matplotlib)"),
    ],
    common=["seed", "out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from .experiments import reproduce

    _check_out(args.out, (".json",))
    if args.plot is not None and Path(args.plot).suffix.lower() != ".png":
        raise InputError(f"--plot {args.plot!r} must end in .png")
    _positive("--draws", args.draws, low=2)
    out = reproduce(quick=args.quick, draws=args.draws, seed=args.seed, quiet=args.quiet)
    _print_reproduce(out)
    if args.out:
        atomic_write_json(args.out, {**out, "manifest": run_manifest(seed=args.seed)})
    if args.plot:
        _plot(out, args.plot)


def _print_reproduce(out: dict[str, Any]) -> None:
    c = out["crossed_missing20"]
    print("\nGaussian crossed effects, 300 × 400, 20% missing: σ²_M σ²_I σ²_E")
    print(f"  realised   {'  '.join(f'{v:.4f}' for v in c['true_realised'])}")
    print(f"  estimated  {'  '.join(f'{v:.4f}' for v in c['estimated'])}")
    t = out["twopl"]
    print(f"\n2PL simulator {t['shape'][0]} × {t['shape'][1]}: population vs estimated components")
    for k in ("model", "item", "residual"):
        print(f"  {k:<9}{t['true_population'][k]:>9.4f}{t['estimated'][k]:>9.4f}")
    for name, rows in (("2PL", t["concordance"]), ("digits", out["digits"]["concordance"])):
        print(f"\n{name}: Kendall τ between disjoint random item sets of n items, predicted vs observed")
        for r in rows:
            print(
                f"  n={r['n_items']:>4}  ρ {r['rho']:.4f}  predicted {r['predicted_kendall']:.4f}  "
                f"observed {r['mean_kendall']:.4f} ± {r['se_kendall']:.4f}"
            )
    a = out["digits"]["analysis"]
    print(
        f"\ndigits {a['n_models']} × {a['n_items']}: σ²_M {a['components']['model']:.4f} "
        f"σ²_I {a['components']['item']:.4f} σ²_E {a['components']['residual']:.4f}  ρ {a['rho']:.4f}  "
        f"α {a['classical']['alpha']:.4f}  λ★6 {a['classical']['lambda6_star_rest']:.4f}"
    )
    for name in ("digits", "twopl"):
        print(f"\ncohorts ({name}):")
        _print_cohorts(out["cohorts"][name])
    print(f"\nselection: mean discordant-pair rate (1 − τ)/2 over {out['draws']} draws")
    for data, settings in out["selection"].items():
        for setting, s in settings.items():
            row = "  ".join(f"{m} {v['mean_discordance']:.4f}" for m, v in s.items())
            ratio = s[DEFAULT_METHOD]["mean_discordance"] / s["random"]["mean_discordance"]
            print(f"  {data:<7}{setting:<20}{row}   {DEFAULT_METHOD}/random {ratio:.2f}")
    prof = out.get("selection_profile", {}).get("digits_b100")
    if prof:
        n_items = out["digits"]["analysis"]["n_items"]
        print(f"\nwhat each rule picks from all {n_items} digits items (budget 100):")
        print(
            f"  {'method':<19}{'difficulty spread':>18}{'mean item':>10}{'distinct totals':>16}"
            f"{'own λ★6':>9}{'r(subset, rest)':>16}"
        )
        for m, v in prof.items():
            print(
                f"  {m:<19}{v['difficulty_spread']:>18.3f}{v['mean_item_score']:>10.3f}"
                f"{v['distinct_scores']:>16d}{v['lambda6_star']:>9.4f}{v['rest_correlation']:>16.4f}"
            )


def _plot(out: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'rank-reliability[plots]')", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    for name, rows in (("2PL", out["twopl"]["concordance"]), ("digits", out["digits"]["concordance"])):
        n = [r["n_items"] for r in rows]
        ax.plot(n, [r["predicted_kendall"] for r in rows], "-", label=f"{name}: (2/π) arcsin ρ(n)")
        ax.errorbar(
            n,
            [r["mean_kendall"] for r in rows],
            yerr=[2 * r["se_kendall"] for r in rows],
            fmt="o",
            label=f"{name}: observed",
        )
    ax.set(xscale="log", xlabel="items per leaderboard (n)", ylabel="Kendall τ between disjoint item sets")
    ax.legend(fontsize=8)
    ax = axes[1]
    digits = out["selection"]["digits"]
    budgets = sorted(int(k.split("_b")[1]) for k in digits if k.startswith("heldout_items"))
    for method in digits[f"heldout_items_b{budgets[0]}"]:
        ax.plot(
            budgets,
            [digits[f"heldout_items_b{b}"][method]["mean_discordance"] for b in budgets],
            "o-",
            label=method,
        )
    ax.set(xlabel="budget (items)", ylabel="discordant-pair rate vs held-out items", title="digits")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path, mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
