"""The ``delta-mem`` command line: train, eval, demo, bench, reproduce."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from delta_mem import __version__
from papershelf.cli import App, arg, check_threads, seed_value
from papershelf.errors import InputError, check_int, check_number
from papershelf.repro import check_output_path, check_outputs

app = App(
    "delta-mem",
    __version__,
    "δ-Mem: a compact delta-rule associative memory that corrects a frozen attention backbone.",
)

MEM_ARGS = [
    arg("--rank", type=int, default=8, help="state size r (r × r state per head; default 8)"),
    arg("--heads", type=int, default=1, help="state heads per layer (default 1)"),
    arg(
        "--alpha", type=float, default=16.0, help="correction scale numerator (scale alpha/rank; default 16)"
    ),
    arg("--mode", default="standard", help="state update mode: standard, lambda_outside, no_lambda"),
    arg("--granularity", default="token", help="write granularity: token, sentence, message"),
    arg("--targets", nargs="+", default=["q", "o"], help="projections corrected (default q o)"),
    arg("--layers", type=int, nargs="+", default=None, help="attention layers to wrap (default: all)"),
    arg("--beta-bias", type=float, default=-1.5, help="initial write-gate bias b_beta (default -1.5)"),
    arg(
        "--decode-backend",
        default="auto",
        help="decode step: c (fused C step, built once with the system compiler), torch, or auto "
        "(c where it can run; default)",
    ),
]
DATA_ARGS = [
    arg("--window", type=int, default=128, help="attention window = tokens per session window (default 128)"),
    arg("--n-history", type=int, default=1, help="history windows before the question (default 1)"),
    arg("--people", type=int, default=3, help="people per dialogue (default 3)"),
    arg("--update-prob", type=float, default=0.5, help="probability that the queried fact is updated"),
]
TRAIN_ARGS = [
    arg("--steps", type=int, default=150, help="optimizer steps (default 150)"),
    arg("--batch", type=int, default=8, help="dialogues per step (default 8)"),
    arg("--lr", type=float, default=3e-3, help="learning rate (default 3e-3)"),
    arg("--lm-weight", type=float, default=0.5, help="weight of the corpus next-token loss (default 0.5)"),
    arg("--lm-batch", type=int, default=2, help="corpus windows per step for that loss (default 2)"),
    arg(
        "--lm-loss",
        choices=("ce", "kl"),
        default="ce",
        help="corpus loss: next-token cross-entropy, or KL to the frozen backbone's predictions (default ce)",
    ),
    arg("--threads", type=int, default=1, help="torch CPU threads (default 1)"),
    arg(
        "--curriculum-steps",
        type=int,
        default=0,
        help="first steps train on dialogues whose facts end right before the final window (default 0)",
    ),
]
DEFAULT_MODEL = "tiny-s"
MODEL_ARG = arg(
    "--model",
    default=None,
    help=f"testbed checkpoint (tiny-s, tiny-m) or a local HF folder (default {DEFAULT_MODEL})",
)


def _model(args) -> str:
    return args.model or DEFAULT_MODEL


def _threads(n):
    import torch

    torch.set_num_threads(check_threads(n))


def _mem_config(args):
    from delta_mem.memory import DeltaMemConfig

    return DeltaMemConfig(
        rank=args.rank,
        heads=args.heads,
        alpha=args.alpha,
        state_update_mode=args.mode,
        write_granularity=args.granularity,
        delta_targets=tuple(args.targets),
        layers=None if args.layers is None else tuple(args.layers),
        beta_bias_init=args.beta_bias,
        decode_backend=args.decode_backend,
    ).validate()


def _train_config(args, check_window: bool = True, **kw):
    from delta_mem.data import MAX_PEOPLE
    from delta_mem.experiments import TrainConfig

    cfg = TrainConfig(
        steps=check_int("--steps", getattr(args, "steps", 150), low=1),
        batch=check_int("--batch", getattr(args, "batch", 8), low=1),
        lr=check_number("--lr", getattr(args, "lr", 3e-3), low=0, low_open=True),
        lm_weight=check_number("--lm-weight", getattr(args, "lm_weight", 0.5), low=0),
        lm_batch=check_int("--lm-batch", getattr(args, "lm_batch", 2), low=1, high=256),
        lm_loss=getattr(args, "lm_loss", "ce"),
        window=check_int("--window", args.window, low=64),
        n_history=check_int("--n-history", args.n_history, low=1),
        n_people=check_int("--people", args.people, low=1, high=MAX_PEOPLE),
        update_prob=check_number("--update-prob", args.update_prob, low=0, high=1),
        curriculum_steps=check_int("--curriculum-steps", getattr(args, "curriculum_steps", 0), low=0),
        seed=args.seed,
        **kw,
    )
    if check_window:
        _check_window(cfg)
    return cfg


def _check_window(cfg) -> None:
    """The longest session a run can draw (every fact plus the update; all in one window on the
    curriculum) must fit the window: one that fits only the dialogues without an update used to fail at
    the first dialogue with one, mid-training."""
    from delta_mem.data import make_dialogue

    steps = [None] + ([0] if cfg.curriculum_steps > 0 else [])  # 0: a curriculum step
    for step in steps:
        worst = {**cfg.dialogue_kwargs(step), "update_prob": 1.0 if cfg.update_prob > 0 else 0.0}
        try:
            make_dialogue(0, **worst)
        except InputError as exc:
            raise InputError(f"--window {cfg.window} / --people {cfg.n_people}: {exc}") from None


# ---- train ----------------------------------------------------------------------------------------------
@app.command(
    "train",
    help="train δ-Mem on a frozen backbone (synthetic multi-session dialogues); save only its parameters",
    args=[
        MODEL_ARG,
        *MEM_ARGS,
        *DATA_ARGS,
        *TRAIN_ARGS,
        arg("--out", required=True, metavar="FILE.safetensors", help="where to write the adapter"),
    ],
    common=("seed",),
)
def _train(args: argparse.Namespace) -> None:
    from delta_mem.experiments import load_backbone, train_memory
    from delta_mem.io import save_adapter
    from delta_mem.wrap import count_memory_parameters

    _threads(args.threads)
    check_output_path(args.out)
    mcfg, tcfg = _mem_config(args), _train_config(args)
    model, label = load_backbone(_model(args), tcfg.window)
    t = time.perf_counter()
    train_memory(model, mcfg, tcfg)
    path = save_adapter(model, args.out)
    size = path.stat().st_size
    print(
        f"{label}: trained {count_memory_parameters(model):,} δ-Mem parameters "
        f"in {time.perf_counter() - t:.0f}s; "
        f"wrote {path} ({size / 1024:.0f} KB)"
    )


# ---- eval -----------------------------------------------------------------------------------------------
@app.command(
    "eval",
    help="recall beyond the window and in-window perplexity of a trained adapter vs the frozen backbone",
    args=[
        MODEL_ARG,
        arg("--adapter", required=True, metavar="FILE", help="a δ-Mem adapter written by `train`"),
        *DATA_ARGS,
        arg("--n", type=int, default=100, help="held-out dialogues (default 100)"),
        arg("--n-ppl", type=int, default=16, help="corpus windows for perplexity (default 16)"),
        arg("--threads", type=int, default=1),
    ],
    common=("seed", "out"),
)
def _eval(args: argparse.Namespace) -> None:
    import copy

    from delta_mem.experiments import corpus_windows, eval_dialogues, load_backbone, perplexity, recall
    from delta_mem.io import load_adapter
    from papershelf.repro import atomic_write_json

    _threads(args.threads)
    check_outputs({"--out": args.out}, {"--adapter": args.adapter})
    tcfg = _train_config(args)
    n, n_ppl = check_int("--n", args.n, low=1), check_int("--n-ppl", args.n_ppl, low=1)
    try:
        ds = eval_dialogues(n, args.seed, tcfg)
    except InputError as exc:  # "window 64 is too short ..." from the generator: name the flags
        raise InputError(f"--window {tcfg.window} / --people {tcfg.n_people}: {exc}") from None
    try:  # before any model runs: a window too short for retrieval used to fail after every other score
        from delta_mem.baselines import bm25_window

        bm25 = [bm25_window(d) for d in ds]
    except ImportError:
        bm25 = None
    except InputError as exc:
        raise InputError(f"--window {tcfg.window}: {exc}") from None
    backbone, label = load_backbone(_model(args), tcfg.window)
    model = copy.deepcopy(backbone)
    load_adapter(model, args.adapter)
    wins = corpus_windows(n_ppl, tcfg.window, 10_000 + args.seed)
    res = {
        "model": label,
        "adapter": args.adapter,
        "recall_frozen": recall(backbone, ds, use_history=False),
        "recall_delta_mem": recall(model, ds),
        "recall_delta_mem_empty_memory": recall(model, ds, use_history=False),
        "ppl_frozen": perplexity(backbone, wins),
        "ppl_delta_mem": perplexity(model, wins),
    }
    if bm25 is not None:
        res["recall_bm25"] = recall(backbone, ds, use_history=False, windows=bm25)
    for k, v in res.items():
        print(f"{k:>30}: {v:.4f}" if isinstance(v, float) else f"{k:>30}: {v}")
    if args.out:
        atomic_write_json(args.out, res)
        print(f"wrote {args.out}")


# ---- diagnose ------------------------------------------------------------------------------------------
@app.command(
    "diagnose",
    help="gradient-path checks: write-gate means and gradient norms at init and after a few curriculum steps",
    args=[
        MODEL_ARG,
        *MEM_ARGS,
        *DATA_ARGS,
        *TRAIN_ARGS,
        arg("--after", type=int, default=3, help="curriculum steps before the second check (default 3)"),
    ],
    common=("seed",),
)
def _diagnose(args: argparse.Namespace) -> None:
    from delta_mem.experiments import diagnose, load_backbone, seed_memory, train_memory

    _threads(args.threads)
    mcfg = _mem_config(args)
    after = check_int("--after", args.after, low=1)
    tcfg = _train_config(args, log_every=10)
    tcfg.steps, tcfg.curriculum_steps, tcfg.lm_weight, tcfg.curriculum_chat = after, after, 0.0, 8
    _check_window(tcfg)  # now on the curriculum: every fact in the last history window
    model, label = load_backbone(_model(args), tcfg.window)
    from delta_mem.wrap import attach_delta_mem

    attach_delta_mem(model, mcfg)
    seed_memory(model, tcfg.seed)  # the weights training starts from (it was unseeded: "at init" varied)

    def show(tag, d):
        betas = " ".join(f"{b:.3f}" for b in d["beta_mean_per_layer"])
        print(f"{label} {tag}: answer loss {d['answer_loss']:.3f}; mean write gate β per layer: {betas}")
        for k, v in d["grad_norm"].items():
            print(f"    grad norm {k:<18} {v:.3g}")

    show("at init", diagnose(model, tcfg))
    print(f"training {after} steps on the curriculum (fact just before the window, question right after)")
    train_memory(model, mcfg, tcfg)
    show(f"after {after} steps", diagnose(model, tcfg))


# ---- demo -----------------------------------------------------------------------------------------------
def _greedy_logits(model, prompt, steps: int):
    """The logits of a prefill and ``steps`` greedy single-token decode steps (a new conversation)."""
    import torch

    from delta_mem.experiments import _cache_kwargs
    from delta_mem.wrap import reset_state

    reset_state(model)
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        logits = [out.logits[:, -1]]
        for _ in range(steps):
            out = model(input_ids=out.logits[:, -1:].argmax(-1), use_cache=True, **_cache_kwargs(out))
            logits.append(out.logits[:, -1])
    return torch.stack(logits, 1)


@app.command(
    "demo",
    help="a random 2-layer Llama: δ-Mem attaches as the identity, remembers across windows, scans agree",
    common=("seed",),
)
def _demo(args: argparse.Namespace) -> None:
    import copy
    import tempfile
    from pathlib import Path

    import torch

    from delta_mem.experiments import random_llama
    from delta_mem.io import load_adapter, save_adapter
    from delta_mem.memory import DeltaMemConfig
    from delta_mem.reference import scan_reference
    from delta_mem.scan import scan_chunked, scan_recurrent
    from delta_mem.wrap import (
        attach_delta_mem,
        count_memory_parameters,
        decode_step_path,
        get_state,
        reset_state,
        set_decode_backend,
    )

    torch.set_num_threads(1)
    model = random_llama(args.seed, hidden=64)
    ids = torch.randint(0, 256, (1, 48), generator=torch.Generator().manual_seed(args.seed))
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        names = attach_delta_mem(model, DeltaMemConfig())
        same = float((model(input_ids=ids).logits - ref).abs().max())
        for lin in (m for n, m in model.named_modules() if n.endswith("deltas.q") or n.endswith("deltas.o")):
            lin.weight.normal_(0, 0.3)
        reset_state(model)
        a = model(input_ids=ids).logits  # empty memory
        b = model(input_ids=ids).logits  # same window again: the memory now holds the first pass
    print(f"wrapped {len(names)} attention layers; state per layer {tuple(get_state(model)[0].shape[-2:])}")
    print(f"{'check':<52} {'value':>12}")
    print(f"{'max |logits - backbone| at init (zero corrections)':<52} {same:>12.3g}")
    print(
        f"{'max |logits(2nd pass) - logits(1st)| (memory carries)':<52} {float((a - b).abs().max()):>12.3g}"
    )
    with tempfile.TemporaryDirectory() as d:
        p = save_adapter(model, Path(d) / "a.safetensors")
        kb = p.stat().st_size / 1024
        fresh = random_llama(args.seed, hidden=64)
        load_adapter(fresh, p)
        with torch.no_grad():
            reset_state(fresh)
            c = fresh(input_ids=ids).logits
    print(f"{'adapter size KB (' + str(count_memory_parameters(model)) + ' params)':<52} {kb:>12.1f}")
    print(f"{'max |logits(reloaded) - logits|':<52} {float((c - a).abs().max()):>12.3g}")
    twin = copy.deepcopy(model)
    set_decode_backend(twin, "torch")
    got, want = (_greedy_logits(m, ids[:, :16], 8) for m in (model, twin))
    label = f"max |decode logits ({decode_step_path(model)} step) - torch twin|"
    print(f"{label:<52} {float((got - want).abs().max()):>12.3g}")
    g = torch.Generator().manual_seed(args.seed)
    B, H, T, d = 2, 1, 96, 8
    q = torch.nn.functional.normalize(torch.randn(B, H, T, d, generator=g, dtype=torch.float64), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, H, T, d, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(B, H, T, d, generator=g, dtype=torch.float64)
    beta = torch.rand(B, H, T, d, generator=g, dtype=torch.float64)
    r0, _ = scan_reference(q, k, v, 1 - beta, beta, beta)
    for name, fn in (("loop", scan_recurrent), ("chunked", lambda *x: scan_chunked(*x, chunk=16))):
        r, _ = fn(q, k, v, 1 - beta, beta, beta)
        print(f"{'max |reads(' + name + ') - reference| (float64)':<52} {float((r - r0).abs().max()):>12.3g}")


# ---- bench / reproduce ----------------------------------------------------------------------------------
EXP_ARGS = [
    MODEL_ARG,
    *MEM_ARGS,
    *DATA_ARGS,
    *TRAIN_ARGS,
    arg("--seeds", type=seed_value, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)"),
    arg("--n-eval", type=int, default=100, help="held-out dialogues per seed (default 100)"),
    arg("--n-ppl", type=int, default=16, help="corpus windows for perplexity (default 16)"),
    arg("--decode-steps", type=int, default=64, help="timed decode steps (default 64)"),
]


def _run(args, quick: bool):
    from delta_mem.experiments import comparison

    _threads(args.threads)
    mcfg = _mem_config(args)
    sizes = {  # checked even when --quick replaces them (they were silently ignored)
        "n_eval": check_int("--n-eval", args.n_eval, low=1),
        "n_ppl": check_int("--n-ppl", args.n_ppl, low=1),
        "decode_steps": check_int("--decode-steps", args.decode_steps, low=1),
    }
    save_dir = getattr(args, "save_adapters", None)
    if save_dir is not None and Path(save_dir).exists() and not Path(save_dir).is_dir():
        raise InputError(f"--save-adapters {save_dir} exists and is not a folder")
    if quick:
        if args.model is not None:
            raise InputError("--quick runs a random tiny model; drop --model (or drop --quick to use it)")
        tcfg = _train_config(args, check_window=False, lm_source="random", log_every=1)  # --window replaced
        tcfg.steps, tcfg.batch, tcfg.window, tcfg.lm_batch, tcfg.n_people = 2, 2, 96, 1, 2
        _check_window(tcfg)
        return comparison(
            "", (args.seed,), tcfg, mcfg, n_eval=4, n_ppl=2, decode_steps=4, quick=True, save_dir=save_dir
        )
    tcfg = _train_config(args)
    seeds = tuple(check_int("--seeds entry", s, low=0) for s in args.seeds)
    return comparison(_model(args), seeds, tcfg, mcfg, **sizes, save_dir=save_dir)


def _print_targets(result):
    from delta_mem.experiments import table, targets

    print()
    print(table(result))
    d = result["decode"]
    print(
        f"decode per token: backbone {d['backbone_s_per_token'] * 1e3:.2f} ms, "
        f"δ-Mem {d['delta_mem_s_per_token'] * 1e3:.2f} ms "
        f"(median of {d['repeats']} interleaved runs; decode step: {d.get('decode_step', 'torch')})"
    )
    tg = targets(result)
    for t in tg:
        op = "<=" if t["better"] == "lower" else ">="
        print(
            f"{t['name']}: {t['value']:.4g} (target {op} {t['bound']:g}): {'met' if t['met'] else 'MISSED'}"
        )
    return tg


@app.command(
    "bench",
    help="δ-Mem vs truncated backbone, BM25 retrieval and same-size LoRA: recall, perplexity, decode time",
    args=[
        *EXP_ARGS,
        arg("--quick", action="store_true", help="random tiny model, 2 training steps, seconds"),
        arg("--result", default=None, metavar="FILE.json", help="also write the full result (every seed)"),
        arg(
            "--decode-only",
            action="store_true",
            help="only the decode overhead per token (no training); --model llama-1b-shape times a "
            "random-weight backbone with Llama-3.2-1B's shapes",
        ),
        arg(
            "--merge",
            nargs="+",
            default=None,
            metavar="RESULT.json",
            help="no training: merge --result files of runs that differ only in the seed",
        ),
        arg("--plot", default=None, metavar="FILE.png"),
        arg(
            "--save-adapters",
            default=None,
            metavar="DIR",
            help="also keep each seed's trained δ-Mem adapter in DIR (delta-mem-seed{N}.safetensors)",
        ),
    ],
    common=("out", "seed"),
)
def _bench(args: argparse.Namespace) -> None:
    from papershelf.bench import record, write_records

    merged = {f"--merge {p}": p for p in (args.merge or [])}
    check_outputs({"--out": args.out, "--result": args.result, "--plot": args.plot}, merged)
    if args.decode_only:
        return _decode_only(args)
    result = _merge(args.merge) if args.merge else _run(args, args.quick)
    tg = _print_targets(result)
    suffix = "-quick" if args.quick else ""
    med = result["median"]
    setting = {
        "model": result["model"],
        "seeds": result["seeds"],
        "window": result["train"]["window"],
        "n_history": result["train"]["n_history"],
        "steps": result["train"]["steps"],
        "batch": result["train"]["batch"],
        "n_eval": result["n_eval"],
        "state": f"{result['memory']['rank']}x{result['memory']['rank']}",
        "granularity": result["memory"]["write_granularity"],
    }
    common = dict(package="delta-mem", version=__version__, setting=setting, repeats=len(result["seeds"]))
    by = {t["name"]: t for t in tg}

    def tgt(name):
        return None if args.quick else by[name]["bound"]

    recs = []
    n = result["n_eval"]
    smooth = any(med[k] == 0 for k in ("frozen", "bm25", "lora"))

    def rv(key):  # add-one smoothing only when a baseline solved nothing (the ratio is then defined)
        return (med[key] * n + 1) / (n + 2) if smooth else med[key]

    metric = "exact fact recall beyond the window (median over seeds" + (
        ", add-one smoothed)" if smooth else ")"
    )
    for base, name in (("frozen", "recall delta_mem/frozen"), ("bm25", "recall delta_mem/bm25")):
        per_seed = result["ratios_median"][f"delta_mem/{base}"]
        recs.append(
            record(
                **common,
                benchmark=f"recall-vs-{base}{suffix}",
                metric=metric,
                better="higher",
                candidate="delta-mem",
                candidate_value=rv("delta_mem"),
                baseline="frozen-truncated" if base == "frozen" else "bm25-retrieval",
                baseline_value=rv(base),
                target=tgt(name),
                ratio_median_per_seed=per_seed if math.isfinite(per_seed) else None,
            )
        )
    recs.append(
        record(
            **common,
            benchmark=f"recall-vs-lora{suffix}",
            metric=metric + ", LoRA with the same trainable-parameter count",
            better="higher",
            candidate="delta-mem",
            candidate_value=rv("delta_mem"),
            baseline="lora",
            baseline_value=rv("lora"),
        )
    )
    recs.append(
        record(
            **common,
            benchmark=f"in-window-ppl{suffix}",
            metric="corpus perplexity in the window (median over seeds)",
            better="lower",
            candidate="delta-mem",
            candidate_value=med["ppl_delta_mem"],
            baseline="frozen",
            baseline_value=med["ppl_frozen"],
            target=tgt("ppl delta_mem/frozen"),
        )
    )
    d = result["decode"]
    recs.append(
        record(
            **common,
            benchmark=f"decode-time-per-token{suffix}",
            metric="seconds per decode step with a KV cache, batch 1 (median of interleaved runs)",
            better="lower",
            candidate="delta-mem",
            candidate_value=d["delta_mem_s_per_token"],
            baseline="backbone",
            baseline_value=d["backbone_s_per_token"],
            target=None if args.quick else 1.10,
        )
    )
    if args.result:
        from papershelf.repro import atomic_write_json, run_manifest

        atomic_write_json(args.result, {"result": result, "targets": tg, "manifest": run_manifest()})
        print(f"wrote {args.result}")
    if args.plot:
        print(
            f"wrote {args.plot}" if _plot(result, args.plot) else "plot skipped: matplotlib is not installed"
        )
    if args.out:
        write_records(args.out, recs)
        print(f"wrote {args.out}")


def _merge(paths):
    import json
    from pathlib import Path

    from delta_mem.experiments import SUMMARY_KEYS, merge_results

    results = []
    for p in paths:
        if not Path(p).is_file():
            raise InputError(f"--merge: no such file: {p}")
        not_ours = InputError(f"--merge: {p} is not a result file written by `bench --result`")
        try:
            r = json.loads(Path(p).read_text())["result"]
            ok = all(k in r for k in ("model", "n_eval", "n_ppl", "memory", "train", "rows", "decode"))
            ok = ok and isinstance(r["train"], dict) and isinstance(r["rows"], list) and bool(r["rows"])
            ok = ok and all(
                isinstance(row, dict) and {"seed", *SUMMARY_KEYS} <= set(row) for row in r["rows"]
            )
            ok = ok and isinstance(r["decode"], dict) and isinstance(r["decode"].get("ratio"), (int, float))
        except (ValueError, KeyError, TypeError):
            raise not_ours from None
        if not ok:  # a truncated or hand-edited file used to end in a KeyError traceback
            raise not_ours
        results.append(r)
    return merge_results(results)


def _decode_only(args) -> None:
    import copy

    from delta_mem.experiments import TIMING_SHAPES, decode_overhead, load_backbone, timing_llama
    from delta_mem.wrap import attach_delta_mem, decode_step_path
    from papershelf.bench import record, write_records

    _threads(args.threads)
    if _model(args) in TIMING_SHAPES:  # random weights at a real model's shapes: timing only
        backbone, label = timing_llama(args.model), args.model
    else:
        backbone, label = load_backbone(_model(args))
    wrapped = copy.deepcopy(backbone)
    attach_delta_mem(wrapped, _mem_config(args))
    steps = check_int("--decode-steps", args.decode_steps, low=1)
    d = decode_overhead(backbone, wrapped, steps=steps, repeat=9)
    step = decode_step_path(wrapped)  # what ran, not what was asked for
    print(
        f"{label}: decode per token backbone {d['backbone_s_per_token'] * 1e3:.2f} ms, "
        f"δ-Mem {d['delta_mem_s_per_token'] * 1e3:.2f} ms, ratio {d['ratio']:.3f} "
        f"(median of {d['repeats']} interleaved runs of {steps} steps, batch 1; decode step: {step})"
    )
    if args.out:
        rec = record(
            package="delta-mem",
            version=__version__,
            benchmark=f"decode-time-per-token-{label}",
            setting={"model": label, "steps": steps, "threads": args.threads, "decode_step": step},
            metric="seconds per decode step with a KV cache, batch 1 (median of interleaved runs)",
            better="lower",
            candidate="delta-mem",
            candidate_value=d["delta_mem_s_per_token"],
            baseline="backbone",
            baseline_value=d["backbone_s_per_token"],
            repeats=d["repeats"],
            target=1.10,
        )
        write_records(args.out, [rec])
        print(f"wrote {args.out}")


@app.command(
    "reproduce",
    help="the headline experiment on the testbed over seeds: table, targets, JSON, plot",
    args=[*EXP_ARGS, arg("--plot", default=None, metavar="FILE.png")],
    common=("out", "seed"),
)
def _reproduce(args: argparse.Namespace) -> None:
    from papershelf.repro import atomic_write_json, run_manifest

    check_outputs({"--out": args.out, "--plot": args.plot})  # also: not one file for both
    result = _run(args, False)
    tg = _print_targets(result)
    if args.out:
        atomic_write_json(args.out, {"result": result, "targets": tg, "manifest": run_manifest()})
        print(f"wrote {args.out}")
    if args.plot:
        print(
            f"wrote {args.plot}" if _plot(result, args.plot) else "plot skipped: matplotlib is not installed"
        )


def _plot(result, path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from papershelf.repro import atomic_path

    systems = ["frozen", "bm25", "lora", "delta_mem"]
    fig, ax = plt.subplots(figsize=(5, 3))
    for i, s in enumerate(systems):
        vals = [r[s] for r in result["rows"]]
        ax.scatter([i] * len(vals), vals, alpha=0.6)
        ax.bar(i, result["median"][s], alpha=0.3)
    ax.set_xticks(range(len(systems)), ["frozen\n(truncated)", "BM25", "LoRA", "δ-Mem"])
    ax.set_ylabel("exact recall beyond the window")
    ax.set_title(f"{result['model']}, {len(result['seeds'])} seeds")
    fig.tight_layout()
    with atomic_path(path, mode="wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    if argv is None:
        app.run()
    return app.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
