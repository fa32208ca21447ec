"""The ``e2ttt`` command line: demo, bench, train, reproduce."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from e2ttt import __version__
from papershelf.cli import App, arg, check_threads, seed_value
from papershelf.errors import InputError, check_int
from papershelf.repro import check_output_path, check_outputs

app = App("e2ttt", __version__, "E²-TTT: test-time training with a closed-form chunk transition.")

RULE_CHOICES = ("e2ttt", "chunkavg", "nomomentum", "ttt-linear", "swa")


def _threads(n):
    import torch

    torch.set_num_threads(check_threads(n))


# ---- demo ---------------------------------------------------------------------------------------------
@app.command(
    "demo", help="closed form vs per-token loop (float64), speed, buffered decoding", common=("seed",)
)
def _demo(args: argparse.Namespace) -> None:
    import torch

    from e2ttt.chunk import e2ttt_chunk_update
    from e2ttt.experiments import chunk_update_throughput
    from e2ttt.layer import TinyLM
    from e2ttt.reference import chunk_loop
    from e2ttt.testing import problem, rel

    torch.set_num_threads(1)
    print(
        "chunk-end fast weights W and momentum m, float64, random per-token gates (2-layer GELU MLP memory)"
    )
    print(f"{'chunk':>6}  {'rel err W (closed vs loop)':>26}  {'rel err m':>10}")
    for L in (1, 16, 128):
        args_ = problem("mlp", B=1, H=2, d=4, dh=8, L=L, seed=args.seed + L)
        W1, m1 = e2ttt_chunk_update(*args_)
        W2, m2 = chunk_loop(*args_)
        print(f"{L:>6}  {rel(W1, W2):>26.2e}  {rel(m1, m2):>10.2e}")
    t = chunk_update_throughput(B=1, H=4, d=32, dh=64, L=256, repeat=3)
    print(
        f"\nchunk 256, 4 heads, d=32: closed form {t['closed_form_tok_s']:,.0f} tok/s, per-token loop "
        f"{t['loop_tok_s']:,.0f} tok/s ({t['closed_form_vs_loop']:.1f}x), autograd reference "
        f"{t['reference_tok_s']:,.0f} tok/s ({t['closed_form_vs_reference']:.1f}x)"
    )
    model = TinyLM(vocab=64, d_model=32, n_layers=2, n_heads=2, chunk=8, window=8, seed=args.seed).double()
    ids = torch.randint(0, 64, (1, 45), generator=torch.Generator().manual_seed(args.seed))
    with torch.no_grad():
        full, _ = model(ids)
        outs, st = [], None
        logits, st = model(ids[:, :10], return_state=True)
        outs.append(logits)
        for i in range(10, 45):
            logits, st = model(ids[:, i : i + 1], st, return_state=True)
            outs.append(logits)
    err = float((torch.cat(outs, 1) - full).abs().max())
    print(
        f"buffered decoding (prefill 10 + 35 single steps, chunk 8) vs full forward: max |Δ logits| {err:.1e}"
    )


# ---- bench --------------------------------------------------------------------------------------------
@app.command(
    "bench",
    help="closed-form chunk update vs per-token loops; E²-TTT layer training speed vs the chunk-averaged one",
    args=[
        arg("--quick", action="store_true", help="tiny sizes, seconds"),
        arg("--repeat", type=int, default=5, help="timed repeats (default 5)"),
        arg("--threads", type=int, default=1, help="torch CPU threads (default 1)"),
    ],
    common=("out",),
)
def _bench(args: argparse.Namespace) -> None:
    from e2ttt.experiments import chunk_update_throughput, layer_training_throughput
    from papershelf.bench import record, write_records

    _threads(args.threads)
    repeat = check_int("--repeat", args.repeat, low=1)
    check_output_path(args.out)  # before the run, not after it
    if args.quick:
        c = chunk_update_throughput(B=1, H=2, d=8, dh=16, L=64, repeat=1)
        lay = layer_training_throughput(B=1, T=128, d_model=32, n_heads=2, chunk=32, window=32, repeat=1)
    else:
        c = chunk_update_throughput(repeat=repeat)
        lay = layer_training_throughput(repeat=repeat)
    sfx = "-quick" if args.quick else ""
    print(f"chunk update, {c['setting']}:")
    print(
        f"  closed form {c['closed_form_tok_s']:,.0f} tok/s | per-token loop {c['loop_tok_s']:,.0f} tok/s "
        f"({c['closed_form_vs_loop']:.2f}x) | autograd reference loop {c['reference_tok_s']:,.0f} tok/s "
        f"({c['closed_form_vs_reference']:.2f}x)"
    )
    print(
        f"  shared gradient-factor stage {c['factor_stage_ms']:.1f} ms of the loop's {c['loop_ms']:.1f} ms "
        f"(closed form {c['closed_form_ms']:.1f} ms): no update that needs the per-token gradients can beat "
        f"this loop by more than {c['bound_vs_loop']:.2f}x"
    )
    ratio = lay["ratio_vs_chunkavg"]["e2ttt"]
    print(f"layer training (fwd+bwd), {lay['setting']}:")
    print(
        f"  e2ttt {lay['tok_s']['e2ttt']:,.0f} tok/s | chunkavg {lay['tok_s']['chunkavg']:,.0f} tok/s "
        f"({ratio:.3f}x)"
    )
    common = dict(package="e2ttt", version=__version__, metric="tokens/s", better="higher")
    recs = [
        record(
            **common,
            benchmark="chunk-update-vs-loop" + sfx,
            setting=c["setting"],
            candidate="closed-form",
            candidate_value=c["closed_form_tok_s"],
            baseline="per-token-loop",
            baseline_value=c["loop_tok_s"],
            repeats=c["repeats"],
            target=None if args.quick else 10.0,
            **{key: c[key] for key in ("factor_stage_ms", "loop_ms", "closed_form_ms", "bound_vs_loop")},
        ),
        record(
            **common,
            benchmark="chunk-update-vs-reference" + sfx,
            setting=c["setting"],
            candidate="closed-form",
            candidate_value=c["closed_form_tok_s_vs_reference_run"],
            baseline="reference-loop",
            baseline_value=c["reference_tok_s"],
            repeats=c["reference_repeats"],
            target=None if args.quick else 10.0,
        ),
        record(
            **common,
            benchmark="layer-train-vs-chunkavg" + sfx,
            setting=lay["setting"],
            candidate="e2ttt",
            candidate_value=lay["tok_s"]["e2ttt"],
            baseline="chunkavg",
            baseline_value=lay["tok_s"]["chunkavg"],
            repeats=lay["repeats"],
            target=None if args.quick else 0.8,
        ),
    ]
    for r in recs:
        met = {True: "met", False: "MISSED", None: "reported"}[r["met"]]
        print(f"{r['benchmark']}: ratio {r['ratio']:.3f} (target {r['target']}): {met}")
    if args.out:
        write_records(args.out, recs)
        print(f"wrote {args.out}")


# ---- train --------------------------------------------------------------------------------------------
MODEL_ARGS = [
    arg("--d-model", type=int, default=64),
    arg("--layers", type=int, default=2),
    arg("--heads", type=int, default=2),
    arg("--chunk", type=int, default=32, help="TTT chunk (default 32 at this scale; the paper: 512)"),
    arg("--window", type=int, default=32, help="SWA window (default 32; the paper: 512)"),
    arg("--base-lr", type=float, default=0.1, help="inner-loop peak learning rate (default 0.1)"),
    arg("--variant", choices=("mlp", "swiglu"), default="mlp"),
]
RUN_ARGS = [
    arg("--tasks", nargs="+", choices=("passkey", "mqar", "passkey-mini"), default=["passkey", "mqar"]),
    arg("--train-len", type=int, default=128),
    arg("--factor", type=int, default=8, help="test length = factor x train length (default 8)"),
    arg("--steps", type=int, default=500),
    arg("--batch", type=int, default=8),
    arg("--n-eval", type=int, default=20),
    arg("--threads", type=int, default=1),
]


def _model_kw(args) -> dict:
    kw = dict(
        d_model=check_int("--d-model", args.d_model, low=4),
        n_layers=check_int("--layers", args.layers, low=1),
        n_heads=check_int("--heads", args.heads, low=1),
        chunk=check_int("--chunk", args.chunk, low=1),
        window=check_int("--window", args.window, low=1),
        base_lr=args.base_lr,
        variant=args.variant,
    )
    if kw["d_model"] % kw["n_heads"]:
        raise InputError(f"--d-model {kw['d_model']} is not divisible by --heads {kw['n_heads']}")
    if not args.base_lr >= 0:
        raise InputError(f"--base-lr must be >= 0, got {args.base_lr}")
    return kw


#: the longest test sequence (``--factor`` × ``--train-len``): 8× the paper's 16K test length. Beyond it a
#: mistyped length builds samples and activations until the machine runs out of memory.
MAX_TEST_LEN = 1 << 17


def _check_run(args, rules):
    check_int("--train-len", args.train_len, low=32)
    check_int("--factor", args.factor, low=1)
    if args.factor * args.train_len > MAX_TEST_LEN:
        raise InputError(
            f"--factor {args.factor} x --train-len {args.train_len} = {args.factor * args.train_len} test "
            f"tokens; at most {MAX_TEST_LEN}"
        )
    if args.chunk >= args.train_len and any(r != "swa" for r in rules):
        raise InputError(
            f"--chunk {args.chunk} must be < --train-len {args.train_len}: training applies no update of "
            "the last chunk, so the memory would never be updated during training"
        )
    check_int("--steps", args.steps, low=1)
    check_int("--batch", args.batch, low=1)
    check_int("--n-eval", args.n_eval, low=1)
    from e2ttt.data import check_tasks

    check_tasks(tuple(args.tasks), (args.train_len, args.factor * args.train_len))


@app.command(
    "train",
    help="train a small LM with one mixing rule on the testbed tasks; save safetensors + config",
    args=[
        arg("--rule", choices=RULE_CHOICES, default="e2ttt"),
        *MODEL_ARGS,
        *RUN_ARGS,
        arg("--out", default=None, metavar="DIR", help="write model.safetensors and config.json into DIR"),
    ],
    common=("seed",),
)
def _train(args: argparse.Namespace) -> None:
    from e2ttt.data import vocab_size
    from e2ttt.experiments import build, evaluate, train
    from papershelf.repro import atomic_path, atomic_write_text

    _threads(args.threads)
    kw = _model_kw(args)
    _check_run(args, [args.rule])
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise InputError(f"--out {args.out} exists and is not a folder")
    if args.out:
        check_output_path(Path(args.out) / "model.safetensors")
    model = build(args.rule, args.seed, vocab_size(), **kw)
    t = time.perf_counter()
    train(
        model,
        tasks=tuple(args.tasks),
        length=args.train_len,
        steps=args.steps,
        batch=args.batch,
        seed=args.seed,
        log=print,
    )
    res = {}
    for task in args.tasks:
        for L in (args.train_len, args.factor * args.train_len):
            res[f"{task}@{L}"] = evaluate(model, task, L, args.n_eval)
    print(
        f"{args.rule}: trained {time.perf_counter() - t:.0f}s; "
        + ", ".join(f"{k} {v:.3f}" for k, v in res.items())
    )
    if args.out:
        from safetensors.torch import save

        out = Path(args.out)
        with atomic_path(out / "model.safetensors", mode="wb") as fh:
            fh.write(save({k: v.detach().contiguous() for k, v in model.state_dict().items()}))
        atomic_write_text(
            out / "config.json", json.dumps({"rule": args.rule, **model.config, "eval": res}, indent=2)
        )
        print(f"wrote {out}")


# ---- reproduce ----------------------------------------------------------------------------------------
@app.command(
    "reproduce",
    help="length extrapolation: train at a short context, test at 8x on passkey and MQAR, several seeds",
    args=[
        arg("--rules", nargs="+", choices=RULE_CHOICES, default=["e2ttt", "chunkavg", "swa"]),
        arg("--seeds", type=seed_value, nargs="+", default=[0, 1, 2]),
        arg("--jobs", type=int, default=1, help="parallel single-threaded runs (default 1)"),
        arg("--plot", default=None, metavar="FILE.png"),
        *MODEL_ARGS,
        *RUN_ARGS,
    ],
    common=("out",),
)
def _reproduce(args: argparse.Namespace) -> None:
    from e2ttt.experiments import extrapolation, extrapolation_targets, table
    from papershelf.repro import atomic_write_json, run_manifest

    _threads(args.threads)
    kw = _model_kw(args)
    args.rules, args.seeds = list(dict.fromkeys(args.rules)), list(dict.fromkeys(args.seeds))
    _check_run(args, args.rules)
    check_outputs({"--out": args.out, "--plot": args.plot})  # writable, and not one file for both
    res = extrapolation(
        tuple(args.rules),
        tuple(args.seeds),
        train_len=args.train_len,
        factor=args.factor,
        steps=args.steps,
        batch=args.batch,
        n_eval=args.n_eval,
        tasks=tuple(args.tasks),
        jobs=check_int("--jobs", args.jobs, low=1),
        **kw,
    )
    print()
    print(
        f"trained at {res['train_len']} tokens, tested at {res['test_len']}; "
        f"mean ± std over seeds {args.seeds}"
    )
    print(table(res))
    tg = extrapolation_targets(res)
    for t in tg:
        print(f"{t['name']}: {t['e2ttt']:.3f} vs {t['baseline']:.3f}: {'met' if t['met'] else 'MISSED'}")
    if args.out:
        atomic_write_json(args.out, {"result": res, "targets": tg, "manifest": run_manifest()})
        print(f"wrote {args.out}")
    if args.plot:
        print(f"wrote {args.plot}" if _plot(res, args.plot) else "plot skipped: matplotlib is not installed")


def _plot(res, path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from papershelf.repro import atomic_path

    keys = [k for k in next(iter(res["summary"].values())) if "@" in k]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(res["summary"])
    for i, (rule, s) in enumerate(res["summary"].items()):
        xs = [j + i * width for j in range(len(keys))]
        ax.bar(xs, [s[k]["mean"] for k in keys], width, yerr=[s[k]["std"] for k in keys], label=rule)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(keys))], keys, rotation=20, fontsize=8)
    ax.set_ylabel("accuracy")
    ax.legend()
    fig.tight_layout()
    with atomic_path(path, mode="wb") as fh:
        fig.savefig(fh, format="png")
    plt.close(fig)
    return True


def main(argv=None) -> int:
    if argv is None:
        app.run()
    return app.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
