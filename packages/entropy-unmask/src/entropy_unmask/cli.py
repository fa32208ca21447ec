"""The ``entropy-unmask`` command line: ``sweep`` and ``sample`` on a family or your own joint table, and
``demo`` / ``bench`` / ``reproduce``."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from entropy_unmask import __version__
from entropy_unmask.baselines import SCHEDULES, make_schedule
from entropy_unmask.data import FAMILIES, Joint, joint_from_table, make_family
from papershelf.bench import format_table, write_records
from papershelf.cli import App, arg, read_npy
from papershelf.errors import InputError, check_int
from papershelf.repro import atomic_path, atomic_write_json, check_output_path, check_outputs, run_manifest

app = App(
    "entropy-unmask",
    __version__,
    "Entropy-sum confidence-based unmasking for masked diffusion LMs, with exact KL and iteration analysis.",
)

TARGET_ARGS = [
    arg("--family", choices=sorted(FAMILIES), default="markov", help="target family (default: markov)"),
    arg("--joint", default=None, metavar="TABLE.npy", help="your own joint: a (V,)*L table summing to 1"),
    arg("--L", type=int, default=8, help="sequence length (default 8)"),
    arg("--V", type=int, default=4, help="vocabulary size (default 4)"),
]


def _target(args: argparse.Namespace) -> Joint:
    if args.joint:
        path = Path(args.joint)
        table = read_npy(args.joint, "--joint")
        try:
            return joint_from_table(table, name=path.stem)
        except InputError as exc:
            raise InputError(f"--joint {args.joint!r}: {exc}") from None
    return make_family(args.family, args.L, args.V, seed=args.seed)


def _floats(text: str, name: str) -> tuple[float, ...]:
    """Comma-separated numbers, or ``geom:START:STOP:N`` for N geometrically spaced values."""
    if text.startswith("geom:"):
        parts = text.split(":")[1:]
        try:
            start, stop, count = float(parts[0]), float(parts[1]), int(parts[2])
        except (ValueError, IndexError):
            raise InputError(f"{name} must look like geom:START:STOP:N, got {text!r}") from None
        if len(parts) != 3 or not (0 < start <= stop < math.inf) or not 1 <= count <= 10_000:
            raise InputError(
                f"{name}: geom:START:STOP:N needs 0 < START <= STOP < inf and 1 <= N <= 10000, got {text!r}"
            )
        return tuple(float(f"{v:.4g}") for v in np.geomspace(start, stop, count))
    try:
        vals = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"{name} must be a comma-separated list of numbers, got {text!r}") from None
    if not vals:
        raise InputError(f"{name} is empty")
    return vals


def _schedule_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    if args.schedule.startswith("entropy-sum") and args.no_crossing:
        return {"include_crossing": False}
    if args.no_crossing:
        raise InputError("--no-crossing applies to the entropy-sum schedules only")
    return {}


SCHEDULE_ARGS = [
    arg("--schedule", choices=SCHEDULES, default="entropy-sum", help="unmasking rule (default: entropy-sum)"),
    arg("--no-crossing", action="store_true", help="entropy-sum: stop before the token that crosses eta"),
]


@app.command(
    "sweep",
    help="exact KL(p||q) and expected iterations of a rule over its parameter values",
    args=[
        *TARGET_ARGS,
        *SCHEDULE_ARGS,
        arg(
            "--values",
            "--eta",
            dest="values",
            default="0.02,0.05,0.1,0.2,0.5,1",
            help="comma-separated eta / tau / gamma / k values, or geom:START:STOP:N",
        ),
    ],
    common=["seed", "out"],
)
def _sweep(args: argparse.Namespace) -> None:
    from entropy_unmask.experiments import run_schedule

    check_outputs({"--out": args.out}, {"--joint": args.joint})
    joint = _target(args)
    values = _floats(args.values, "--values")
    kwargs = _schedule_kwargs(args)
    rows = [run_schedule(joint, make_schedule(args.schedule, v, **kwargs)) for v in values]
    print(f"{joint.describe()}, H/(L log V) = {joint.entropy_fraction:.3f}")
    print(
        f"{'schedule':<34}{'KL(p||q)':>10}{'E_q[iters]':>12}{'E_p[iters]':>12}{'bound':>9}"
        f"{'off-supp':>10}{'E_p[sum TC]':>13}"
    )
    for r in rows:
        bound = f"{r['bound']:.3f}" if "bound" in r else "—"
        print(
            f"{r['schedule']:<34}{r['kl']:>10.5f}{r['expected_iterations']:>12.4f}{r['p_expected_iterations']:>12.4f}"
            f"{bound:>9}{r['off_support_mass']:>10.4f}{r['tc_sum']:>13.5f}"
        )
    if args.out:
        atomic_write_json(
            args.out,
            {"target": joint.describe(), "rows": rows, "manifest": run_manifest(package_version=__version__)},
        )


@app.command(
    "sample",
    help="draw sequences with a rule driven by the exact oracle; write them as .npy",
    args=[
        *TARGET_ARGS,
        *SCHEDULE_ARGS,
        arg("--value", type=float, default=0.1, help="eta / tau / gamma / k (default 0.1)"),
        arg("--n", type=int, default=10, help="number of sequences (default 10)"),
        arg("--out", default=None, metavar="X.npy", help="write the (n, L) int64 samples here"),
        arg("--iters-out", default=None, metavar="ITERS.npy", help="write the (n,) iteration counts here"),
    ],
    common=["seed"],
)
def _sample(args: argparse.Namespace) -> None:
    from entropy_unmask.sampling import sample

    check_outputs({"--out": args.out, "--iters-out": args.iters_out}, {"--joint": args.joint})
    check_int("--n", args.n, low=1, high=10_000_000)  # each sequence is held in memory
    joint = _target(args)
    sched = make_schedule(args.schedule, args.value, **_schedule_kwargs(args))
    x, it = sample(joint.oracle(), sched, joint.L, args.n, np.random.default_rng(args.seed))
    shown = min(len(x), 10)
    for row, k in zip(x[:shown], it[:shown]):
        print(" ".join(map(str, row.tolist())), f"  ({k} iterations)")
    if len(x) > shown:
        print(f"... {len(x) - shown} more")
    print(f"{sched}: mean iterations {it.mean():.3f} over {len(x)} samples (max {it.max()}, L = {joint.L})")
    for path, arr in ((args.out, x), (args.iters_out, it)):
        if path:
            with atomic_path(path, mode="wb") as handle:
                np.save(handle, arr)


@app.command(
    "demo", help="entropy-sum against the anchors, exactly, on two small targets (seconds)", common=["seed"]
)
def _demo(args: argparse.Namespace) -> None:
    from entropy_unmask.experiments import demo

    rows = demo(seed=args.seed)
    family = None
    for r in rows:
        if r["family"] != family:
            family = r["family"]
            print(f"\n{family}")
            print(f"{'schedule':<28}{'KL(p||q)':>10}{'E[iters]':>10}{'bound':>9}")
        bound = f"{r['bound']:.2f}" if "bound" in r else "—"
        print(f"{r['schedule']:<28}{r['kl']:>10.4f}{r['expected_iterations']:>10.3f}{bound:>9}")
    print("\nKL(p||q) and E[iters] are exact (dynamic programming over partial states, oracle predictor).")


def _print_bench(records: list[dict], summary: dict) -> None:
    print(format_table(records))
    for fam in summary["families"]:
        part = "" if fam.get("part", "main") == "main" else "  [larger L]"
        print(f"\n{fam['describe']}  H/(L log V) = {fam['entropy_fraction']:.3f}{part}")
        for rule, info in fam["rules"].items():
            b = info["best"]
            text = (
                "none reaches KL <= 0.05"
                if b is None
                else (f"{b['schedule']:<26} E[iters] {b['expected_iterations']:6.3f}  KL {b['kl']:.4f}")
            )
            print(f"  {rule:<18} {text}")
    rule = summary["scale_rule"]
    if summary["scale"]:
        print(
            f"\nlarger L: each family at the largest L <= {rule['max_L']} "
            f"with n * 2^L <= {rule['cells']:,} DP cells"
        )
    for row in summary["scale"]:
        where = f"L = {row['L']}" if row["L"] is not None else f"none above L = {row['main_L']}"
        print(f"  {row['family']:<9} {where}")
    mix = [f for f in summary["families"] if "mixture" in f["rules"]["fixed-k"]]
    if mix:
        print("\nmixture reading (lower convex hull of each rule's (E_q[iters], KL) points at KL = 0.05)")
        for fam in mix:
            es, fk = fam["rules"]["entropy-sum"]["mixture"], fam["rules"]["fixed-k"]["mixture"]
            rnd = fam["rules"].get("entropy-sum-random", {}).get("mixture")
            extra = f", entropy-sum-random {rnd:.3f} (ratio {rnd / fk:.3f})" if rnd is not None else ""
            print(f"  {fam['family']:<9} entropy-sum {es:.3f}, fixed-k {fk:.3f}, ratio {es / fk:.3f}{extra}")
    fams = [f for f in summary["families"] if "frontier" in f]
    if fams:
        print(
            "\nbest deterministic adaptive rule (exact DP over every context and every subset) at KL <= 0.05"
        )
        for fam in fams:
            fr = fam["frontier"]
            fk = fam["rules"]["fixed-k"]["best"]
            es = fam["rules"]["entropy-sum"]["best"]
            pure = (
                f"best single rule: E_p {fr['pure_iterations_p']:.3f}, E_q {fr['pure_iterations_q']:.3f}, "
                f"KL {fr['pure_kl']:.4f}"
                if "pure_kl" in fr
                else "no single rule on the grid"
            )
            ref = f"; fixed-k {fk['expected_iterations']:.3f}" if fk else ""
            ref += f", entropy-sum {es['expected_iterations']:.3f}" if es else ""
            print(f"  {fam['family']:<9} E_p[iters] >= {fr['iterations_at_target']:.3f} (hull); {pure}{ref}")
    print(
        f"\niteration bound (H + KL)/eta + 1 over {summary['bound_instances']} entropy-sum instances: "
        f"max E_p[iters]/bound = {summary['bound_max_ratio_p']:.3f} (checked), "
        f"max E_q[iters]/bound = {summary['bound_max_ratio_q']:.3f} (reported); "
        f"max E_q / (E_p + (L-1) TV) = {summary['sampler_bound_max_ratio']:.3f}"
    )
    for row in summary.get("bound_exceeded_q", []):
        print(
            f"  E_q above the bound: {row['family']} {row['schedule']}: "
            f"E_q {row['E_q']:.3f} > bound {row['bound']:.3f}"
            f" (E_p {row['E_p']:.3f}, KL {row['kl']:.3f}, off-support mass {row['off_support_mass']:.3f})"
        )
    e = summary["engine"]
    print(
        f"exact engine vs brute-force reference ({e['describe']}): "
        f"{e['reference_s'] / e['fast_s']:.0f}x faster, "
        f"|KL difference| = {abs(e['kl_ref'] - e['kl_fast']):.1e}"
    )


@app.command(
    "bench",
    help="iterations to reach KL <= 0.05: entropy-sum vs best fixed-k, EB-sampler, max-entropy, top-k",
    args=[
        arg("--quick", action="store_true", help="L=5, V=3, two families, coarse grid (seconds)"),
        arg(
            "--part",
            choices=("all", "main", "scale"),
            default="all",
            help="main: every family at L=10; scale: each family at the largest L the exact DP takes",
        ),
    ],
    common=["seed", "out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    from entropy_unmask.experiments import bench

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr)

    check_output_path(args.out)
    records, summary = bench(quick=args.quick, seed=args.seed, log=log, part=args.part)
    _print_bench(records, summary)
    if args.out:
        write_records(args.out, records)


@app.command(
    "analyze",
    help="exact counterexamples (E_q above the bound; ascending KL = H) and the best deterministic rule",
    args=[
        *TARGET_ARGS,
        arg(
            "--kl", type=float, default=0.05, help="KL target for the best deterministic rule (default 0.05)"
        ),
        arg("--no-frontier", action="store_true", help="only the two counterexamples"),
        arg("--max-pairs", type=int, default=6, help="copied pairs up to this many (2..8, default 6)"),
    ],
    common=["seed", "out"],
)
def _analyze(args: argparse.Namespace) -> None:
    from entropy_unmask.analysis import copy_counterexample, pairs_counterexample
    from entropy_unmask.experiments import frontier_summary

    if not args.kl > 0:
        raise InputError(f"--kl must be > 0, got {args.kl}")
    if not 2 <= args.max_pairs <= 8:
        raise InputError(f"--max-pairs must be in [2, 8], got {args.max_pairs}")
    check_output_path(args.out)
    if args.no_frontier and args.joint:
        raise InputError("--joint is only used by the frontier; drop --no-frontier or --joint")
    joint = None if args.no_frontier else _target(args)  # validated before any output
    out: dict[str, Any] = {}
    c = copy_counterexample()
    out["copy"] = c
    print(
        f"== E_q above (H + KL)/eta + 1: one fair bit copied to L = {c['L']} positions, V = {c['V']}, "
        f"eta = {c['eta']:g}, uniform off-support fallback"
    )
    print(
        f"H = {c['H']:.4f}  KL = {c['kl']:.4f}  bound = {c['bound']:.4f}  E_p = {c['E_p']:.4f}  "
        f"E_q = {c['E_q']:.4f}  off-support mass = {c['off_support_mass']:.3f}  TV = {c['tv']:.3f}  "
        f"E_p + (L-1) TV = {c['sampler_bound']:.4f}"
    )
    rows = pairs_counterexample(tuple(range(2, args.max_pairs + 1)))
    out["pairs"] = rows
    print(
        f"\n== independent copied pairs, eta = {rows[0]['eta']:g}: ascending order with the crossing token "
        "has KL = H(X0) at any L (asc-nc: ascending, no crossing token)"
    )
    print(
        f"{'pairs':>6}{'L':>4}{'H':>9}{'KL asc':>9}{'E[it] asc':>11}{'KL asc-nc':>11}{'E[it] asc-nc':>14}"
        f"{'KL random':>11}{'E[it] random':>14}"
    )

    def z(x: float) -> float:  # print float noise around an exact 0 (|x| < 1e-12) as 0, not -0
        return 0.0 if abs(x) < 1e-12 else x

    for r in rows:
        print(
            f"{r['pairs']:>6}{r['L']:>4}{r['H']:>9.4f}{r['kl_ascending']:>9.4f}{r['iters_ascending']:>11.3f}"
            f"{z(r['kl_ascending_no_crossing']):>11.4f}{r['iters_ascending_no_crossing']:>14.3f}"
            f"{r['kl_random']:>11.4f}{r['iters_random']:>14.3f}"
        )
    if joint is not None:
        fr = frontier_summary(joint, args.kl)
        out["frontier"] = {"target": joint.describe(), **fr}
        print(f"\n== best deterministic adaptive rule on {joint.describe()} at KL <= {args.kl:g}")
        print(
            f"lower bound on E_p[iterations] for every deterministic rule: {fr['iterations_at_target']:.4f}"
        )
        if "pure_kl" in fr:
            print(
                f"best single DP rule (lambda = {fr['pure_lambda']:.3g}), checked by the exact engine: "
                f"E_p = {fr['pure_iterations_p']:.4f}, E_q = {fr['pure_iterations_q']:.4f}, "
                f"KL = {fr['pure_kl']:.5f}"
            )
            print(f"its first step reveals positions {fr['pure_first_set']}")
        print("hull (E_p[iterations], KL): " + ", ".join(f"({x:.3f}, {y:.4f})" for x, y in fr["hull"]))
    if args.out:
        atomic_write_json(args.out, {**out, "manifest": run_manifest(package_version=__version__)})


@app.command(
    "reproduce",
    help="KL vs iterations for every rule, iterations vs H(X0), and a learned MDM at equal iterations",
    args=[
        arg("--quick", action="store_true", help="tiny sizes (under a minute)"),
        arg("--plot", default=None, metavar="DIR", help="write kl_vs_iters.png and scaling.png here"),
    ],
    common=["seed", "out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from entropy_unmask.experiments import reproduce

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr)

    check_output_path(args.out)
    if args.plot:
        check_output_path(Path(args.plot) / "kl_vs_iters.png", "--plot")
    out = reproduce(quick=args.quick, seed=args.seed, log=log)
    print("== KL(p||q) against E[iterations], every rule (exact, oracle predictor)")
    for fam in out["curves"]:
        print(f"\n{fam['describe']}")
        print(f"{'schedule':<28}{'KL':>10}{'E[iters]':>10}")
        for info in fam["rules"].values():
            for r in info["rows"]:
                print(f"{r['schedule']:<28}{r['kl']:>10.4f}{r['expected_iterations']:>10.3f}")
    print("\n== iterations against H(X0): random codes, entropy-sum")
    print(f"{'words':>6}{'H':>8}{'eta':>6}{'KL':>9}{'E[iters]':>10}{'bound':>8}{'iters*eta/H':>13}")
    for r in out["scaling"]:
        print(
            f"{r['size']:>6}{r['entropy']:>8.3f}{r['eta']:>6.2f}{r['kl']:>9.4f}{r['expected_iterations']:>10.3f}"
            f"{r['bound']:>8.2f}{r['iters_eta_over_H']:>13.3f}"
        )
    for lr in out["learned"]:
        print(
            f"\n== learned MDM ({lr['family']}; {lr['steps']} steps, final loss {lr['final_loss']:.3f}, "
            f"{lr['train_seconds']:.0f} s) at equal iterations"
        )
        print(
            f"{'budget':>7}{'fixed-k KL (model)':>20}{'(oracle)':>10}{'eta':>6}{'ES iters (MC)':>17}"
            f"{'ES KL (model)':>15}{'(oracle)':>10}"
        )
        for r in lr["rows"]:
            head = f"{r['fixed_iterations']:>7}{r['fixed_kl_learned']:>20.4f}{r['fixed_kl_oracle']:>10.4f}"
            if "eta" in r:
                print(
                    f"{head}{r['eta']:>6.2f}{r['es_iterations_mc']:>11.3f} ± {r['es_iterations_se']:.3f}"
                    f"{r['es_kl_learned']:>15.4f}{r['es_kl_oracle']:>10.4f}"
                )
            else:
                print(f"{head}   (no eta within budget)")
    if args.out:
        atomic_write_json(args.out, {**out, "manifest": run_manifest(package_version=__version__)})
    if args.plot:
        _plots(out, Path(args.plot))


def _plots(out: dict, folder: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "matplotlib is not installed: no figures (pip install 'entropy-unmask[plots]')", file=sys.stderr
        )
        return
    folder.mkdir(parents=True, exist_ok=True)
    fams = out["curves"]
    fig, axes = plt.subplots(1, len(fams), figsize=(5 * len(fams), 4), squeeze=False)
    for ax, fam in zip(axes[0], fams):
        for rule, info in fam["rules"].items():
            rows = sorted(info["rows"], key=lambda r: r["expected_iterations"])
            ax.plot(
                [r["expected_iterations"] for r in rows],
                [max(r["kl"], 1e-6) for r in rows],
                "o-",
                label=rule,
                ms=3,
            )
        ax.axhline(0.05, color="gray", ls="--", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("E[iterations]")
        ax.set_ylabel("KL(p || q) (nats)")
        ax.set_title(fam["describe"], fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(folder / "kl_vs_iters.png", mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 4))
    for eta in sorted({r["eta"] for r in out["scaling"]}):
        rows = [r for r in out["scaling"] if r["eta"] == eta]
        ax.plot(
            [r["entropy"] for r in rows], [r["expected_iterations"] for r in rows], "o-", label=f"eta={eta:g}"
        )
    ax.set_xlabel("H(X0) (nats)")
    ax.set_ylabel("E[iterations]")
    ax.legend()
    fig.tight_layout()
    with atomic_path(folder / "scaling.png", mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)
    print(f"figures written to {folder}")


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
