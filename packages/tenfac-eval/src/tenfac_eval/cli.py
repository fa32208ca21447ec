"""The ``tenfac-eval`` command line: fit / leaderboard / predict on your files, demo / bench / reproduce."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from pathlib import Path

import numpy as np

from papershelf.bench import record, write_records
from papershelf.cli import App, arg
from papershelf.errors import InputError, check_int, check_number
from papershelf.repro import atomic_write_json, atomic_write_text, run_manifest, seed_everything
from tenfac_eval import __version__
from tenfac_eval.data import read_groups, read_ratings
from tenfac_eval.model import TenFac

app = App(
    "tenfac-eval",
    __version__,
    "Fine-grained evaluation: pretrain on autorater ratings, calibrate on a few human labels, infer.",
)
PKG = "tenfac-eval"
RESULTS = Path(__file__).resolve().parents[2] / "results"


def _say(args: argparse.Namespace, msg: str) -> None:
    if not getattr(args, "quiet", False):
        print(msg, file=sys.stderr)


@app.command(
    "fit",
    help="stage 1 on autorater ratings + stage 2 on human ratings; writes the model as JSON",
    args=[
        arg("--ratings", required=True, help="autorater ratings: CSV/JSONL with prompt,model,rater,rating"),
        arg("--human", required=True, help="human calibration ratings (rater column optional)"),
        arg("--scale", default="1-5", help="autorater scale, e.g. 1-5 or 0,1 (default 1-5)"),
        arg("--human-scale", default=None, help="human scale (default: --scale)"),
        arg("--human-rater", default="human", help="rater id of the human rows (default: human)"),
        arg("--rank", type=int, default=4, help="interaction rank K (default 4)"),
        arg("--l2", type=float, default=1.0, help="stage-1 Gaussian penalty on the factors (default 1)"),
    ],
    common=["seed", "out", "quiet"],
)
def _fit(args: argparse.Namespace) -> None:
    if not args.out:
        raise InputError("--out is required (the model JSON file to write)")
    auto = read_ratings(args.ratings, scale=args.scale)
    human = read_ratings(args.human, scale=args.human_scale or args.scale, default_rater=args.human_rater)
    bad = sorted(set(human.rater.tolist()) - {args.human_rater})
    if bad:
        raise InputError(
            f"unknown rater id(s) in the human set: {bad[:3]}; expected only {args.human_rater!r}"
        )
    model = TenFac(
        check_int("--rank", args.rank, low=0, high=64),
        l2=check_number("--l2", args.l2, low=0),
        seed=args.seed,
    )
    t0 = time.perf_counter()
    model.fit(auto, human, rater=args.human_rater)
    model.save(args.out)
    _say(
        args,
        f"fitted {len(model.prompts_)} prompts x {len(model.models_)} models x {len(model.raters_)} "
        f"autoraters on {len(auto)} autorater + {len(human)} human ratings "
        f"in {time.perf_counter() - t0:.1f}s",
    )
    print(f"wrote {args.out}")


def _table(rows: list[dict], keys: list[str]) -> str:
    def fmt(v):
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    cells = [keys] + [[fmt(r[k]) for k in keys] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(keys))]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(keys))) for c in cells)


def _write_rows(path: str, rows: list[dict]) -> None:
    if path.endswith(".json"):
        atomic_write_json(path, rows)
        return
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


@app.command(
    "leaderboard",
    help="rank models by mean human score with intervals, overall or per prompt group",
    args=[
        arg("--model", required=True, help="model JSON written by `fit`"),
        arg("--groups", default=None, help="CSV with columns prompt,group"),
        arg("--ci", choices=("wald", "debiased"), default="wald", help="interval type (default wald)"),
        arg("--level", type=float, default=0.95, help="confidence level (default 0.95)"),
    ],
    common=["out"],
)
def _leaderboard(args: argparse.Namespace) -> None:
    model = TenFac.load(args.model)
    groups = read_groups(args.groups) if args.groups else None
    rows = model.leaderboard(groups, ci=args.ci, level=args.level)
    print(_table(rows, ["group", "rank", "model", "estimate", "lower", "upper", "n_prompts"]))
    if args.out:
        _write_rows(args.out, rows)


@app.command(
    "predict",
    help="predicted human rating distribution for (prompt, model) pairs; optional fold-in of new ids",
    args=[
        arg("--model", required=True, help="model JSON written by `fit`"),
        arg("--pairs", required=True, help="CSV with columns prompt,model"),
        arg("--fold-in", default=None, help="autorater ratings of new prompts/models to fold in first"),
        arg("--rater", default=None, help="predict this autorater instead of the human head"),
    ],
    common=["out"],
)
def _predict(args: argparse.Namespace) -> None:
    model = TenFac.load(args.model)
    if args.fold_in:
        new = read_ratings(args.fold_in, scale=model.auto_scale_)
        new_prompts = set(new.prompt.tolist()) - set(model.prompts_)
        new_models = set(new.model.tolist()) - set(model.models_)
        if not new_prompts and not new_models:
            raise InputError("--fold-in ratings contain no new prompt or model id")
        if new_models:
            model.fold_in_models(new.subset(~np.isin(new.prompt, list(new_prompts))))
        if new_prompts:
            model.fold_in_prompts(new.subset(np.isin(new.prompt, list(new_prompts))))
    p = Path(args.pairs)
    if not p.is_file():
        raise InputError(f"pairs file {args.pairs!r} does not exist")
    with p.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or not {"prompt", "model"} <= set(reader.fieldnames):
            raise InputError(f"{p.name}: expected columns prompt,model")
        pairs = [(r["prompt"], r["model"]) for r in reader]
    if not pairs:
        raise InputError(f"{p.name}: no rows")
    prompts, models = [a for a, _ in pairs], [b for _, b in pairs]
    probs = model.predict_proba(prompts, models, rater=args.rater)
    scale = model.human_scale_ if args.rater is None else model.auto_scale_
    rows = []
    for (pr, m), row in zip(pairs, probs, strict=True):
        d = {"prompt": pr, "model": m, "expected": float(row @ np.asarray(scale))}
        d.update({f"p_{v:g}": float(x) for v, x in zip(scale, row, strict=True)})
        rows.append(d)
    if args.out:
        _write_rows(args.out, rows)
        print(f"wrote {len(rows)} predictions to {args.out}")
    else:
        print(_table(rows, list(rows[0])))


@app.command(
    "demo",
    help="simulated ratings: fit, compare with the anchors, print a leaderboard (~10 s)",
    common=["seed"],
)
def _demo(args: argparse.Namespace) -> None:
    from tenfac_eval.experiments import compare_predictions
    from tenfac_eval.simulate import simulate, split_human

    seed_everything(args.seed)
    sim = simulate(600, 6, 3, rank=2, seed=args.seed)
    print("600 prompts x 6 models x 3 autoraters (1..5); human labels on 10% of (prompt, model) cells\n")
    res = compare_predictions(sim.autorater, sim.human_all, frac=0.1, rank=2, seed=args.seed)
    print("held-out per-(prompt, model) human log-loss (lower is better)")
    print(_table([{"method": k, "log-loss": v} for k, v in res["logloss"].items()], ["method", "log-loss"]))
    cal, _ = split_human(sim.human_all, 0.1, seed=args.seed)
    model = TenFac(2, seed=args.seed).fit(sim.autorater, cal)
    truth = dict(zip(sim.models, sim.human_mean.mean(0), strict=True))
    rows = [dict(r, truth=float(truth[r["model"]])) for r in model.leaderboard()]
    print("\nleaderboard: mean human score with 95% Wald intervals, and the simulation's truth")
    print(_table(rows, ["rank", "model", "estimate", "lower", "upper", "truth"]))


def _records(res: dict, quick: bool) -> list[dict]:
    setting = res["setting"]
    pred, rob, cov = res["prediction"], res["robustness"], res["coverage"]["methods"]
    common = {"package": PKG, "version": __version__}
    recs = [
        record(
            **common,
            benchmark="sim-human-logloss",
            setting={"P": setting["P"], "M": setting["M"], "R": setting["R"], "human_frac": 0.1, "rank": 2},
            metric="held-out per-cell human log-loss",
            better="lower",
            candidate="tenfac",
            candidate_value=pred["logloss"]["tenfac"],
            baseline="human-only per-prompt",
            baseline_value=pred["logloss"]["human-only"],
            repeats=1,
            target=0.8,
            others=pred["logloss"],
        ),
        record(
            **common,
            benchmark="sim-inverted-autorater-logloss",
            setting={
                "P": setting["P"],
                "M": setting["M"],
                "autoraters": "inverted + noise",
                "human_frac": 0.1,
            },
            metric="held-out per-cell human log-loss",
            better="lower",
            candidate="tenfac",
            candidate_value=rob["logloss"]["tenfac"],
            baseline="human-only per-prompt",
            baseline_value=rob["logloss"]["human-only"],
            repeats=1,
            target=1.02,
            others=rob["logloss"],
        ),
        record(
            **common,
            benchmark="fit-time",
            setting={"P": setting["P"], "M": setting["M"], "R": setting["R"], "rank": 2},
            metric="seconds to fit both stages",
            better="lower",
            candidate="tenfac",
            candidate_value=pred["fit_seconds"],
            baseline="budget (60 s)",
            baseline_value=60.0,
            repeats=1,
            target=1.0,
        ),
    ]
    for method in ("tenfac-wald", "tenfac-debiased"):
        rec = record(
            **common,
            benchmark=f"model-mean-ci-width-{method.split('-')[1]}",
            setting=res["coverage"]["setting"] | {"n_sims": res["coverage"]["n_sims"]},
            metric="mean 95% CI width for model means",
            better="lower",
            candidate=method,
            candidate_value=cov[method]["mean_width"],
            baseline="ppi++",
            baseline_value=cov["ppi++"]["mean_width"],
            repeats=res["coverage"]["n_sims"],
            target=1.0,
            coverage=cov[method]["coverage"],
            baseline_coverage=cov["ppi++"]["coverage"],
        )
        rec["met"] = bool(rec["met"] and cov[method]["coverage"] >= 0.93)
        recs.append(rec)
    if "digits" in res:
        d = res["digits"]["prediction"]["logloss"]
        recs.append(
            record(
                **common,
                benchmark="digits-human-logloss",
                setting={"P": res["digits"]["n_prompts"], "M": 12, "judges": 4, "human_frac": 0.1},
                metric="held-out per-cell human log-loss",
                better="lower",
                candidate="tenfac",
                candidate_value=d["tenfac"],
                baseline="human-only per-prompt",
                baseline_value=d["human-only"],
                repeats=1,
                target=0.8,
                others=d,
            )
        )
    return recs


_RUN_ARGS = [
    arg("--quick", action="store_true", help="tiny sizes, seconds"),
    arg("--sims", type=int, default=None, help="coverage simulations (default 200; quick 3)"),
]


@app.command(
    "bench",
    help="targets side by side with the anchors in one run; --out FILE.json records",
    args=_RUN_ARGS,
    common=["seed", "out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    from tenfac_eval.experiments import headline

    sims = None if args.sims is None else check_int("--sims", args.sims, low=1)
    seed_everything(args.seed)
    res = headline(quick=args.quick, seed=args.seed, n_sims=sims, progress=lambda m: _say(args, m))
    recs = _records(res, args.quick)
    for r in recs:
        met = "-" if r["met"] is None else ("met" if r["met"] else "NOT met")
        print(
            f"{r['benchmark']:34s} {r['candidate']:16s} {r['candidate_value']:.4f}  {r['baseline']:22s} "
            f"{r['baseline_value']:.4f}  ratio {r['ratio']:.3f}  target {r['target']}  {met}"
        )
    if args.out:
        write_records(args.out, recs)


@app.command(
    "reproduce",
    help="the headline experiment at small scale; writes results/reproduce.json",
    args=[*_RUN_ARGS, arg("--show", default=None, metavar="FILE", help="print the summary of a saved run")],
    common=["seed", "out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from tenfac_eval.experiments import headline

    if args.show:
        path = Path(args.show)
        if not path.is_file():
            raise InputError(f"--show file {args.show!r} does not exist")
        try:
            _print_summary(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError(f"{path.name} is not a reproduce result file") from None
        return
    sims = None if args.sims is None else check_int("--sims", args.sims, low=1)
    seed_everything(args.seed)
    t0 = time.perf_counter()
    res = headline(quick=args.quick, seed=args.seed, n_sims=sims, progress=lambda m: _say(args, m))
    res["records"] = _records(res, args.quick)
    res["manifest"] = run_manifest(command="tenfac-eval reproduce", seconds=time.perf_counter() - t0)
    out = args.out or str(RESULTS / ("reproduce-quick.json" if args.quick else "reproduce.json"))
    _print_summary(res)
    atomic_write_json(out, res)
    print(f"wrote {out}")


def _print_summary(res: dict) -> None:
    pred = res["prediction"]
    print(
        "held-out per-cell human log-loss, 10% human labels (simulated, P x M x R = "
        f"{res['setting']['P']} x {res['setting']['M']} x {res['setting']['R']})"
    )
    for k, v in pred["logloss"].items():
        print(f"  {k:14s} {v:.4f}")
    if "oracle_logloss" in pred:
        print(f"  {'oracle':14s} {pred['oracle_logloss']:.4f}  (the simulation's true probabilities)")
        ho, tf, orc = pred["logloss"]["human-only"], pred["logloss"]["tenfac"], pred["oracle_logloss"]
        closed = 100 * (ho - tf) / (ho - orc)
        print(f"  oracle / human-only = {orc / ho:.3f}; TenFac closes {closed:.0f}% of the gap")
    print(f"  stage-1 L-BFGS iterations {pred['stage1_iterations']}")
    print(
        f"  tenfac / human-only = {pred['ratio_tenfac_over_human_only']:.3f}; fit {pred['fit_seconds']:.1f}s"
    )
    print("inverted autorater: " + ", ".join(f"{k} {v:.4f}" for k, v in res["robustness"]["logloss"].items()))
    if "oracle_logloss" in res["robustness"]:
        print(f"  inverted-autorater oracle {res['robustness']['oracle_logloss']:.4f}")
    print(f"model-mean 95% intervals over {res['coverage']['n_sims']} simulations:")
    ppi = res["coverage"]["methods"]["ppi++"]["mean_width"]
    for k, v in res["coverage"]["methods"].items():
        print(
            f"  {k:16s} coverage {v['coverage']:.3f}  mean width {v['mean_width']:.4f}"
            f"  / ppi++ {v['mean_width'] / ppi:.3f}"
        )
    if "digits" in res:
        d = res["digits"]
        print(
            "digits proxy log-loss: "
            + ", ".join(f"{k} {v:.4f}" for k, v in d["prediction"]["logloss"].items())
        )
        print(f"  digits tenfac / human-only = {d['prediction']['ratio_tenfac_over_human_only']:.3f}")
        ppi = d["intervals"]["methods"]["ppi++"]["mean_width"]
        for k, v in d["intervals"]["methods"].items():
            print(
                f"  digits {k:16s} coverage {v['coverage']:.3f}  mean width {v['mean_width']:.4f}"
                f"  / ppi++ {v['mean_width'] / ppi:.3f}"
            )
        nm = res["new_model"]
        print(
            f"new model from autoraters only: truth {nm['truth']:.4f}, "
            f"tenfac fold-in {nm['tenfac_fold_in']:.4f}, "
            f"raw autorater {nm['raw_autorater']:.4f}"
        )
        for g, v in res["leaderboards"].items():
            print(
                f"  leaderboard {g}: Spearman tenfac {v['spearman_tenfac']:.3f}, "
                f"human-label means {v['spearman_human_mean']:.3f}"
            )

    for r in res.get("records", []):
        met = "-" if r["met"] is None else ("met" if r["met"] else "NOT met")
        extra = f"  coverage {r['coverage']:.3f}" if "coverage" in r else ""
        print(f"target {r['benchmark']:30s} ratio {r['ratio']:.3f} (target {r['target']}){extra}  {met}")


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
