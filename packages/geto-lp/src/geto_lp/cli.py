"""The ``geto-lp`` command line: ``barycenter`` and ``palette`` on your files, and ``demo`` / ``bench`` /
``reproduce``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from geto_lp import __version__
from geto_lp.io import read_array, read_image, write_image, write_npy, write_sparse
from geto_lp.model import full_variable_count, solve_barycenter
from papershelf.bench import format_table, write_records
from papershelf.cli import App, arg
from papershelf.errors import InputError, check_number
from papershelf.repro import atomic_write_json, run_manifest

app = App(
    "geto-lp",
    __version__,
    "Exact fixed-support Wasserstein barycenters on grids with the GETO-LP (O(dMN^(1+1/d)) variables).",
)


def _max_memory(gb: float | None) -> float | None:
    return None if gb is None else check_number("--max-memory-gb", gb, low=0, low_open=True) * 2**30


SOLVE_ARGS = [
    arg("--weights", type=float, nargs="+", default=None, help="barycentric weights (normalised to sum 1)"),
    arg("--p", type=float, default=2.0, help="per-axis cost exponent: c = sum_k |x_k - y_k|^p (default 2)"),
    arg("--solver", choices=("highs-ipm", "highs-ds", "highs"), default="highs-ipm"),
    arg("--time-limit", type=float, default=None, help="seconds for HiGHS (default: none)"),
    arg("--max-memory-gb", type=float, default=None, help="refuse larger models (default: available RAM)"),
]


# ---- barycenter ----------------------------------------------------------------------------------
@app.command(
    "barycenter",
    help="exact barycenter of histograms stored as .npy arrays of the grid's shape",
    args=[
        arg("--inputs", nargs="+", required=True, metavar="FILE.npy", help="one array per histogram"),
        arg("--out", required=True, metavar="NU.npy", help="the barycenter, same shape as the inputs"),
        arg("--plans", default=None, metavar="DIR", help="write plan_<m>.npz (scipy.sparse, rows: nu)"),
        arg("--spacing", type=float, nargs="+", default=[1.0], help="cell size, one value or one per axis"),
        arg("--normalize", action="store_true", help="divide each input by its sum (else masses must agree)"),
        arg("--report", default=None, metavar="FILE.json", help="objective, costs, sizes and timings"),
        *SOLVE_ARGS,
    ],
)
def _barycenter(args: argparse.Namespace) -> None:
    arrays = [read_array(path, "input") for path in args.inputs]
    shape = arrays[0].shape
    if len(shape) == 0 or 0 in shape:
        raise InputError(f"input {args.inputs[0]!r} must be a non-empty array (the histogram on the grid)")
    for path, a in zip(args.inputs, arrays):
        if a.shape != shape:
            raise InputError(f"mismatched grid shapes: {args.inputs[0]!r} is {shape}, {path!r} is {a.shape}")
    A = np.stack([a.astype(np.float64).ravel() for a in arrays], axis=1)
    spacing = args.spacing[0] if len(args.spacing) == 1 else args.spacing
    res = solve_barycenter(
        A,
        shape,
        args.weights,
        spacing,
        p=args.p,
        normalize=args.normalize,
        solver=args.solver,
        time_limit=args.time_limit,
        max_memory=_max_memory(args.max_memory_gb),
    )
    write_npy(args.out, res.barycenter.reshape(shape))
    print(f"grid {shape}, M = {A.shape[1]}, p = {args.p:g}")
    print(f"objective      {res.objective:.12g}  (sum_m w_m W(nu, mu_m))")
    for m, cost in enumerate(res.costs):
        print(f"  W(nu, input {m}) = {cost:.12g}   weight {res.weights[m]:.4g}")
    print(f"variables      {res.n_variables:,} (full LP: {full_variable_count(shape, A.shape[1]):,})")
    print(f"time           build {res.build_seconds:.2f} s, solve {res.solve_seconds:.2f} s")
    print(f"barycenter written to {args.out}")
    if args.plans:
        folder = Path(args.plans)
        folder.mkdir(parents=True, exist_ok=True)
        for m in range(res.n_inputs):
            write_sparse(folder / f"plan_{m}.npz", res.plan(m))
        print(f"plans written to {folder}/plan_<m>.npz (rows: barycenter, columns: input m)")
    if args.report:
        atomic_write_json(
            args.report,
            {
                "inputs": args.inputs,
                "grid": list(shape),
                "objective": res.objective,
                "costs": res.costs.tolist(),
                "weights": res.weights.tolist(),
                "n_variables": res.n_variables,
                "n_constraints": res.n_constraints,
                "build_seconds": res.build_seconds,
                "solve_seconds": res.solve_seconds,
                "manifest": run_manifest(package_version=__version__),
            },
        )


# ---- palette -------------------------------------------------------------------------------------
@app.command(
    "palette",
    help="average colour palette of images (RGB histograms on bins^3) and each image recoloured to it",
    args=[
        arg("--images", nargs="+", required=True, metavar="IMG", help="PNG/JPEG (pillow) or .npy (H, W, 3)"),
        arg("--bins", type=int, default=16, help="bins per colour channel (default 16: 4096 cells)"),
        arg("--weights", type=float, nargs="+", default=None),
        arg("--out", required=True, metavar="OUT.png", help="originals, recoloured images and the palette"),
        arg(
            "--hist-out", default=None, metavar="NU.npy", help="the barycentric histogram (bins, bins, bins)"
        ),
    ],
)
def _palette(args: argparse.Namespace) -> None:
    from geto_lp.palette import composite, palette_barycenter

    if not str(args.out).lower().endswith(".png"):  # the picture is PNG: a .jpg name would mislabel it
        raise InputError(f"--out must name a .png file, got {str(args.out)!r}")
    images = [read_image(path) for path in args.images]
    res = palette_barycenter(images, bins=args.bins, weights=args.weights)
    write_image(args.out, composite(images, res.recolored, res.barycenter, res.bins))
    if args.hist_out:
        write_npy(args.hist_out, res.barycenter.reshape((res.bins,) * 3))
    print(f"{len(images)} images, {res.bins}^3 colour bins, {res.result.n_variables:,} variables")
    costs = ", ".join(f"{c:.4g}" for c in res.result.costs)
    print(f"objective {res.objective:.6g}; W2^2 to each image: {costs}")
    print(f"solve {res.result.solve_seconds:.2f} s; picture written to {args.out}")


# ---- demo / bench / reproduce --------------------------------------------------------------------
@app.command("demo", help="GETO-LP against the full LP, and known answers (a few seconds)", common=["seed"])
def _demo(args: argparse.Namespace) -> None:
    from geto_lp.experiments import demo

    rows = demo(seed=args.seed)
    print(f"{'case':<30}{'method':<10}{'variables':>11}{'objective':>16}{'expected':>12}{'seconds':>9}")
    for r in rows:
        expected = f"{r['expected']:.6g}" if "expected" in r else "—"
        print(
            f"{r['case']:<30}{r['method']:<10}{r['n_variables']:>11,}{r['objective']:>16.10g}"
            f"{expected:>12}{r['seconds']:>9.2f}"
        )
    geto, full = rows[0], rows[1]
    rel = abs(geto["objective"] - full["objective"]) / full["objective"]
    print(
        f"\nsame optimum: relative difference {rel:.1e}; "
        f"{full['n_variables'] / geto['n_variables']:.1f}x fewer variables, "
        f"{full['seconds'] / geto['seconds']:.1f}x faster than the full LP (same HiGHS)"
    )
    print(f"Dirac barycenter at {tuple(rows[2]['argmax'])}; ", end="")
    print(f"3-D translates: max |nu - known| = {rows[3]['max_error']:.1e}")


@app.command(
    "bench",
    help="GETO-LP side by side with POT's and our full LP and POT's entropic barycenters (needs [bench])",
    args=[
        arg("--quick", action="store_true", help="tiny grids in-process, seconds (POT optional)"),
        arg("--skip-scale", action="store_true", help="skip the 64x64 (M=4) and 32^3 (M=3) runs"),
        arg("--scale-only", action="store_true", help="only the 64x64 and 32^3 runs (an hour or more)"),
        arg("--skip-full-lp", action="store_true", help="skip the package's own full LP at 32x32"),
    ],
    common=["seed", "out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    from geto_lp.experiments import bench

    if args.skip_scale and args.scale_only:
        raise InputError("--skip-scale and --scale-only exclude each other (together they would run nothing)")

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr)

    records = bench(
        quick=args.quick,
        seed=args.seed,
        quiet=args.quiet,
        scale=not args.skip_scale,
        anchors=not args.scale_only,
        own_full_lp=not args.skip_full_lp,
        log=log,
    )
    print(format_table(records))
    for r in records:
        extra = []
        if "relative_difference" in r:
            extra.append(f"relative difference {r['relative_difference']:.2e}")
        if "formula_value" in r:
            extra.append(f"variables {r['candidate_value']:,.0f} = formula {r['formula_value']:,}")
        if "geto_seconds" in r:
            extra.append(
                f"solved in {r['geto_seconds']:.1f} s, peak RSS {r['geto_peak_rss_bytes'] / 2**30:.2f} GiB"
            )
        if r["metric"] in ("wall_seconds", "peak_rss_bytes") and r["ratio"] > 0:
            extra.append(f"{1 / r['ratio']:.1f}x less")
        if extra:
            print(f"{r['benchmark']}: {'; '.join(extra)}")
    if args.out:
        write_records(args.out, records)


def _fmt(x: Any, spec: str = ".6g") -> str:
    return "—" if x is None else format(x, spec)


@app.command(
    "reproduce",
    help="colour palettes, digit averaging and 3-D volume averaging (needs [bench]; plots need [plots])",
    args=[
        arg("--quick", action="store_true", help="smaller sizes, under a minute"),
        arg("--plot", default=None, metavar="DIR", help="write palette.png, digits.png, volumes.png here"),
    ],
    common=["out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from geto_lp.experiments import reproduce

    out = reproduce(quick=args.quick, quiet=args.quiet)
    pal = out["palette"]["row"]
    print(f"palette: {' + '.join(pal['images'])}, {pal['bins']}^3 bins, M = {pal['M']}")
    print(
        f"  objective {pal['objective']:.6g}, {pal['n_variables']:,} variables "
        f"(full LP {pal['full_lp_variables']:,}), {pal['seconds']:.1f} s, "
        f"support {pal['barycenter_support']} cells"
    )
    print(
        f"\n{'experiment':<11}{'method':<20}{'objective':>14}{'gap vs GETO':>13}{'support':>9}{'seconds':>10}"
    )
    for row in out["digits"]["rows"]:
        print(
            f"{'digits':<11}{row['method']:<20}{row['objective']:>14.8g}{row['gap_vs_geto']:>13.2e}"
            f"{row['support']:>9}{row['seconds']:>10.2f}"
        )
    head = f"{'objective':>12}{'known':>10}{'max |nu-known|':>16}{'mass off':>10}{'seconds':>9}"
    print(f"\n{'experiment':<11}{'method':<14}{head}")
    for row in out["volumes"]["rows"]:
        print(
            f"{'volumes':<11}{row['method']:<14}{row['objective']:>12.6g}{row['known_objective']:>10.6g}"
            f"{row['max_abs_error_vs_known']:>16.2e}{row['mass_outside_known_support']:>10.3f}{row['seconds']:>9.2f}"
        )
    if args.out:
        atomic_write_json(
            args.out,
            {
                "palette": pal,
                "digits": out["digits"]["rows"],
                "volumes": out["volumes"]["rows"],
                "quick": args.quick,
                "manifest": run_manifest(package_version=__version__),
            },
        )
    if args.plot:
        _plots(out, Path(args.plot))


def _plots(out: dict, folder: Path) -> None:
    from geto_lp.palette import composite

    folder.mkdir(parents=True, exist_ok=True)
    pal = out["palette"]
    try:
        write_image(
            folder / "palette.png",
            composite(pal["images"], pal["result"].recolored, pal["result"].barycenter, pal["result"].bins),
        )
    except ImportError:
        pass
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "matplotlib is not installed: no digit/volume figures (pip install 'geto-lp[plots]')",
            file=sys.stderr,
        )
        return
    dig = out["digits"]
    names = list(dig["barycenters"])
    m = dig["inputs"].shape[1]
    fig, axes = plt.subplots(2, max(m, len(names)), figsize=(2 * max(m, len(names)), 4.4), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for j in range(m):
        axes[0, j].imshow(dig["inputs"][:, j].reshape(dig["shape"]), cmap="gray_r")
        axes[0, j].set_title(f"input {j}", fontsize=8)
    for j, name in enumerate(names):
        axes[1, j].imshow(dig["barycenters"][name].reshape(dig["shape"]), cmap="gray_r")
        axes[1, j].set_title(name, fontsize=8)
    fig.tight_layout()
    _save(fig, folder / "digits.png")
    plt.close(fig)
    vol = out["volumes"]
    known = vol["known"]
    panels = [(f"input {j}", known.A[:, j]) for j in range(known.A.shape[1])]
    panels += [("known barycenter", known.barycenter), *vol["barycenters"].items()]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.2 * len(panels), 2.4), squeeze=False)
    for ax, (title, vec) in zip(axes[0], panels):
        ax.imshow(vec.reshape(vol["shape"]).sum(axis=2), cmap="magma")  # projection along the last axis
        ax.set_title(title, fontsize=8)
        ax.axis("off")
    fig.tight_layout()
    _save(fig, folder / "volumes.png")
    plt.close(fig)
    print(f"figures written to {folder}")


def _save(fig: Any, path: Path) -> None:
    from papershelf.repro import atomic_path

    with atomic_path(path, mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=110)


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
