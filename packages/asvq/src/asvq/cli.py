"""The ``asvq`` command line: ``train`` and ``search`` on your files; ``demo``, ``bench``, ``reproduce``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from asvq import __version__
from papershelf.bench import format_table, write_records
from papershelf.cli import App, arg, read_npy
from papershelf.errors import InputError
from papershelf.repro import atomic_path, atomic_write_json, check_outputs, run_manifest

app = App(
    "asvq", __version__, "Adaptive-Scale Vector Quantization: drop-in quantizers, diagnostics, experiments."
)

QUANTIZER_NAMES = ("asvq", "vq", "vq-ema", "simvq", "fsq", "simvq-vqp", "vq-vqp")


def _log(args: argparse.Namespace):
    def log(msg: str) -> None:
        if not getattr(args, "quiet", False):
            print(msg, file=sys.stderr)

    return log


def _load_npy(path: str, what: str) -> np.ndarray:
    arr = read_npy(path, what)
    if arr.dtype.kind not in "iuf" or arr.dtype == np.longdouble:  # complex, strings, dates, float128
        raise InputError(f"{what} must hold real numbers (int or float32/64), got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise InputError(f"{what} must be a 2-D array (rows, features), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InputError(f"{what} is empty: it must hold at least one row of at least one feature")
    if not np.isfinite(arr).all():
        raise InputError(f"{what} contains NaN or infinite values")
    return arr


def _save_npy(path: str, arr: np.ndarray) -> None:
    with atomic_path(path, mode="wb") as handle:
        np.save(handle, arr)


# ---- train -------------------------------------------------------------------------------------------
@app.command(
    "train",
    help="train a tokenizer autoencoder with one quantizer and print its codebook diagnostics",
    args=[
        arg("--data", choices=("digits", "patches", "speech"), default="digits"),
        arg("--patch", type=int, choices=(8, 16), default=8, help="patch size for --data patches"),
        arg("--quantizer", default="asvq", help=f"one of {', '.join(QUANTIZER_NAMES)} (default asvq)"),
        arg("--scale", default="per_dim", help="ASVQ scale mode: per_dim|per_code|scalar|ema_stats"),
        arg("--rotation-trick", action="store_true", help="rotation trick instead of the straight-through"),
        arg("--codebook-size", type=int, default=4096),
        arg("--dim", type=int, default=16, help="latent width d of each token"),
        arg("--tokens", type=int, default=4, help="tokens per sample"),
        arg("--steps", type=int, default=400),
        arg("--batch-size", type=int, default=64),
        arg("--lr", type=float, default=2e-3),
        arg("--quantizer-lr", type=float, default=2e-2, help="Adam step size of the codebook parameters"),
        arg("--save", default=None, metavar="MODEL.pt", help="write the trained state_dict (torch.save)"),
        arg("--indices-out", default=None, metavar="IDX.npy", help="write the test set's code indices"),
    ],
    common=["seed", "out", "quiet"],
)
def _train(args: argparse.Namespace) -> None:
    import torch

    from asvq.data import load_dataset
    from asvq.diagnostics import codebook_stats
    from asvq.registry import QUANTIZERS
    from asvq.training import train_autoencoder
    from papershelf.errors import check_int, check_number

    if args.quantizer not in QUANTIZERS:
        raise InputError(f"unknown quantizer {args.quantizer!r}; known quantizers: {', '.join(QUANTIZERS)}")
    # checked here so that the errors name the flags, before any data is loaded
    check_int("--codebook-size", args.codebook_size, low=2)
    for flag, value in (("--dim", args.dim), ("--tokens", args.tokens), ("--batch-size", args.batch_size)):
        check_int(flag, value, low=1)
    check_int("--steps", args.steps, low=2)  # the loss-spread diagnostics need two losses
    check_number("--lr", args.lr, low=0, low_open=True)
    check_number("--quantizer-lr", args.quantizer_lr, low=0, low_open=True)
    # every output refused now, not after training wrote the first
    check_outputs({"--save": args.save, "--indices-out": args.indices_out, "--out": args.out})
    options: dict[str, Any] = {}
    if args.quantizer == "asvq":
        options["scale"] = args.scale
    elif args.scale != "per_dim":  # a silently ignored flag would mislabel the run
        raise InputError(f"--scale applies to the asvq quantizer only, not {args.quantizer}")
    if args.rotation_trick:
        if args.quantizer not in ("asvq", "vq", "vq-ema", "simvq"):
            raise InputError(f"--rotation-trick applies to asvq, vq, vq-ema and simvq, not {args.quantizer}")
        options["rotation_trick"] = True
    train, test = load_dataset(args.data, patch=args.patch, seed=args.seed)
    r = train_autoencoder(
        train,
        test,
        args.quantizer,
        codebook_size=args.codebook_size,
        dim=args.dim,
        tokens=args.tokens,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        quantizer_lr=args.quantizer_lr,
        seed=args.seed,
        eval_every=max(1, args.steps // 10),
        quantizer_options=options,
        log=_log(args),
    )
    model = r.pop("model")
    with torch.no_grad():
        _, idx, _ = model(torch.from_numpy(test))
    stats = codebook_stats(idx, r["codebook_size"])
    print(f"{args.data}: {args.quantizer}, K = {r['codebook_size']}, d = {r['dim']}, {r['steps']} steps")
    print(f"  test MSE            {r['test_mse']:.6f}")
    print(f"  utilisation (train) {r['train_utilization']:.3f}   perplexity {r['train_perplexity']:.1f}")
    print(f"  utilisation (test)  {stats['utilization']:.3f}   perplexity {stats['perplexity']:.1f}")
    print(f"  dead codes (last {100} steps) {r['dead_codes'][-1]['dead']}")
    print(f"  training-loss variance (last 20%) {r['train_loss_variance']:.3e}")
    print(f"  quantizer parameters {r['quantizer_params']:,}   {1000 * r['seconds_per_step']:.1f} ms/step")
    if args.save:
        with atomic_path(args.save, mode="wb") as handle:
            torch.save(model.state_dict(), handle)
    if args.indices_out:
        _save_npy(args.indices_out, idx.numpy())
    if args.out:
        r.pop("losses")
        atomic_write_json(
            args.out, {**r, "data": args.data, "manifest": run_manifest(package_version=__version__)}
        )


# ---- search --------------------------------------------------------------------------------------------
@app.command(
    "search",
    help="nearest-code indices of the rows of a .npy array against a .npy codebook (fast chunked search)",
    args=[
        arg("--vectors", required=True, metavar="X.npy", help="(N, d) vectors"),
        arg("--codebook", required=True, metavar="C.npy", help="(K, d) codes"),
        arg("--out", required=True, metavar="IDX.npy", help="(N,) int64 indices"),
        arg("--chunk-size", type=int, default=4096),
    ],
)
def _search(args: argparse.Namespace) -> None:
    import torch

    from asvq.search import nearest_code
    from papershelf.errors import check_int

    chunk_size = check_int("--chunk-size", args.chunk_size, low=1)
    x = _load_npy(args.vectors, "--vectors")
    c = _load_npy(args.codebook, "--codebook")
    if x.shape[1] != c.shape[1]:
        raise InputError(f"--vectors have dimension {x.shape[1]} but the --codebook has {c.shape[1]}")
    check_outputs({"--out": args.out}, {"--vectors": args.vectors, "--codebook": args.codebook})
    dtype = torch.float64 if np.float64 in (x.dtype, c.dtype) else torch.float32
    # distances are invariant to a shared shift and their argmin to a shared positive scale: centring on
    # the codebook's mean and scaling to unit range keeps float32's ‖x‖² − 2x·c + ‖c‖² from cancelling
    # (data far from the origin) or overflowing (|values| above ~1e19)
    centre = c.mean(0, dtype=np.float64)
    scale = max(float(np.abs(c - centre).max()), float(np.abs(x - centre).max()), 1e-300)
    xs, cs = (x - centre) / scale, (c - centre) / scale
    idx = nearest_code(
        torch.as_tensor(xs, dtype=dtype), torch.as_tensor(cs, dtype=dtype), chunk_size=chunk_size
    )
    _save_npy(args.out, idx.numpy())
    print(f"{x.shape[0]} vectors, {c.shape[0]} codes, d = {x.shape[1]}: indices written to {args.out}")


# ---- demo / bench / reproduce ------------------------------------------------------------------------------
@app.command(
    "demo", help="codebook collapse on a mixture and a short digits run (about 20 s)", common=["seed"]
)
def _demo(args: argparse.Namespace) -> None:
    from asvq.experiments import demo

    out = demo(seed=args.seed)
    print("Collapse test: 64 codes fitted to a 64-cluster Gaussian mixture (d = 4, 200 steps)")
    print(f"{'quantizer':<24}{'utilisation':>12}{'perplexity':>12}{'MSE':>10}")
    for r in out["collapse"]:
        print(f"{r['quantizer']:<24}{r['utilization']:>12.3f}{r['perplexity']:>12.1f}{r['mse']:>10.4f}")
    print("\nDigits tokenizer, K = 1024, d = 16, 4 tokens per digit, 150 steps")
    print(f"{'quantizer':<10}{'test MSE':>10}{'util (train)':>14}{'perplexity':>12}{'params':>9}")
    for r in out["digits"]:
        print(
            f"{r['quantizer']:<10}{r['test_mse']:>10.5f}{r['train_utilization']:>14.3f}"
            f"{r['train_perplexity']:>12.0f}{r['quantizer_params']:>9,}"
        )


@app.command(
    "bench",
    help="fast search vs vector-quantize-pytorch, and ASVQ vs VQ / SimVQ on digits (K=4096, 3 seeds)",
    args=[arg("--quick", action="store_true", help="tiny sizes, seconds")],
    common=["seed", "out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    from asvq.experiments import bench

    check_outputs({"--out": args.out})
    records = bench(quick=args.quick, seed=args.seed, log=_log(args))
    print(format_table(records))
    for r in records:
        if r["benchmark"].startswith("search"):
            print(
                f"{r['benchmark']}: {r['baseline_value'] / r['candidate_value']:.2f}x faster "
                f"({r['candidate_value']:.3f} s vs {r['baseline_value']:.3f} s), same indices on "
                f"{100 * r['agreement']:.4f}% of rows"
            )
    if args.out:
        write_records(args.out, records)


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None or x != x else format(x, spec)


@app.command(
    "reproduce",
    help="collapse test, digits / 8x8 / 16x16 patch tokenizers, espeak-ng speech (needs [bench] for the "
    "vector-quantize-pytorch SimVQ; plots need [plots])",
    args=[
        arg("--quick", action="store_true", help="tiny sizes, under a minute"),
        arg("--plot", default=None, metavar="FILE.png", help="dead codes over training, per quantizer"),
    ],
    common=["out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from asvq.experiments import reproduce

    check_outputs({"--out": args.out, "--plot": args.plot})
    out = reproduce(quick=args.quick, log=_log(args))
    rec = out["recipe"]
    print(
        f"recipe: K = {rec['codebook_size']}, d = {rec['dim']}, {rec['tokens']} tokens/sample, "
        f"{rec['steps']} steps, batch {rec['batch_size']}, lr {rec['lr']:g} "
        f"(codebook {rec['quantizer_lr']:g}), "
        f"{rec['seeds']} seeds"
    )
    print("\nCollapse test (64 codes, 64-cluster mixture, d = 4): mean over seeds")
    names = list(dict.fromkeys(c["quantizer"] for c in out["collapse"]))
    for name in names:
        cs = [c for c in out["collapse"] if c["quantizer"] == name]
        print(
            f"  {name:<22} utilisation {np.mean([c['utilization'] for c in cs]):.3f}  "
            f"perplexity {np.mean([c['perplexity'] for c in cs]):.1f}"
        )
    head = (
        f"{'dataset':<10}{'quantizer':<10}{'test MSE':>10}{'MSE std':>9}{'loss std':>10}{'util':>7}"
        f"{'perplex':>9}{'dead':>7}{'params':>8}{'ms/step':>9}"
    )
    print("\n" + head)
    for s in out["summary"]:
        print(
            f"{s['dataset']:<10}{s['quantizer']:<10}{s['test_mse']:>10.5f}{_fmt(s['mse_seed_std'], '.5f'):>9}"
            f"{_fmt(s['final_loss_seed_std'], '.5f'):>10}{s['utilization']:>7.3f}{s['perplexity']:>9.0f}"
            f"{s['dead_final']:>7.0f}{s['quantizer_params']:>8,}{1000 * s['seconds_per_step']:>9.1f}"
        )
    print("\nASVQ against the issue's targets, per dataset:")
    for ds in dict.fromkeys(s["dataset"] for s in out["summary"]):
        by = {s["quantizer"]: s for s in out["summary"] if s["dataset"] == ds}
        if not {"asvq", "vq", "simvq"} <= set(by):
            continue
        a, v, sv = by["asvq"], by["vq"], by["simvq"]
        print(
            f"  {ds:<10} util/VQ {a['utilization'] / v['utilization']:.2f}x (>= 3)  "
            f"MSE/SimVQ {a['test_mse'] / sv['test_mse']:.3f} (<= 1.05)  "
            f"params/SimVQ {a['quantizer_params'] / sv['quantizer_params']:.4f} (<= 1/{rec['dim']})  "
            f"loss-std/VQ {a['final_loss_seed_std'] / v['final_loss_seed_std']:.2f} (<= 1)"
        )
    if "skipped" in out["speech"]:
        print(f"\nspeech: skipped: {out['speech']['skipped']}")
    if args.plot:
        _plot(out["summary"], args.plot)
    if args.out:
        atomic_write_json(args.out, {**out, "manifest": run_manifest(package_version=__version__)})


@app.command(
    "ablate",
    help="why ASVQ trails SimVQ: each documented ASVQ option beside SimVQ and plain VQ, same steps and seeds",
    args=[
        arg("--data", choices=("digits", "speech"), default="digits"),
        arg("--seeds", type=int, default=3),
        arg("--steps", type=int, default=400),
        arg("--codebook-size", type=int, default=4096),
    ],
    common=["out", "quiet"],
)
def _ablate(args: argparse.Namespace) -> None:
    from asvq.experiments import ablation
    from papershelf.errors import check_int

    check_int("--seeds", args.seeds, low=2)
    check_int("--steps", args.steps, low=2)  # the loss-spread diagnostics need two losses
    check_int("--codebook-size", args.codebook_size, low=2)
    check_outputs({"--out": args.out})
    out = ablation(
        args.data, seeds=args.seeds, steps=args.steps, codebook_size=args.codebook_size, log=_log(args)
    )
    st = out["setting"]
    print(
        f"{st['dataset']}: K = {st['codebook_size']}, d = {st['dim']}, {st['steps']} steps, "
        f"{st['seeds']} seeds"
    )
    print(
        f"{'variant':<22}{'test MSE':>10}{'/SimVQ':>8}{'loss std':>10}{'/VQ':>7}{'util':>7}{'perplex':>9}"
        f"{'eff-dim z':>10}{'codes':>7}{'params':>8}  window perplexity over training"
    )
    for s in out["summary"]:
        curve = " ".join(f"{v:.0f}" for _, v in s["perplexity_curve"])
        print(
            f"{s['label']:<22}{s['test_mse']:>10.5f}{s['mse_over_simvq']:>8.3f}"
            f"{_fmt(s['loss_seed_std'], '.5f'):>10}"
            f"{_fmt(s['loss_std_over_vq'], '.2f'):>7}{s['utilization']:>7.3f}{s['perplexity']:>9.0f}"
            f"{s['latent_effective_dim']:>10.1f}{s['used_code_effective_dim']:>7.1f}"
            f"{s['quantizer_params']:>8,}"
            f"  {curve}"
        )
    if args.out:
        atomic_write_json(args.out, {**out, "manifest": run_manifest(package_version=__version__)})


@app.command(
    "sweep-steps",
    help="the bench's digits recipe retrained at several training lengths: do ASVQ's gaps close with steps?",
    args=[
        arg("--steps", type=int, nargs="+", default=[400, 1000, 2000, 4000], help="training lengths"),
        arg("--seeds", type=int, default=3),
    ],
    common=["out", "quiet"],
)
def _sweep_steps(args: argparse.Namespace) -> None:
    from asvq.experiments import steps_sweep
    from papershelf.errors import check_int

    check_int("--seeds", args.seeds, low=2)
    for s in args.steps:
        check_int("--steps", s, low=2)  # the loss-spread diagnostics need two losses
    check_outputs({"--out": args.out})
    out = steps_sweep(tuple(args.steps), seeds=args.seeds, log=_log(args))
    print(f"digits: K = {out['setting']['codebook_size']}, d = {out['setting']['dim']}, {args.seeds} seeds")
    print(f"{'steps':>6}  {'quantizer':<9}{'test MSE':>10}{'MSE std':>9}{'loss std':>10}{'util':>7}")
    for r in out["rows"]:
        print(
            f"{r['steps']:>6}  {r['quantizer']:<9}{r['test_mse']:>10.5f}{r['mse_seed_std']:>9.5f}"
            f"{r['final_loss_seed_std']:>10.5f}{r['utilization']:>7.3f}"
        )
    print("\nASVQ against the issue's targets, per training length:")
    for r in out["ratios"]:
        print(
            f"  {r['steps']:>6} steps: util/VQ {r['utilization_over_vq']:.2f}x (>= 3)  "
            f"MSE/SimVQ {r['mse_over_simvq']:.3f} (<= 1.05)  loss-std/VQ {r['loss_std_over_vq']:.2f} (<= 1)  "
            f"MSE-std/VQ {r['mse_std_over_vq']:.2f}"
        )
    if args.out:
        atomic_write_json(args.out, {**out, "manifest": run_manifest(package_version=__version__)})


def _plot(summary: list[dict[str, Any]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'asvq[plots]'): no plot written", file=sys.stderr)
        return
    datasets = list(dict.fromkeys(s["dataset"] for s in summary))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4 * len(datasets), 3.2), squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        for s in summary:
            if s["dataset"] == ds:
                curve = np.array(s["dead_codes_curve"])
                ax.plot(curve[:, 0], curve[:, 1] / s["codebook_size"], marker="o", label=s["quantizer"])
        ax.set_title(ds)
        ax.set_xlabel("step")
        ax.set_ylabel("dead-code fraction")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path, mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
